"""Incremental fetch sessions (KIP-227) with the Java client 4.0, which uses them by default.

librdkafka (confluent-kafka) never opens a fetch session (it always sends epoch -1), so the Java
client is the real client that exercises them: a consumer of 40 partitions reads records that
arrive while it polls, through one session, and sees each exactly once.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.jvm import KAFKA_HOME, java_unavailable
from strom.tools.broker_process import BrokerProcess

PROGRAM = Path(__file__).parent / "java" / "CountingConsumer.java"


class DebugBroker(BrokerProcess):
    def command(self) -> list[str]:
        return super().command() + ["--log-level", "DEBUG"]


def java_consumer(bootstrap: str, group: str, topic: str, expected: int, timeout_ms: int, *configs: str):
    return subprocess.Popen(
        [
            "java",
            "-Xshare:auto",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{KAFKA_HOME}/libs/*",
            str(PROGRAM),
            bootstrap,
            group,
            topic,
            str(expected),
            str(timeout_ms),
            *configs,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.skipif(java_unavailable() is not None, reason=str(java_unavailable()))
def test_java_consumer_reads_through_an_incremental_session(tmp_path):
    broker = DebugBroker(tmp_path / "broker", {"auto.create.topics.enable": "false"}).start()
    consumer = None
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("sess", 40, 1)])["sess"].result(30)
        total = 2000
        consumer = java_consumer(broker.bootstrap, "sessions", "sess", total, 90_000, "fetch.max.wait.ms=100")
        assert consumer.stdout.readline().strip().endswith("subscribed")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        deadline = time.monotonic() + 60
        while "created for a consumer with 40 partitions" not in broker.log_tail(1 << 20):
            assert time.monotonic() < deadline, "the Java consumer never opened a fetch session"
            time.sleep(0.2)
        for i in range(total):  # produced while the consumer polls through its session
            producer.produce("sess", value=b"v%d" % i, partition=i % 40)
            if i % 200 == 199:
                producer.flush(30)
                time.sleep(0.1)
        assert producer.flush(30) == 0
        out, _ = consumer.communicate(timeout=120)
        assert f"consumed {total} unique {total}" in out, out
        log = broker.log_tail(1 << 22)
        created = re.findall(r"fetch session (\d+) created for a consumer", log)
        assert len(created) == 1, (
            f"one session for the whole run (a session error makes the client open another): {created}"
        )
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
            consumer.wait()
        broker.stop()

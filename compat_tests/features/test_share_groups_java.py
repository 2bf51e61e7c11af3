"""Share groups with Kafka 4.3.1's Java KafkaShareConsumer against Strom: it shares a topic with a
confluent-kafka ShareConsumer of the same group (every record delivered once), its RELEASE
redelivers with delivery count 2, and the records of a Java consumer that dies holding them go to
another consumer after the acquisition lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer, ShareConsumer

from compat_tests.features import test_share_groups
from compat_tests.features.test_share_groups import LOCK_MS, _fresh
from compat_tests.support.cluster import wait
from compat_tests.support.jvm import JVM_FLAGS, KAFKA_HOME, java_unavailable, skip_unless_available
from compat_tests.support.paths import SHARED_JVM
from compat_tests.support.wire import request
from strom.protocol.schema import ApiKey
from strom.tools.broker_process import BrokerProcess

PROGRAM = Path(__file__).parent / "java" / "ShareConsumers.java"
CLIENT_4_3 = SHARED_JVM / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"


def _classpath() -> str:
    """Kafka 4.3.1's client first, then the third-party jars of Kafka 4.0 (../shared/jvm's README)."""
    libs = sorted(p for p in (KAFKA_HOME / "libs").glob("*.jar") if p.name != "kafka-clients-4.0.0.jar")
    return ":".join([str(CLIENT_4_3), *map(str, libs)])


share_broker = test_share_groups.share_broker  # the same broker settings (a broker of this module's own)


@pytest.fixture(autouse=True)
def _java_available() -> None:
    skip_unless_available(java_unavailable() or (None if CLIENT_4_3.exists() else f"no {CLIENT_4_3}"))


def _java(bootstrap: str, group: str, topic: str, mode: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["java", *JVM_FLAGS, "-cp", _classpath(), str(PROGRAM), bootstrap, group, topic, mode, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _members(bootstrap: str, group: str) -> int:
    """How many members ShareGroupDescribe lists in ``group``."""
    answer = request(int(bootstrap.rsplit(":", 1)[1]), ApiKey.SHARE_GROUP_DESCRIBE, 1,
                     {"group_ids": [group], "include_authorized_operations": False})  # fmt: skip
    return len(answer.groups[0].members)


def _records(output: str) -> list[tuple[int, int, int]]:
    """(partition, offset, delivery count) lines the program printed."""
    return [tuple(map(int, line.split())) for line in output.splitlines() if line and line[0].isdigit()]  # type: ignore[misc]


def test_java_and_confluent_share_a_topic_each_record_once(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _fresh(bootstrap, partitions=2)
    total = 400
    java = _java(bootstrap, group, topic, "accept", total)
    wait(lambda: _members(bootstrap, group) == 1, 60, "the Java consumer in the share group")
    python_seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def python_member() -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                python_seen.extend((m.partition(), m.offset()) for m in consumer.poll(0.3) if m.error() is None)
        finally:
            consumer.close()

    thread = threading.Thread(target=python_member, daemon=True)
    thread.start()
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        wait(lambda: _members(bootstrap, group) == 2, 60, "both consumers in the share group")
        for i in range(total):  # paced over ~4 s, so that both consumers find records
            producer.produce(topic, value=b"j%d" % i, partition=i % 2)
            if i % 20 == 19:
                producer.flush(10)
                time.sleep(0.2)
        producer.flush(10)
        out, err = java.communicate(timeout=120)
        assert java.returncode == 0, err[-3000:]
        java_seen = [(p, o) for p, o, _ in _records(out)]
        deadline = time.monotonic() + 60
        while len(python_seen) + len(java_seen) < total and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(30)
        if java.poll() is None:
            java.kill()
            java.wait()
    assert java_seen and python_seen
    assert sorted(java_seen + python_seen) == sorted((i % 2, i // 2) for i in range(total))


def test_java_release_redelivers_with_count_two(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _fresh(bootstrap, records=3)
    java = _java(bootstrap, group, topic, "release", 3)
    out, err = java.communicate(timeout=120)
    assert java.returncode == 0, err[-3000:]
    assert _records(out) == [(0, o, 1) for o in range(3)] + [(0, o, 2) for o in range(3)]


def test_a_java_consumer_dying_with_records_has_them_redelivered(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _fresh(bootstrap, records=5, share_record_lock_duration_ms=str(LOCK_MS))
    java = _java(bootstrap, group, topic, "hold", 1)
    out, err = java.communicate(timeout=120)
    assert "HOLDING" in out, err[-3000:]
    held = {o for _, o, _ in _records(out)}
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    counts: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while not held <= set(counts) and time.monotonic() < deadline:
            for m in consumer.poll(0.5):
                if m.error() is None:
                    counts[m.offset()] = m.delivery_count()
    finally:
        consumer.close()
    assert held and all(counts.get(o) == 2 for o in held), (held, counts)


if __name__ == "__main__":  # print the classpath (for running the program by hand)
    sys.stdout.write(_classpath() + "\n")

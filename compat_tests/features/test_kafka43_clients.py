"""Clients of the Kafka 4.3 era against Strom, with the newest versions Strom serves negotiated:
the Java client 4.3.1 (../shared/jvm/kafka-clients-4.3.1) and confluent-kafka 2.16. Which versions
each client sent is read from the broker's request record (strom.testing's fault injection)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.support.jvm import JVM_FLAGS, KAFKA_HOME, java_unavailable, skip_unless_available
from compat_tests.support.paths import SHARED_JVM

HERE = Path(__file__).resolve().parent
CLIENTS_43 = SHARED_JVM / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
QUIET = {"log_level": 0}


def _highest(records: list[dict], client_id_prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        if (r["client_id"] or "").startswith(client_id_prefix):
            out[r["api"]] = max(out.get(r["api"], -1), r["version"])
    return out


def _classpath() -> str:
    """The 4.3.1 client with Kafka 4.0's third-party jars (../shared/jvm/README.md)."""
    libs = sorted(str(p) for p in (KAFKA_HOME / "libs").glob("*.jar") if not p.name.startswith("kafka"))
    return os.pathsep.join([str(CLIENTS_43), *libs])


# What the Java client 4.3.1 negotiates with Strom as it is, and with Strom imitating Kafka 4.1
# (fault injection's version cap): the highest version both sides know.
JAVA_43_NEGOTIATES = {
    None: {"Produce": 13, "Fetch": 18, "OffsetCommit": 10, "OffsetFetch": 10, "ApiVersions": 4},
    "4.1": {"Produce": 13, "Fetch": 18, "OffsetCommit": 9, "OffsetFetch": 9, "ApiVersions": 4},
}


@pytest.mark.parametrize("release", [None, "4.1"], ids=["strom", "capped-at-4.1"])
def test_java_client_4_3_produces_consumes_and_commits_with_the_topic_id_versions(strom_broker, tmp_path, release):
    skip_unless_available(java_unavailable(javac=True) or (None if CLIENTS_43.exists() else f"no {CLIENTS_43}"))
    topic = f"java43-{release or 'strom'}"
    strom_broker.create_topic(topic, partitions=2)
    strom_broker.faults.cap_versions(release)
    strom_broker.faults.record()
    run = subprocess.run(
        [
            "java",
            *JVM_FLAGS,
            "-cp",
            _classpath(),
            str(HERE / "Kafka43Client.java"),
            strom_broker.bootstrap_servers,
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("OK 20"), run.stdout[-2000:] + run.stderr[-4000:]
    highest = _highest(strom_broker.faults.recorded(), "")
    wanted = JAVA_43_NEGOTIATES[release]
    assert {api: highest.get(api) for api in wanted} == wanted, highest


def test_confluent_kafka_2_16_against_the_newer_versions(strom_broker):
    topic = "rdkafka43"
    strom_broker.create_topic(topic, partitions=1)
    strom_broker.faults.record()
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers, "client.id": "rdk43", **QUIET})
    for i in range(5):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(20) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": strom_broker.bootstrap_servers,
            "client.id": "rdk43",
            "group.id": "rdk43",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    try:
        consumer.subscribe([topic])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert got == [b"v%d" % i for i in range(5)]
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 5
    finally:
        consumer.close()
    highest = _highest(strom_broker.faults.recorded(), "rdk43")
    assert {
        api: highest.get(api) for api in ("Produce", "Fetch", "OffsetCommit", "OffsetFetch", "ListOffsets")
    } == EXPECTED_RDKAFKA, highest


# librdkafka 2.16's highest versions (measured here): none of the versions Kafka 4.1-4.4 added; it
# talks to Strom as to Kafka 4.0, and the newer versions must not change what it gets.
EXPECTED_RDKAFKA: dict[str, int | None] = {
    "Produce": 10,
    "Fetch": 16,
    "OffsetCommit": 9,
    "OffsetFetch": 9,
    "ListOffsets": 7,
}

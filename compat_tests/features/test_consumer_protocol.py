"""KIP-848 consumer groups (`group.protocol=consumer`) with real clients: confluent-kafka members
join, rebalance and leave while a producer runs, committing by hand after each record: nothing is
lost and nothing processed twice. The Java client 4.0 joins the same way, and Kafka 4.0's
kafka-consumer-groups.sh describes the group with its member epochs."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from compat_tests.support.admin import create_topic
from compat_tests.support.cluster import wait
from compat_tests.support.jvm import JVM_FLAGS, KAFKA_HOME, java_unavailable, kafka_tool, skip_unless_available
from compat_tests.support.wire import request
from compat_tests.support.workload import CommittingMember, PacedProducer, assert_exactly_once
from strom.protocol.schema import ApiKey

PROGRAM = Path(__file__).parent / "java" / "CountingConsumer.java"
TOPIC = "kip848"
PARTITIONS = 6


@pytest.fixture
def fast_broker(make_broker):
    return make_broker({"group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "6000"})


def _member(bootstrap: str, name: str, processed: list, lock: threading.Lock) -> CommittingMember:
    return CommittingMember(bootstrap, "kip848-group", TOPIC, name, processed, lock, {"group.protocol": "consumer"})


def test_members_join_and_leave_while_producing_nothing_lost_or_doubled(fast_broker):
    bootstrap = fast_broker.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    processed: list[bytes] = []
    lock = threading.Lock()
    writer = PacedProducer(bootstrap, TOPIC, PARTITIONS)
    sent = writer.sent
    first = _member(bootstrap, "first", processed, lock)
    members = [first]
    try:
        first.start()
        writer.start()
        wait(lambda: first.assigned == list(range(PARTITIONS)), 30, "the first member owning every partition")
        wait(lambda: len(processed) > 200, 30, "records processed by the first member")
        second = _member(bootstrap, "second", processed, lock)
        members.append(second)
        second.start()
        wait(
            lambda: len(second.assigned) == PARTITIONS // 2 and len(first.assigned) == PARTITIONS // 2,
            30,
            "a balanced split after the second member joined",
        )
        assert not set(first.assigned) & set(second.assigned)
        count = len(processed)
        wait(lambda: len(processed) > count + 200, 30, "progress after the rebalance")
        first.leave()  # leaves the group (epoch -1): the second member takes everything
        wait(lambda: second.assigned == list(range(PARTITIONS)), 30, "the second member owning every partition")
        writer.finish()
        wait(lambda: len(processed) >= len(sent), 60, "every produced record processed")
    finally:
        writer.stop()
        for m in members:
            m.stop.set()
        for m in members:
            m.leave()
    assert not [m.crash for m in members if m.crash], [m.crash for m in members if m.crash]
    assert_exactly_once(processed, sent)
    # a commit may race a new member epoch (STALE_MEMBER_EPOCH; the record is read again), nothing else
    assert not [e for m in members for e in m.errors if "commit" in e and "STALE_MEMBER_EPOCH" not in e], [
        m.errors for m in members
    ]


def test_java_client_joins_a_consumer_group_and_the_tool_describes_it(fast_broker):
    skip_unless_available(java_unavailable(needs="bin"))
    bootstrap = fast_broker.bootstrap
    create_topic(bootstrap, "kip848-java", 4)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(400):
        producer.produce("kip848-java", b"j%d" % i, partition=i % 4)
    assert producer.flush(30) == 0
    java = subprocess.Popen(
        [
            "java",
            *JVM_FLAGS,
            "-cp",
            f"{KAFKA_HOME}/libs/*",
            str(PROGRAM),
            bootstrap,
            "kip848-java-group",
            "kip848-java",
            "400",
            "60000",
            "group.protocol=consumer",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = java.communicate(timeout=120)
    finally:
        if java.poll() is None:
            java.kill()
            java.wait()
    assert "consumed 400 unique 400" in out, out
    listed = kafka_tool("kafka-consumer-groups.sh", "--bootstrap-server", bootstrap, "--list", "--type")
    assert any(line.split() == ["kip848-java-group", "Consumer"] for line in listed.stdout.splitlines()), listed.stdout
    described = kafka_tool(
        "kafka-consumer-groups.sh",
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--group",
        "kip848-java-group",
        "--offsets",
    )
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("kip848-java-group")]
    assert sorted((r[2], r[3]) for r in rows) == [(str(p), "100") for p in range(4)], described.stdout


def test_regex_subscription_and_a_static_member_coming_back(fast_broker):
    bootstrap = fast_broker.bootstrap
    for name in ("re-a", "re-b", "other"):
        create_topic(bootstrap, name, 2)

    def member():
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "kip848-regex",
                "group.protocol": "consumer",
                "group.instance.id": "static-1",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["^re-.*"])
        return consumer

    def assigned(consumer, count):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(consumer.assignment()) < count:
            consumer.poll(0.2)
        return sorted((p.topic, p.partition) for p in consumer.assignment())

    first = member()
    try:
        assert assigned(first, 4) == [("re-a", 0), ("re-a", 1), ("re-b", 0), ("re-b", 1)]
        create_topic(bootstrap, "re-c", 1)
        assert assigned(first, 5)[-1] == ("re-c", 0), "a new topic matching the regex is assigned"
        epoch = _describe(fast_broker.port, "kip848-regex").group_epoch
    finally:
        first.close()  # a static member leaves with epoch -2: its assignment waits for it
    away = _describe(fast_broker.port, "kip848-regex")
    assert away.group_epoch == epoch and len(away.members) == 1, "the static member's place is kept"
    again = member()
    try:
        assert len(assigned(again, 5)) == 5
        back = _describe(fast_broker.port, "kip848-regex")
        assert back.group_epoch == epoch and [m.instance_id for m in back.members] == ["static-1"], (
            "the static member took its place back without a rebalance"
        )
    finally:
        again.close()


def _describe(port: int, group: str):
    return request(
        port, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False}
    ).groups[0]

"""KIP-848 consumer groups (`group.protocol=consumer`) with real clients: confluent-kafka members
join, rebalance and leave while a producer runs, committing by hand after each record: nothing is
lost and nothing processed twice. The Java client 4.0 joins the same way, and Kafka 4.0's
kafka-consumer-groups.sh describes the group with its member epochs."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.workload import PacedProducer

KAFKA_HOME = Path(os.environ.get("KAFKA_HOME", Path(__file__).resolve().parents[2] / "shared/jvm/kafka-4.0.0"))
PROGRAM = Path(__file__).parent / "kafka4" / "CountingConsumer.java"
NO_JAVA = shutil.which("java") is None or not (KAFKA_HOME / "libs").is_dir()
TOPIC = "kip848"
PARTITIONS = 6


@pytest.fixture
def fast_broker(make_broker):
    return make_broker({"group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "6000"})


class Member(threading.Thread):
    """A confluent-kafka consumer in the group: processes a record, then commits it synchronously."""

    def __init__(self, bootstrap: str, name: str, processed: list, lock: threading.Lock):
        super().__init__(daemon=True, name=name)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip848-group",
                                  "group.protocol": "consumer", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "client.id": name})
        self.processed, self.lock = processed, lock
        self.stop = threading.Event()
        self.assigned: list[int] = []
        self.errors: list[str] = []
        self.consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, partitions):
        self.assigned = sorted(set(self.assigned) | {p.partition for p in partitions})

    def _revoked(self, consumer, partitions):
        self.assigned = sorted(set(self.assigned) - {p.partition for p in partitions})

    def run(self):
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                try:
                    self.consumer.commit(message=msg, asynchronous=False)
                except KafkaException as exc:
                    # Not processed. A commit racing a new member epoch gets STALE_MEMBER_EPOCH (as from
                    # Kafka 4.0) while this member keeps the partition: read the record again. If the
                    # partition went to another member, that one reads it from the committed offset.
                    self.errors.append(f"commit: {exc}")
                    with contextlib.suppress(KafkaException):
                        self.consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
                    continue
                with self.lock:
                    self.processed.append(msg.value())
        finally:
            self.consumer.close()


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def test_members_join_and_leave_while_producing_nothing_lost_or_doubled(fast_broker):
    bootstrap = fast_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    processed: list[bytes] = []
    lock = threading.Lock()
    writer = PacedProducer(bootstrap, TOPIC, PARTITIONS)
    sent = writer.sent
    first = Member(bootstrap, "first", processed, lock)
    members = [first]
    try:
        first.start()
        writer.start()
        _wait(lambda: first.assigned == list(range(PARTITIONS)), 30, "the first member owning every partition")
        _wait(lambda: len(processed) > 200, 30, "records processed by the first member")
        second = Member(bootstrap, "second", processed, lock)
        members.append(second)
        second.start()
        _wait(lambda: len(second.assigned) == PARTITIONS // 2 and len(first.assigned) == PARTITIONS // 2, 30,
              "a balanced split after the second member joined")
        assert not set(first.assigned) & set(second.assigned)
        count = len(processed)
        _wait(lambda: len(processed) > count + 200, 30, "progress after the rebalance")
        first.stop.set()  # leaves the group (epoch -1): the second member takes everything
        first.join(30)
        _wait(lambda: second.assigned == list(range(PARTITIONS)), 30, "the second member owning every partition")
        writer.finish()
        _wait(lambda: len(processed) >= len(sent), 60, "every produced record processed")
    finally:
        writer.stop()
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    assert len(processed) == len(set(processed)), "a record was processed twice"
    assert set(processed) == set(sent), f"{len(set(sent) - set(processed))} records lost"
    # a commit may race a new member epoch (STALE_MEMBER_EPOCH; the record is read again), nothing else
    assert not [e for m in members for e in m.errors if "commit" in e and "STALE_MEMBER_EPOCH" not in e], \
        [m.errors for m in members]


@pytest.mark.skipif(NO_JAVA, reason=f"needs java and Kafka 4.0 at {KAFKA_HOME}")
def test_java_client_joins_a_consumer_group_and_the_tool_describes_it(fast_broker):
    bootstrap = fast_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("kip848-java", 4, 1)])["kip848-java"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(400):
        producer.produce("kip848-java", b"j%d" % i, partition=i % 4)
    assert producer.flush(30) == 0
    java = subprocess.Popen(["java", "-XX:TieredStopAtLevel=1", "-cp", f"{KAFKA_HOME}/libs/*", str(PROGRAM),
                             bootstrap, "kip848-java-group", "kip848-java", "400", "60000", "group.protocol=consumer"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = java.communicate(timeout=120)
    finally:
        if java.poll() is None:
            java.kill()
            java.wait()
    assert "consumed 400 unique 400" in out, out
    env = {**os.environ, "KAFKA_HOME": str(KAFKA_HOME), "KAFKA_OPTS": "-XX:TieredStopAtLevel=1"}
    listed = subprocess.run([str(KAFKA_HOME / "bin/kafka-consumer-groups.sh"), "--bootstrap-server", bootstrap,
                             "--list", "--type"], capture_output=True, text=True, timeout=120, env=env)
    assert any(line.split() == ["kip848-java-group", "Consumer"] for line in listed.stdout.splitlines()), listed.stdout
    described = subprocess.run([str(KAFKA_HOME / "bin/kafka-consumer-groups.sh"), "--bootstrap-server", bootstrap,
                                "--describe", "--group", "kip848-java-group", "--offsets"],
                               capture_output=True, text=True, timeout=120, env=env)
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("kip848-java-group")]
    assert sorted((r[2], r[3]) for r in rows) == [(str(p), "100") for p in range(4)], described.stdout


def test_regex_subscription_and_a_static_member_coming_back(fast_broker):
    bootstrap = fast_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in ("re-a", "re-b", "other"):
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)

    def member():
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip848-regex", "group.protocol": "consumer",
                             "group.instance.id": "static-1", "auto.offset.reset": "earliest"})
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
        admin.create_topics([NewTopic("re-c", 1, 1)])["re-c"].result(30)
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
        assert back.group_epoch == epoch and [m.instance_id for m in back.members] == ["static-1"], \
            "the static member took its place back without a rebalance"
    finally:
        again.close()


def _describe(port: int, group: str):
    import socket
    import struct

    from strom.protocol.codec import decode_response, encode_request
    from strom.protocol.schema import ApiKey
    body = {"group_ids": [group], "include_authorized_operations": False}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, "test", body))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        _, response = decode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, sock.recv(size, socket.MSG_WAITALL))
    return response.groups[0]

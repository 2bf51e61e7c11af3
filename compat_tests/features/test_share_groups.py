"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against Strom: several consumers of
one group never hold the same record at once; explicit RELEASE redelivers with a higher delivery
count, REJECT never again; a consumer killed while holding records has them redelivered to another
after the acquisition lock, with the delivery count raised; a record released up to the delivery
count limit is archived; read_committed share consumers skip aborted transactions."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from compat_tests.support.admin import create_topic
from compat_tests.support.brokers import start_broker
from strom.tools.broker_process import BrokerProcess

LOCK_MS = 1500  # the acquisition lock the tests' groups use (broker minimum lowered for them)


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(
        tmp_path_factory.mktemp("share-broker"),
        {"group.share.min.record.lock.duration.ms": "1000", "group.share.heartbeat.interval.ms": "500",
         "group.share.min.heartbeat.interval.ms": "500"},
    )  # fmt: skip
    try:
        yield b
    finally:
        b.stop()


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"share-{tag}", f"share-group-{tag}"


def _group_configs(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    futures = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)])
    for future in futures.values():
        future.result(30)


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 1, prefix: str = "v") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=f"{prefix}{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str, explicit: bool = False) -> ShareConsumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(config)


def _poll_until(consumer: ShareConsumer, enough, timeout_s: float = 30.0) -> list:
    """Messages polled until ``enough(messages)`` or the timeout."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not enough(out):
        for message in consumer.poll(0.5):
            assert message.error() is None, message.error()
            out.append(message)
    return out


def test_several_consumers_never_hold_the_same_record(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _names()
    create_topic(bootstrap, topic, 2)
    _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    total = 600
    seen: dict[str, list[tuple[int, int]]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def member(name: str) -> None:
        consumer = _consumer(bootstrap, group)
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                for message in consumer.poll(0.3):
                    assert message.error() is None
                    with lock:
                        seen.setdefault(name, []).append((message.partition(), message.offset()))
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(f"m{i}",), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(total):  # paced, so that every member finds records to acquire
        producer.produce(topic, value=b"x%d" % i, partition=i % 2)
        if i % 50 == 49:
            producer.flush(10)
            time.sleep(0.1)
    producer.flush(10)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if sum(len(v) for v in seen.values()) >= total:
                break
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(30)
    delivered = [tp for records in seen.values() for tp in records]
    # accepted on the next poll, well inside the 30 s lock: every record exactly once
    assert sorted(delivered) == sorted((i % 2, i // 2) for i in range(total))
    assert len([m for m, records in seen.items() if records]) >= 2, {m: len(r) for m, r in seen.items()}


def test_release_redelivers_with_a_higher_count_and_reject_archives(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _names()
    create_topic(bootstrap, topic, 1)
    _group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    _produce(bootstrap, topic, 5)
    consumer = _consumer(bootstrap, group, explicit=True)
    consumer.subscribe([topic])
    try:
        first = _poll_until(consumer, lambda got: len(got) >= 5)
        assert [(m.offset(), m.delivery_count()) for m in first] == [(o, 1) for o in range(5)]
        for message in first:
            consumer.acknowledge(message, AcknowledgeType.RELEASE if message.offset() < 2 else AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        again = _poll_until(consumer, lambda got: len(got) >= 2)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2), (1, 2)]
        for message in again:
            consumer.acknowledge(message, AcknowledgeType.REJECT)
        consumer.commit_sync()
        _produce(bootstrap, topic, 1, prefix="after")
        later = _poll_until(consumer, lambda got: len(got) >= 1)
        assert [(m.offset(), m.value()) for m in later] == [(5, b"after0")]
        for message in later:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()


HOLDER = textwrap.dedent(
    """
    import os, signal, sys
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([sys.argv[3]])
    got = []
    while not got:
        got = [m for m in c.poll(0.5) if m.error() is None]
    print(" ".join(str(m.offset()) for m in got), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_killed_consumers_records_go_to_another_after_the_lock(share_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _names()
    create_topic(bootstrap, topic, 1)
    _group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=str(LOCK_MS))
    _produce(bootstrap, topic, 10)
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.run(
        [sys.executable, str(script), bootstrap, group, topic], capture_output=True, text=True, timeout=60
    )
    assert holder.returncode == -signal.SIGKILL, holder.stderr
    held = [int(o) for o in holder.stdout.split()]
    assert held, holder.stdout
    consumer = _consumer(bootstrap, group, explicit=True)
    consumer.subscribe([topic])
    try:
        got = _poll_until(consumer, lambda got: {m.offset() for m in got} >= set(held))
        counts = {m.offset(): m.delivery_count() for m in got}
        assert all(counts[o] == 2 for o in held), counts  # delivered once to the killed consumer
        for message in got:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()


def test_records_released_up_to_the_delivery_limit_are_archived(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _names()
    create_topic(bootstrap, topic, 1)
    _group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_delivery_count_limit="2")
    _produce(bootstrap, topic, 2)
    consumer = _consumer(bootstrap, group, explicit=True)
    consumer.subscribe([topic])
    try:
        counts = []
        for _ in range(2):
            got = _poll_until(consumer, lambda got: len(got) >= 2)
            counts.append([m.delivery_count() for m in got])
            for message in got:
                consumer.acknowledge(message, AcknowledgeType.RELEASE)
            consumer.commit_sync()
        assert counts == [[1, 1], [2, 2]]
        _produce(bootstrap, topic, 1, prefix="after")
        later = _poll_until(consumer, lambda got: len(got) >= 1)
        assert [m.offset() for m in later] == [2]  # offsets 0 and 1 are archived, never again
        consumer.acknowledge(later[0], AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()


def test_read_committed_share_consumers_skip_aborted_transactions(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic, group = _names()
    create_topic(bootstrap, topic, 1)
    _group_configs(bootstrap, group, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{topic}"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=f"{outcome}-{i}".encode())
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    try:
        got = _poll_until(consumer, lambda got: len(got) >= 6, timeout_s=20)
        assert [m.value() for m in got] == [b"commit-0", b"commit-1", b"commit-2"] * 2
    finally:
        consumer.close()

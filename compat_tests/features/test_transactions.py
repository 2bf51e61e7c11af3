"""Transactions with confluent-kafka (librdkafka) against a live Strom broker.

Commit and abort; read_committed consumers see exactly the committed records, read_uncommitted
ones everything; consume-transform-produce with the consumer's offsets sent to the transaction;
a second producer with the same transactional.id fences the first; a transaction left open past
its timeout is aborted by the broker; kill -9 of the broker in the middle of transactions leaves
every transaction wholly committed or wholly aborted.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 30
FAST_ABORT = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


def _producer(bootstrap: str, tid: str, **extra) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(TIMEOUT_S)
    return p


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(TIMEOUT_S)


def _read_all(
    bootstrap: str, topic: str, isolation: str, partitions: int = 1, expect: int | None = None, idle_s: float = 1.5
) -> list[bytes]:
    """Every record a consumer with ``isolation`` gets from the start (until ``expect`` or idle)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        last = time.monotonic()
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if (expect is None or len(got) >= expect) and time.monotonic() - last > idle_s:
                    break
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            got.append(m.value())
            last = time.monotonic()
        return got
    finally:
        c.close()


def _committed_end(bootstrap: str, topic: str) -> tuple[int, int]:
    """(LSO as a read_committed consumer sees it, high watermark)."""
    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "isolation.level": isolation})
        try:
            out.append(c.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)[1])
        finally:
            c.close()
    return out[0], out[1]


def test_commit_and_abort_with_read_committed_and_uncommitted(broker):
    topic = "txn-basic"
    _create(broker.bootstrap, topic)
    p = _producer(broker.bootstrap, "basic")
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, key=b"k", value=b"commit-%d" % i)
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, key=b"k", value=b"abort-%d" % i)
    p.flush(TIMEOUT_S)  # the aborted records really reach the log
    p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value=b"commit-last")
    p.commit_transaction(TIMEOUT_S)

    committed = [b"commit-%d" % i for i in range(5)] + [b"commit-last"]
    assert _read_all(broker.bootstrap, topic, "read_committed", expect=6) == committed
    everything = _read_all(broker.bootstrap, topic, "read_uncommitted", expect=9)
    assert everything == committed[:5] + [b"abort-%d" % i for i in range(3)] + [b"commit-last"]
    # 9 records and 3 markers; nothing open, so the LSO is the high watermark
    assert _committed_end(broker.bootstrap, topic) == (12, 12)


def test_open_transaction_holds_back_read_committed(broker):
    topic = "txn-open"
    _create(broker.bootstrap, topic)
    p = _producer(broker.bootstrap, "open")
    p.begin_transaction()
    p.produce(topic, value=b"first")
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value=b"pending")
    p.flush(TIMEOUT_S)
    lso, hw = _committed_end(broker.bootstrap, topic)
    assert (lso, hw) == (2, 3)  # the open transaction starts at offset 2
    assert _read_all(broker.bootstrap, topic, "read_committed", idle_s=1.0) == [b"first"]
    p.commit_transaction(TIMEOUT_S)
    assert _read_all(broker.bootstrap, topic, "read_committed", expect=2) == [b"first", b"pending"]


def test_consume_transform_produce_commits_offsets_in_the_transaction(broker):
    source, sink, group = "ctp-in", "ctp-out", "ctp-group"
    _create(broker.bootstrap, source)
    _create(broker.bootstrap, sink)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        plain.produce(source, value=b"%d" % i)
    plain.flush(TIMEOUT_S)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    p = _producer(broker.bootstrap, "ctp")
    processed = 0
    rounds = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while processed < 10 and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(5, 1.0) if not m.error()]
            if not batch:
                continue
            p.begin_transaction()
            for m in batch:
                p.produce(sink, value=b"x" + m.value())
            p.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), TIMEOUT_S
            )
            if rounds == 0:
                p.abort_transaction(TIMEOUT_S)  # the first round is aborted: re-read and redone
                for m in batch[:1]:
                    consumer.seek(TopicPartition(m.topic(), m.partition(), m.offset()))
            else:
                p.commit_transaction(TIMEOUT_S)
                processed += len(batch)
            rounds += 1
        # the committed offsets are the group's, and stable
        committed = consumer.committed([TopicPartition(source, 0)], TIMEOUT_S)
        assert committed[0].offset == 10
    finally:
        consumer.close()
    assert _read_all(broker.bootstrap, sink, "read_committed", expect=10) == [b"x%d" % i for i in range(10)]


def test_second_producer_fences_the_first(broker):
    topic = "txn-fence"
    _create(broker.bootstrap, topic)
    old = _producer(broker.bootstrap, "fenced")
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    old.flush(TIMEOUT_S)
    new = _producer(broker.bootstrap, "fenced")  # aborts the zombie's open transaction
    new.begin_transaction()
    new.produce(topic, value=b"new")
    new.commit_transaction(TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        old.produce(topic, value=b"zombie-2")
        old.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert _read_all(broker.bootstrap, topic, "read_committed", expect=1) == [b"new"]


def test_transaction_open_past_its_timeout_is_aborted_by_the_broker(make_broker):
    broker = make_broker(FAST_ABORT)
    topic = "txn-timeout"
    _create(broker.bootstrap, topic)
    p = _producer(broker.bootstrap, "slow", **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    p.produce(topic, value=b"too-late")
    p.flush(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and _committed_end(broker.bootstrap, topic) != (2, 2):
        time.sleep(0.2)
    assert _committed_end(broker.bootstrap, topic) == (2, 2)  # aborted: the marker is offset 1
    with pytest.raises(KafkaException):
        p.commit_transaction(TIMEOUT_S)
    assert _read_all(broker.bootstrap, topic, "read_committed", idle_s=1.0) == []
    assert _read_all(broker.bootstrap, topic, "read_uncommitted", expect=1) == [b"too-late"]


def test_kill_9_mid_transaction_leaves_every_transaction_whole(make_broker):
    broker = make_broker(FAST_ABORT)
    topic = "txn-crash"
    _create(broker.bootstrap, topic, partitions=2)
    p = _producer(broker.bootstrap, "crashy", **{"transaction.timeout.ms": 60000})
    committed = []
    for t in range(5):
        p.begin_transaction()
        for i in range(20):
            value = b"t%d-%d" % (t, i)
            p.produce(topic, value=value, partition=i % 2)
        p.commit_transaction(TIMEOUT_S)
        committed += [b"t%d-%d" % (t, i) for i in range(20)]
    p.begin_transaction()
    for i in range(20):
        p.produce(topic, value=b"open-%d" % i, partition=i % 2)
    p.flush(TIMEOUT_S)
    broker.restart(crash=True)
    # A new instance fences the one that was in the middle of a transaction: it is aborted.
    again = _producer(broker.bootstrap, "crashy")
    again.begin_transaction()
    again.produce(topic, value=b"after", partition=0)
    again.commit_transaction(TIMEOUT_S)
    committed.append(b"after")
    got = _read_all(broker.bootstrap, topic, "read_committed", partitions=2, expect=len(committed))
    assert sorted(got) == sorted(committed)
    assert not [v for v in got if v.startswith(b"open-")]

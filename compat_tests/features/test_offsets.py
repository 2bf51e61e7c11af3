"""ListOffsets (earliest, latest, by timestamp), seeking, and fetches that start in the
middle of a record batch, through confluent-kafka and kafka-python."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from compat_tests.support.admin import admin_client, create_topic, unique_topic
from compat_tests.support.clients.confluent import consumer_config
from strom.tools.broker_process import BrokerProcess

COUNT = 100
STEP_MS = 10
TIMEOUT_S = 30.0


@pytest.fixture
def batch_topic(shared_broker: BrokerProcess) -> tuple[str, int]:
    """A 1-partition topic holding one batch of 100 records produced in one request;
    record i has value b"v<i>" and timestamp base + 10*i. Returns (topic, base)."""
    topic = unique_topic("offsets")
    create_topic(shared_broker.bootstrap, topic, 1)
    base = int(time.time() * 1000) - 600_000
    producer = Producer(
        {"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 5_000, "batch.num.messages": 10_000, "acks": "all"}
    )
    errors: list[object] = []
    for i in range(COUNT):
        producer.produce(
            topic,
            value=b"v%d" % i,
            key=b"k%d" % i,
            partition=0,
            timestamp=base + STEP_MS * i,
            on_delivery=lambda err, msg: err and errors.append(err),
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert not errors
    return topic, base


def read(consumer: Consumer, n: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(out) < n and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=n - len(out), timeout=0.5):
            assert not msg.error(), msg.error()
            out.append((msg.offset(), msg.value()))
    return out


def expected(start: int, stop: int = COUNT) -> list[tuple[int, bytes]]:
    return [(i, b"v%d" % i) for i in range(start, stop)]


@pytest.fixture
def consumer(shared_broker: BrokerProcess):
    c = Consumer(consumer_config(shared_broker.bootstrap))
    yield c
    c.close()


def test_watermarks(consumer: Consumer, batch_topic: tuple[str, int]) -> None:
    topic, _ = batch_topic
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S) == (0, COUNT)


@pytest.mark.parametrize(
    "delta_ms, offset",
    [
        (0, 0),  # first record's own timestamp
        (37 * STEP_MS, 37),  # exact match
        (37 * STEP_MS + 1, 38),  # between two records: the next one
        (-60_000, 0),  # before everything: the first record
        (COUNT * STEP_MS + 60_000, -1),  # after everything: no offset (end)
    ],
)
def test_offsets_for_times(consumer: Consumer, batch_topic: tuple[str, int], delta_ms: int, offset: int) -> None:
    topic, base = batch_topic
    [found] = consumer.offsets_for_times([TopicPartition(topic, 0, base + delta_ms)], timeout=TIMEOUT_S)
    assert found.error is None
    assert found.offset == offset


def test_admin_list_offsets(shared_broker: BrokerProcess, batch_topic: tuple[str, int]) -> None:
    topic, base = batch_topic
    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), COUNT),
        "by time": (OffsetSpec.for_timestamp(base + 50 * STEP_MS), 50),
    }
    admin = admin_client(shared_broker.bootstrap)
    for name, (spec, want) in specs.items():
        tp = TopicPartition(topic, 0)
        result = admin.list_offsets({tp: spec}, request_timeout=TIMEOUT_S)[tp].result(TIMEOUT_S)
        assert result.offset == want, name
    tp = TopicPartition(topic, 0)
    by_time = admin.list_offsets({tp: OffsetSpec.for_timestamp(base + 50 * STEP_MS)}, request_timeout=TIMEOUT_S)[
        tp
    ].result(TIMEOUT_S)
    assert by_time.timestamp == base + 50 * STEP_MS


def test_fetch_from_middle_of_batch(consumer: Consumer, batch_topic: tuple[str, int]) -> None:
    topic, _ = batch_topic
    consumer.assign([TopicPartition(topic, 0, 37)])
    assert read(consumer, COUNT - 37) == expected(37)


def test_seek_and_reread(consumer: Consumer, batch_topic: tuple[str, int]) -> None:
    topic, _ = batch_topic
    consumer.assign([TopicPartition(topic, 0, 0)])
    assert read(consumer, COUNT) == expected(0)
    consumer.seek(TopicPartition(topic, 0, 90))
    assert read(consumer, 10) == expected(90)
    consumer.seek(TopicPartition(topic, 0, 5))
    assert read(consumer, 3) == expected(5, 8)


@pytest.fixture
def kp_consumer(shared_broker: BrokerProcess):
    c = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None, enable_auto_commit=False)
    yield c
    c.close()


def test_kafka_python_list_offsets(kp_consumer: KafkaConsumer, batch_topic: tuple[str, int]) -> None:
    topic, base = batch_topic
    tp = KpTopicPartition(topic, 0)
    assert kp_consumer.beginning_offsets([tp]) == {tp: 0}
    assert kp_consumer.end_offsets([tp]) == {tp: COUNT}
    found = kp_consumer.offsets_for_times({tp: base + 37 * STEP_MS})[tp]
    assert (found.offset, found.timestamp) == (37, base + 37 * STEP_MS)


def test_kafka_python_fetch_from_middle_of_batch(kp_consumer: KafkaConsumer, batch_topic: tuple[str, int]) -> None:
    topic, _ = batch_topic
    tp = KpTopicPartition(topic, 0)
    kp_consumer.assign([tp])
    kp_consumer.seek(tp, 37)
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < COUNT - 37 and time.monotonic() < deadline:
        for msgs in kp_consumer.poll(timeout_ms=500).values():
            got.extend((m.offset, m.value) for m in msgs)
    assert got == expected(37)

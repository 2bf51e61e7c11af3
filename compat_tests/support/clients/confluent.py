"""confluent-kafka (librdkafka) driver."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from compat_tests.support.clients.base import Driver, no_codec_skip
from compat_tests.support.workload import Record

# librdkafka requires a group.id for any consumer; with assign() and no commits the
# group is never joined.
ASSIGN_ONLY_GROUP = "strom-compat-assign-only"


def producer_config(bootstrap: str, codec: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "linger.ms": 20,
        "batch.num.messages": 10_000,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
        "acks": "all",
    }


def consumer_config(bootstrap: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": ASSIGN_ONLY_GROUP,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
    }


def produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    producer = Producer(producer_config(bootstrap, codec))
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"partition {msg.partition()}: {err}")

    for r in records:
        while True:
            try:
                producer.produce(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=list(r.headers),
                    timestamp=r.timestamp_ms or 0,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records still undelivered after flush"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[0]}"


def to_record(msg: Message) -> Record:
    return Record(
        partition=msg.partition(),
        key=msg.key(),
        value=msg.value(),
        headers=tuple(msg.headers() or ()),
        timestamp_ms=msg.timestamp()[1],
        offset=msg.offset(),
    )


def consume(bootstrap: str, topic: str, counts: Mapping[int, int], timeout: float) -> dict[int, list[Record]]:
    consumer = Consumer(consumer_config(bootstrap))
    got: dict[int, list[Record]] = {p: [] for p in counts}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in counts])
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < n for p, n in counts.items()) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                got[msg.partition()].append(to_record(msg))
    finally:
        consumer.close()
    return got


DRIVER = Driver("confluent-kafka", produce, consume, lambda: None, no_codec_skip)

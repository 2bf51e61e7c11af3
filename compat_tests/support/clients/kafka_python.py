"""kafka-python driver (pure Python; its codecs need python-snappy, lz4, zstandard)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kafka_codec

from compat_tests.support.clients.base import Driver
from compat_tests.support.workload import Record

CODEC_CHECKS = {
    "none": (lambda: True, ""),
    "gzip": (kafka_codec.has_gzip, ""),
    "snappy": (kafka_codec.has_snappy, "python-snappy"),
    "lz4": (kafka_codec.has_lz4, "lz4"),
    "zstd": (kafka_codec.has_zstd, "zstandard"),
}


def codec_skip(codec: str) -> str | None:
    check, package = CODEC_CHECKS[codec]
    return None if check() else f"kafka-python needs the `{package}` package for {codec}"


def produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        batch_size=512 * 1024,
        max_request_size=8 * 1024 * 1024,
        acks="all",
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                headers=list(r.headers),
                timestamp_ms=r.timestamp_ms,
            )
            for r in records
        ]
        producer.flush(timeout=120)
        for f in futures:
            f.get(timeout=1)
    finally:
        producer.close(timeout=10)


def consume(bootstrap: str, topic: str, counts: Mapping[int, int], timeout: float) -> dict[int, list[Record]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    got: dict[int, list[Record]] = {p: [] for p in counts}
    try:
        partitions = [TopicPartition(topic, p) for p in counts]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < n for p, n in counts.items()) and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=20_000).items():
                got[tp.partition].extend(
                    Record(m.partition, m.key, m.value, tuple(m.headers), m.timestamp, m.offset) for m in msgs
                )
    finally:
        consumer.close()
    return got


DRIVER = Driver("kafka-python", produce, consume, lambda: None, codec_skip)

"""aiokafka driver (asyncio is fine here: this is a client, not the broker)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import codec as aiokafka_codec

from compat_tests.support.clients.base import Driver
from compat_tests.support.workload import Record

CODEC_CHECKS = {
    "none": lambda: True,
    "gzip": lambda: True,
    "snappy": aiokafka_codec.has_snappy,
    "lz4": aiokafka_codec.has_lz4,
    "zstd": aiokafka_codec.has_zstd,
}


def codec_skip(codec: str) -> str | None:
    return None if CODEC_CHECKS[codec]() else f"aiokafka has no {codec} codec installed"


async def _produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        max_batch_size=512 * 1024,
        max_request_size=8 * 1024 * 1024,
        acks="all",
    )
    await producer.start()
    try:
        futures = []
        for r in records:
            futures.append(
                await producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp_ms,
                )
            )
        await asyncio.wait_for(asyncio.gather(*futures), 120)
    finally:
        await producer.stop()


# `timeout` bounds the poll loop and the records that arrived by then are returned (the caller
# compares them): a cancel scope (asyncio.timeout) would discard them.
async def _consume(
    bootstrap: str,
    topic: str,
    counts: Mapping[int, int],
    timeout: float,  # noqa: ASYNC109
) -> dict[int, list[Record]]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await consumer.start()
    got: dict[int, list[Record]] = {p: [] for p in counts}
    try:
        partitions = [TopicPartition(topic, p) for p in counts]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < n for p, n in counts.items()) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=20_000)
            for tp, msgs in batch.items():
                got[tp.partition].extend(
                    Record(m.partition, m.key, m.value, tuple(m.headers), m.timestamp, m.offset) for m in msgs
                )
    finally:
        await consumer.stop()
    return got


def produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    asyncio.run(_produce(bootstrap, topic, records, codec))


def consume(bootstrap: str, topic: str, counts: Mapping[int, int], timeout: float) -> dict[int, list[Record]]:
    return asyncio.run(_consume(bootstrap, topic, counts, timeout))


DRIVER = Driver("aiokafka", produce, consume, lambda: None, codec_skip)

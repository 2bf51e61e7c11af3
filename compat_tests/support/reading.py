"""Reading a partition back in tests with confluent-kafka."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def read_to_end(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    isolation: str = "read_uncommitted",
    timeout_s: float = 60,
    config: dict[str, Any] | None = None,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record a consumer with ``isolation`` gets from offset 0 until
    it reaches the partition's end (its high watermark, or for read_committed its last stable
    offset); AssertionError if it does not within ``timeout_s``, KafkaException on an error."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-to-end-{uuid.uuid4()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **(config or {}),
        }
    )
    got: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return got
                raise KafkaException(m.error())
            got.append((m.offset(), m.key(), m.value()))
        raise AssertionError(f"a {isolation} consumer did not reach the end of {topic}-{partition}: {got}")
    finally:
        consumer.close()

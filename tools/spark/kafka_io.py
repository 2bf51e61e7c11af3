"""What the Spark data source asks of a Kafka cluster, over confluent-kafka (librdkafka).

* :class:`OffsetClient` (driver side): topic metadata, and earliest / latest / by-timestamp offsets
  through the admin client's ListOffsets with ``read_uncommitted`` isolation, as Spark's driver does.
* :func:`read_range` (executor side): one consumer with ``assign`` + seek, no group membership,
  ``enable.auto.commit=false``, ``isolation.level=read_uncommitted``, reading ``[start, end)`` of
  one partition and yielding rows in the kafka source's column order.
* :class:`RowProducer` (executor side): an idempotent producer (Java-compatible ``murmur2``
  partitioner) turning sink rows into records and failing on the first delivery error.

confluent-kafka is imported lazily so the pure planning code stays importable without it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from strom.tools.spark.offsets import ClusterOffsets, DataLossError, OffsetRange, TopicPartition

REQUEST_TIMEOUT_S = 30.0
CONSUME_BATCH = 1000
CONSUME_WAIT_S = 0.5
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# confluent-kafka's timestamp types (1 create, 2 log append) -> the kafka source's 0 / 1.
TIMESTAMP_TYPES = {1: 0, 2: 1}


class KafkaIOError(RuntimeError):
    """The cluster reported an error, or did not answer in time."""


def _ck() -> Any:
    import confluent_kafka

    return confluent_kafka


def _fail(what: str, exc: BaseException) -> KafkaIOError:
    return KafkaIOError(f"{what}: {exc}")


class OffsetClient:
    """Metadata and offset lookups for the driver; one AdminClient, created on first use."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        self.settings = dict(settings)
        self._admin: Any = None

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(dict(self.settings))
        return self._admin

    def partition_counts(self, topics: Sequence[str] | None = None) -> dict[str, int]:
        """``{topic: number of partitions}`` for ``topics`` (all topics when None)."""
        try:
            if topics is None:
                meta = self.admin.list_topics(timeout=REQUEST_TIMEOUT_S)
                found = meta.topics.values()
            else:
                found = [self.admin.list_topics(topic=t, timeout=REQUEST_TIMEOUT_S).topics[t] for t in topics]
        except Exception as exc:  # KafkaException, or a missing topic key
            raise _fail("reading topic metadata", exc) from None
        return {t.topic: len(t.partitions) for t in found if t.error is None and t.partitions}

    def offsets(
        self, partitions: Sequence[TopicPartition], timestamps: Mapping[TopicPartition, int] | None = None
    ) -> ClusterOffsets:
        """Earliest and latest offsets of ``partitions``, and the offsets for ``timestamps``."""
        from confluent_kafka.admin import OffsetSpec

        earliest = self._list(dict.fromkeys(partitions, OffsetSpec.earliest()))
        latest = self._list(dict.fromkeys(partitions, OffsetSpec.latest()))
        specs = {tp: OffsetSpec.for_timestamp(ts) for tp, ts in (timestamps or {}).items()}
        found = self._list(specs) if specs else {}
        return ClusterOffsets(earliest, latest, {tp: (o if o >= 0 else None) for tp, o in found.items()})

    def _list(self, specs: Mapping[TopicPartition, Any]) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        ck = _ck()
        request = {ck.TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        try:
            futures = self.admin.list_offsets(
                request, isolation_level=ck.IsolationLevel.READ_UNCOMMITTED, request_timeout=REQUEST_TIMEOUT_S
            )
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        except Exception as exc:
            raise _fail("listing offsets", exc) from None

    def close(self) -> None:
        self._admin = None


# --------------------------------------------------------------------------- reading


def consumer_settings(settings: Mapping[str, str], fail_on_data_loss: bool) -> dict[str, Any]:
    """An assign-only consumer: a throwaway group id that never joins, no commits."""
    return {
        "group.id": f"spark-kafka-source-{uuid.uuid4()}",
        **settings,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_uncommitted",
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
    }


def to_timestamp(millis: int) -> datetime:
    return EPOCH + timedelta(milliseconds=millis)


def record_row(msg: Any, include_headers: bool) -> tuple[Any, ...]:
    """One record as (key, value, topic, partition, offset, timestamp, timestampType[, headers])."""
    ts_type, ts = msg.timestamp()
    row = (
        msg.key(),
        msg.value(),
        msg.topic(),
        msg.partition(),
        msg.offset(),
        to_timestamp(ts),
        TIMESTAMP_TYPES.get(ts_type, 0),
    )
    if include_headers:
        return row + ([(k, v) for k, v in (msg.headers() or [])],)
    return row


def read_range(
    settings: Mapping[str, str],
    rng: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[tuple[Any, ...]]:
    """Every record of ``rng`` in offset order; stops at the end offset or the partition's end."""
    ck = _ck()
    consumer = ck.Consumer(consumer_settings(settings, fail_on_data_loss))
    try:
        consumer.assign([ck.TopicPartition(rng.topic, rng.partition, rng.start)])
        yield from _consume(consumer, rng, include_headers, fail_on_data_loss, poll_timeout_ms / 1000)
    finally:
        consumer.close()


def _consume(
    consumer: Any, rng: OffsetRange, include_headers: bool, fail_on_data_loss: bool, stall_s: float
) -> Iterator[tuple[Any, ...]]:
    ck = _ck()
    last_progress = time.monotonic()
    while True:
        messages = consumer.consume(CONSUME_BATCH, CONSUME_WAIT_S)
        for msg in messages:
            err = msg.error()
            if err is not None and err.code() == ck.KafkaError._PARTITION_EOF:
                _at_partition_end(msg.offset(), rng, fail_on_data_loss)
                return
            if err is not None:
                raise KafkaIOError(f"reading {rng.topic}-{rng.partition} at {rng.start}..{rng.end}: {err.str()}")
            if msg.offset() >= rng.end:
                return
            yield record_row(msg, include_headers)
            if msg.offset() >= rng.end - 1:
                return
        if messages:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > stall_s:
            raise KafkaIOError(
                f"no records from {rng.topic}-{rng.partition} for {stall_s:.0f}s "
                f"while reading up to offset {rng.end} (kafkaConsumer.pollTimeoutMs)"
            )


def _at_partition_end(end_of_log: int, rng: OffsetRange, fail_on_data_loss: bool) -> None:
    if end_of_log < rng.end and fail_on_data_loss:
        raise DataLossError(
            f"{rng.topic}-{rng.partition} ends at {end_of_log}, before the planned "
            f"end offset {rng.end} (set failOnDataLoss=false to skip lost data)"
        )


# --------------------------------------------------------------------------- writing


def producer_settings(settings: Mapping[str, str]) -> dict[str, Any]:
    """Idempotent by default, as the Java producer 3.x; keys hashed with Java's murmur2."""
    return {"enable.idempotence": True, "partitioner": "murmur2_random", "linger.ms": 5, **settings}


def _bytes(value: Any, column: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise KafkaIOError(f"column {column!r} must be a string or binary, not {type(value).__name__}")


class RowProducer:
    """Sends sink rows (``value`` and optional ``key``, ``topic``, ``partition``, ``headers``)."""

    def __init__(self, settings: Mapping[str, str], topic_override: str | None) -> None:
        self.producer = _ck().Producer(producer_settings(settings))
        self.topic_override = topic_override
        self.sent = 0
        self.errors: list[str] = []

    def send(self, row: Mapping[str, Any]) -> None:
        topic = self.topic_override or row.get("topic")
        if not topic:
            raise KafkaIOError("a row has no topic: set the 'topic' option or give a 'topic' column")
        kwargs: dict[str, Any] = {
            "value": _bytes(row.get("value"), "value"),
            "key": _bytes(row.get("key"), "key"),
            "on_delivery": self._delivered,
        }
        if row.get("partition") is not None:
            kwargs["partition"] = int(row["partition"])
        if row.get("headers"):
            kwargs["headers"] = [(str(k), _bytes(v, "headers")) for k, v in _header_pairs(row["headers"])]
        self._produce(topic, kwargs)
        self.sent += 1

    def _produce(self, topic: str, kwargs: dict[str, Any]) -> None:
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}: {err.str()}")

    def finish(self, timeout_s: float = REQUEST_TIMEOUT_S * 4) -> int:
        """Wait for every delivery; raise on the first error. Returns the records sent."""
        remaining = self.producer.flush(timeout_s)
        if self.errors:
            raise KafkaIOError(f"{len(self.errors)} records failed, first: {self.errors[0]}")
        if remaining:
            raise KafkaIOError(f"{remaining} records not acknowledged within {timeout_s:.0f}s")
        return self.sent


def _header_pairs(headers: Any) -> list[tuple[Any, Any]]:
    """Headers as Spark gives them: rows/structs with key and value, or plain pairs."""
    out = []
    for h in headers:
        if isinstance(h, (tuple, list)):
            out.append((h[0], h[1]))
        else:
            out.append((h["key"], h["value"]))
    return out

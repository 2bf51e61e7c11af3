"""Deterministic test records and the comparison every client round trip uses.

Each record has a key, a value, two headers and a timestamp the producer sets, and a
partition chosen by the test (``index % partitions``), so the expected order inside
each partition is known without trusting any client's partitioner.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 6


def record_count() -> int:
    """Records per (client, codec) round trip; ``STROM_COMPAT_RECORDS`` lowers it locally."""
    return int(os.environ.get("STROM_COMPAT_RECORDS", "50000"))


@dataclass(frozen=True)
class Record:
    partition: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None
    offset: int | None = field(default=None, compare=False)


def make_records(count: int, codec: str, partitions: int = PARTITIONS, base_ts_ms: int | None = None) -> list[Record]:
    """``count`` records; values are somewhat compressible but differ per record."""
    base = int(time.time() * 1000) - 3_600_000 if base_ts_ms is None else base_ts_ms
    return [
        Record(
            partition=i % partitions,
            key=f"key-{i:07d}".encode(),
            value=(f"value-{i:07d}-{codec}-" + "abcdefghij" * (1 + i % 7)).encode(),
            headers=(("seq", str(i).encode()), ("codec", codec.encode())),
            timestamp_ms=base + i,
        )
        for i in range(count)
    ]


def by_partition(records: list[Record], partitions: int = PARTITIONS) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    return out


def expected_counts(records: list[Record], partitions: int = PARTITIONS) -> dict[int, int]:
    return {p: len(rs) for p, rs in by_partition(records, partitions).items()}


def first_difference(expected: list[Record], got: list[Record]) -> str | None:
    """A readable description of the first mismatch between two ordered lists."""
    for i, (e, g) in enumerate(zip(expected, got, strict=False)):
        if e != g:
            return f"position {i} (offset {g.offset}): expected {e!r}, got {g!r}"
    if len(expected) != len(got):
        return f"expected {len(expected)} records, got {len(got)}"
    return None


def assert_round_trip(expected: list[Record], got: dict[int, list[Record]], partitions: int = PARTITIONS) -> None:
    """Every partition holds exactly the expected records, in order, offsets 0..n-1."""
    want = by_partition(expected, partitions)
    problems = []
    for p in range(partitions):
        records = got.get(p, [])
        diff = first_difference(want[p], records)
        if diff:
            problems.append(f"partition {p}: {diff}")
        offsets = [r.offset for r in records]
        if offsets != list(range(len(records))):
            problems.append(f"partition {p}: offsets not 0..{len(records) - 1} in order")
    assert not problems, "\n".join(problems)


class PacedProducer:
    """A thread producing b"%06d" values round robin over ``partitions`` of ``topic`` (acks=all), one
    every ``pause_s``, until stopped; ``sent`` keeps every value handed to the client, in order.
    Used by the consumer group tests that let members come and go while records arrive.

        writer = PacedProducer(bootstrap, "t", 6)
        writer.start(); ...; writer.finish()   # stopped and flushed
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, pause_s: float = 0.004):
        from confluent_kafka import Producer

        self.sent: list[bytes] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
        self._topic, self._partitions, self._pause_s = topic, partitions, pause_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = b"%06d" % i
            self._producer.produce(self._topic, value, partition=i % self._partitions)
            self.sent.append(value)
            i += 1
            self._producer.poll(0)
            time.sleep(self._pause_s)
        self._producer.flush(30)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def finish(self, timeout_s: float = 60) -> None:
        """Stop producing and wait until what was handed to the client is flushed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)


def assert_exactly_once(processed: list[bytes], sent: list[bytes]) -> None:
    """Every value sent was processed, and none twice (what a group's committing members promise)."""
    assert len(processed) == len(set(processed)), "a record was processed twice"
    assert set(processed) == set(sent), f"{len(set(sent) - set(processed))} records lost"


class CommittingMember(threading.Thread):
    """A confluent-kafka consumer of ``topic`` in ``group`` (``config`` adds to or overrides its
    settings: group.protocol, timeouts) that processes a record, then commits it synchronously: a
    record counts as processed (appended to ``processed`` under ``lock``) only once its commit
    succeeded. A failed commit is kept in ``errors`` and the record read again, here or, if the
    partition went to another member, by that one from the committed offset. ``assigned`` follows
    the partitions it owns, ``count`` its processed records, ``crash`` an exception that ended it.
    Used by the consumer group tests in which members come and go while records arrive.

        member = CommittingMember(bootstrap, "g", "t", "first", processed, lock, {"group.protocol": "consumer"})
        member.start(); ...; member.leave()   # leaves the group and closes
    """

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        processed: list,
        lock: threading.Lock,
        config: dict | None = None,
    ):
        from confluent_kafka import Consumer

        super().__init__(daemon=True, name=name)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": name,
                **(config or {}),
            }
        )
        self.processed, self.lock = processed, lock
        self.stop = threading.Event()
        self.assigned: list[int] = []
        self.errors: list[str] = []
        self.crash: str | None = None
        self.count = 0
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        self.assigned = sorted(set(self.assigned) | {p.partition for p in partitions})

    def _revoked(self, consumer, partitions) -> None:
        self.assigned = sorted(set(self.assigned) - {p.partition for p in partitions})

    def leave(self, timeout_s: float = 30) -> None:
        self.stop.set()
        if self.is_alive():
            self.join(timeout_s)

    def run(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

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
                    # not processed: a commit racing a new member epoch gets STALE_MEMBER_EPOCH (as
                    # from Kafka 4.0) while this member may keep the partition: read it again
                    self.errors.append(f"commit: {exc}")
                    try:
                        self.consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
                    except KafkaException:
                        pass
                    continue
                with self.lock:
                    self.processed.append(msg.value())
                self.count += 1
        except BaseException as exc:  # the test fails on it (after the others stopped)
            self.crash = repr(exc)
        finally:
            self.consumer.close()

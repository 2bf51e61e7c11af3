"""An in-memory coordinator runtime: partitions as lists of batches, no broker, no storage.

A coordinator hosted on it appends, waits for replication and loads exactly as on a broker, but
the test decides what the replicas do (:meth:`MemoryRuntime.hold_replication`,
:meth:`MemoryRuntime.replicate`) and who leads (:meth:`MemoryRuntime.lead`,
:meth:`MemoryRuntime.follow`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import trio

from strom.broker.coordinator.runtime import NotLeaderForPartition, OnBatch, PendingWrite, ReplicaState, TopicMetadata
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_batches, validate_batches
from strom.storage.producer_state import VerificationGuard


@dataclass
class MemoryPartition:
    leader_epoch: int = 0
    is_leader: bool = True
    batches: list[bytes] = field(default_factory=list)
    log_end_offset: int = 0
    high_watermark: int = 0
    log_start_offset: int = 0
    held: bool = False  # replication held: the high watermark stays until replicate()


@dataclass(frozen=True)
class MemoryWrite:
    topic: str
    index: int
    leader_epoch: int
    end_offset: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)


@dataclass
class MemoryRuntime:
    """A `CoordinatorRuntime` over in-memory partitions (standalone unless ``is_cluster``)."""

    node_id: int = 0
    is_cluster: bool = False
    clock_ms: int = 1_700_000_000_000
    partitions: dict[tuple[str, int], MemoryPartition] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    other_topics: dict[str, int] = field(default_factory=dict)  # topics of the cluster, not coordinators'
    markers: list[tuple[str, int, int, bool]] = field(default_factory=list)
    # called as markers_written is
    listeners: list[Callable[[str, int, int, bool], None]] = field(default_factory=list)
    _changed: trio.Event = field(default_factory=trio.Event)

    # ------------------------------------------------------------ test controls
    def hold_replication(self, topic: str, index: int) -> None:
        self.partitions[(topic, index)].held = True

    def replicate(self, topic: str, index: int) -> None:
        partition = self.partitions[(topic, index)]
        partition.high_watermark = partition.log_end_offset
        partition.held = False
        self._wake()

    def follow(self, topic: str, index: int) -> None:
        """Another broker leads the partition now (a new leader epoch)."""
        partition = self.partitions[(topic, index)]
        partition.is_leader, partition.leader_epoch = False, partition.leader_epoch + 1
        self._wake()

    def lead(self, topic: str, index: int) -> None:
        partition = self.partitions[(topic, index)]
        partition.is_leader, partition.leader_epoch = True, partition.leader_epoch + 1
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------ partition writer
    def replica(self, topic: str, index: int) -> ReplicaState | None:
        p = self.partitions.get((topic, index))
        if p is None:
            return None
        return ReplicaState(p.is_leader, p.leader_epoch, p.log_start_offset, p.log_end_offset, 1, p.high_watermark)

    def led_partitions(self, topic: str) -> dict[int, int]:
        return {i: p.leader_epoch for (t, i), p in self.partitions.items() if t == topic and p.is_leader}

    def append(
        self, topic: str, index: int, records: bytearray, verification_guard: VerificationGuard | None = None
    ) -> PendingWrite:
        p = self.partitions.get((topic, index))
        if p is None or not p.is_leader:
            raise NotLeaderForPartition(f"{topic}-{index}")
        data = bytearray(records)
        count = sum(1 for _ in validate_batches(data))
        assert count == 1, "a coordinator appends one batch at a time"
        data[0:8] = p.log_end_offset.to_bytes(8, "big")  # the base offset the log assigns
        _, header = next(iter_batches(data))
        p.batches.append(bytes(data))
        p.log_end_offset = header.last_offset + 1
        if not p.held:
            p.high_watermark = p.log_end_offset
        self._wake()
        return MemoryWrite(topic, index, p.leader_epoch, p.log_end_offset)

    def log_end(self, topic: str, index: int) -> PendingWrite:
        p = self.partitions.get((topic, index))
        if p is None or not p.is_leader:
            raise NotLeaderForPartition(f"{topic}-{index}")
        return MemoryWrite(topic, index, p.leader_epoch, p.log_end_offset)

    def _status(self, write: MemoryWrite) -> ErrorCode | None:
        p = self.partitions.get(write.key)
        if p is None or not p.is_leader or p.leader_epoch != write.leader_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE if p.high_watermark >= write.end_offset else None

    async def await_replication(self, writes: Sequence[PendingWrite], timeout_s: float) -> list[ErrorCode]:
        mine = [w for w in writes if isinstance(w, MemoryWrite)]
        assert len(mine) == len(writes), "writes not made by this runtime"
        with trio.move_on_after(timeout_s):
            while any(self._status(w) is None for w in mine):
                await self._changed.wait()
        statuses = [self._status(w) for w in mine]
        return [ErrorCode.REQUEST_TIMED_OUT if status is None else status for status in statuses]

    def delete_records_before(self, topic: str, index: int, offset: int) -> int:
        p = self.partitions.get((topic, index))
        if p is None or not p.is_leader:
            raise NotLeaderForPartition(f"{topic}-{index}")
        p.log_start_offset = max(p.log_start_offset, min(offset, p.high_watermark))
        # whole batches below the log start go, as segments do
        p.batches = [b for b in p.batches if next(iter_batches(b))[1].last_offset >= p.log_start_offset]
        return p.log_start_offset

    # ------------------------------------------------------------ loader
    def load(self, topic: str, index: int, on_batch: OnBatch) -> bool:
        p = self.partitions.get((topic, index))
        if p is None:
            return False
        for batch in p.batches:
            view = memoryview(batch)
            for pos, header in iter_batches(batch):
                on_batch(header, view[pos : pos + header.size])
        return True

    # ------------------------------------------------------------ cluster facts
    def partition_count(self, topic: str) -> int | None:
        if topic in self.other_topics:
            return self.other_topics[topic]
        count = sum(1 for t, _ in self.partitions if t == topic)
        return count or None

    def partition_exists(self, topic: str, index: int) -> bool:
        count = self.partition_count(topic)
        return count is not None and 0 <= index < count

    def leader_of(self, topic: str, index: int) -> int | None:
        p = self.partitions.get((topic, index))
        return self.node_id if p is not None and p.is_leader else None

    def topics(self) -> dict[str, TopicMetadata]:
        return {
            name: TopicMetadata(name, name.encode().ljust(16, b"-")[:16], count)
            for name, count in self.other_topics.items()
        }

    async def create_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        if self.partition_count(name) is not None:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        self.topic_configs[name] = dict(configs)
        for index in range(partitions):
            self.partitions[(name, index)] = MemoryPartition()

    async def allocate_producer_id(self) -> int:
        return 1000 + len(self.markers)

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return None

    def markers_written(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        self.markers.append((topic, index, producer_id, commit))
        for listener in self.listeners:
            listener(topic, index, producer_id, commit)

    def now_ms(self) -> int:
        return self.clock_ms

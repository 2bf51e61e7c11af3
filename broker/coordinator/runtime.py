"""The coordinator runtime port: what a coordinator needs of the broker, and nothing more.

Kafka's coordinator-common splits what its group, transaction and share coordinators need of the
broker into a `PartitionWriter` (append records to a partition of the coordinator's internal topic,
wait until they are replicated) and a `CoordinatorLoader` (replay a partition on becoming its
leader). :class:`CoordinatorRuntime` is that seam here, with the few cluster facts a coordinator
asks about besides (partition counts, leaders, endpoints, topic metadata, producer ids).

Every coordinator in `broker/coordinator/` is written against it and never imports the broker
core; `broker/server/coordinator_runtime.py` adapts the broker's services to it, and tests host a
coordinator on an in-memory writer (`broker/coordinator/tests/memory_runtime.py`).

Writing: a coordinator checks :meth:`CoordinatorRuntime.replica` (is it the leader, in which epoch),
appends with :meth:`~CoordinatorRuntime.append` (always as the coordinator: never through the
producer duplicate check, as Kafka's ``AppendOrigin.COORDINATOR``) and waits with
:meth:`~CoordinatorRuntime.await_replication` until the in-sync replicas have it while it still leads
the partition in that epoch. :func:`replication_error` turns what that wait answers into the error
a coordinator's client gets (NOT_COORDINATOR when the leadership was lost, COORDINATOR_NOT_AVAILABLE
when the replicas did not have it in time).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strom.protocol.errors import ErrorCode
from strom.protocol.records.header import BatchHeader
from strom.storage.errors import StorageError
from strom.storage.producer_state import VerificationGuard

OnBatch = Callable[[BatchHeader, memoryview], None]


class NotLeaderForPartition(StorageError):
    """An append to a partition this broker does not lead (or no longer hosts)."""

    error_code_name = "NOT_LEADER_OR_FOLLOWER"


class NotEnoughReplicas(StorageError):
    """An append refused: the partition has fewer in-sync replicas than its min.insync.replicas."""

    error_code_name = "NOT_ENOUGH_REPLICAS"


@dataclass(frozen=True)
class ReplicaState:
    """A coordinator's view of the local replica of one partition of its topic."""

    is_leader: bool
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    isr_size: int
    high_watermark: int  # records below it are committed: every in-sync replica has them
    min_insync_replicas: int = 1  # the topic's min.insync.replicas: an append with fewer is refused


@dataclass(frozen=True)
class TopicMetadata:
    """A topic as the coordinators see it (KIP-848 assignments are by topic id)."""

    name: str
    topic_id: bytes
    partitions: int


class ConfigSource(Protocol):
    """The broker's config, by Kafka's names (`broker.config.BrokerConfig`): what the coordinators
    read their settings from."""

    def __getitem__(self, name: str) -> Any: ...


class PendingWrite(Protocol):
    """An append waiting for the in-sync replicas, as :meth:`CoordinatorRuntime.append` returned it."""

    @property
    def leader_epoch(self) -> int: ...

    @property
    def key(self) -> tuple[str, int]: ...


class CoordinatorRuntime(Protocol):
    """The broker, as its coordinators (group, transaction, later share) see it."""

    @property
    def node_id(self) -> int: ...

    @property
    def is_cluster(self) -> bool:
        """False on a standalone broker, which leads every partition of every topic."""
        ...

    # ------------------------------------------------------------ partition writer
    def replica(self, topic: str, index: int) -> ReplicaState | None:
        """The local replica of ``topic``-``index``; None when this broker does not host it."""
        ...

    def led_partitions(self, topic: str) -> dict[int, int]:
        """The partitions of ``topic`` led here: index -> leader epoch."""
        ...

    def append(
        self, topic: str, index: int, records: bytearray, verification_guard: VerificationGuard | None = None
    ) -> PendingWrite:
        """Append a batch (built by the coordinator) as the coordinator, waking whoever waits for
        data. Raises :class:`NotLeaderForPartition` when not led here, else the storage's errors
        (a fenced producer of a transactional batch, a marker written since
        ``verification_guard`` was taken, disk errors)."""
        ...

    def log_end(self, topic: str, index: int) -> PendingWrite:
        """What was appended so far to a partition led here (to wait for it as for an append);
        raises :class:`NotLeaderForPartition` when not led here."""
        ...

    async def await_replication(self, writes: Sequence[PendingWrite], timeout_s: float) -> list[ErrorCode]:
        """Wait (at most ``timeout_s``) until each write is below its partition's high watermark
        while this broker still leads the partition in the write's epoch: per write NONE,
        NOT_LEADER_OR_FOLLOWER (leadership lost: the records may have been truncated since) or
        REQUEST_TIMED_OUT."""
        ...

    def delete_records_before(self, topic: str, index: int, offset: int) -> int:
        """Move the log start offset of a partition led here up to ``offset`` (at most its high
        watermark), as DeleteRecords does, for a coordinator whose topic is pruned rather than
        compacted (`__share_group_state`); the log start offset after. Raises
        :class:`NotLeaderForPartition` when not led here."""
        ...

    # ------------------------------------------------------------ loader
    def load(self, topic: str, index: int, on_batch: OnBatch) -> bool:
        """Replay the local replica of ``topic``-``index`` from its log start to its log end,
        batch by batch (see `coordinator.loader`). False when it is not hosted here or an
        unreadable batch ended the replay early."""
        ...

    # ------------------------------------------------------------ cluster facts
    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` in the cluster; None when the topic does not exist."""
        ...

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether ``topic``-``index`` exists anywhere in the cluster, not only here."""
        ...

    def leader_of(self, topic: str, index: int) -> int | None:
        """The broker id leading ``topic``-``index`` anywhere in the cluster, None if unknown."""
        ...

    def topics(self) -> dict[str, TopicMetadata]:
        """Every topic of the cluster, by name."""
        ...

    async def create_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        """Create a coordinator's topic; `TopicError` TOPIC_ALREADY_EXISTS if another did first."""
        ...

    async def allocate_producer_id(self) -> int: ...

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where broker ``broker_id`` takes inter-broker requests, None if not known."""
        ...

    def markers_written(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker landed in a local partition: tell the coordinators that keep state
        pending on it (the group coordinator's transactional offset commits)."""
        ...

    def now_ms(self) -> int:
        """Wall-clock milliseconds (record timestamps); tests replace it to move the clock."""
        ...


def replication_error(code: ErrorCode) -> ErrorCode:
    """As Kafka 4.0's coordinators turn an append's error into their clients': retriable both."""
    return {
        ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
        ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    }.get(code, code)


async def replicated(runtime: CoordinatorRuntime, topic: str, index: int, timeout_s: float) -> ErrorCode:
    """As Kafka: a coordinator's write counts once every in-sync replica of its partition has
    everything appended so far, while this broker still leads that partition in the epoch it was
    written in. NONE (also when the partition is not hosted here); COORDINATOR_NOT_AVAILABLE when
    the replicas did not have it in time; NOT_COORDINATOR when the leadership was lost meanwhile
    (the write may have been truncated as a follower since)."""
    state = runtime.replica(topic, index)
    if state is None:
        return ErrorCode.NONE
    if not state.is_leader:
        return ErrorCode.NOT_COORDINATOR  # nothing can have been written here
    (code,) = await runtime.await_replication([runtime.log_end(topic, index)], timeout_s)
    return replication_error(code)

"""The state the group coordinator's parts share: one store, not each other's attributes.

The classic groups (which also hold every group's committed offsets), the KIP-848 consumer groups
and what `__consumer_offsets` holds of them, the transactional offsets pending their markers, and
whether the coordinator is loading or still active. The store also knows which partition of
`__consumer_offsets` a group lives in, whether this broker coordinates it, and appends a group's
records to that partition through the coordinator runtime. The classic and consumer group
protocols, the group metadata manager and the offset metadata manager read and change the groups
through it (Kafka's coordinator shard state, shared by its GroupMetadataManager and
OffsetMetadataManager).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, TypeVar

import trio

from strom.broker.coordinator.group.assignors import TopicMeta
from strom.broker.coordinator.group.config import GroupCoordinatorConfig
from strom.broker.coordinator.group.consumer import ConsumerGroup
from strom.broker.coordinator.group.records import CommittedOffset, ConsumerGroupKey, partition_for
from strom.broker.coordinator.group.state import Group, GroupState
from strom.broker.coordinator.runtime import (
    CoordinatorRuntime,
    NotEnoughReplicas,
    NotLeaderForPartition,
    PendingWrite,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.internal_records import build_records_batch
from strom.storage.errors import StorageError
from strom.storage.producer_state import VerificationGuard

if TYPE_CHECKING:
    from strom.broker.coordinator.group.share_groups import ShareGroup
    from strom.broker.coordinator.group.streams_groups import StreamsGroup

OFFSETS_TOPIC = "__consumer_offsets"

Record = tuple[bytes | None, bytes | None]  # key, value (None: a tombstone)
K = TypeVar("K", bound=Hashable)

log = logging.getLogger("strom.group")


class GroupStore:
    """Every group this broker coordinates, and how their records reach `__consumer_offsets`."""

    def __init__(self, runtime: CoordinatorRuntime, config: GroupCoordinatorConfig) -> None:
        self.runtime = runtime
        self.config = config
        self.classic: dict[str, Group] = {}
        self.consumer: dict[str, ConsumerGroup] = {}
        self.streams: dict[str, StreamsGroup] = {}  # KIP-1071 streams groups
        self.share: dict[str, ShareGroup] = {}  # KIP-932 share groups
        # what __consumer_offsets holds of each consumer group (to write only what changed)
        self.consumer_records: dict[str, dict[ConsumerGroupKey, bytes]] = {}
        # group -> producer id -> (topic, partition) -> offset, committed in an open transaction
        self.pending_txn: dict[str, dict[int, dict[tuple[str, int], CommittedOffset]]] = {}
        self.loading = True
        self.active = True
        self.timers_changed = trio.Event()  # the classic groups' timer loop waits on it
        # called after anything in the groups may have changed (a state, members, offsets): tests'
        # waits (strom.testing.waits) look again; empty in a broker nobody waits on
        self.watchers: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ clocks and wake-ups
    @property
    def wall_ms(self) -> Callable[[], int]:
        return self.runtime.now_ms

    def wake_timers(self) -> None:
        """A classic group's deadlines may have changed: the timer loop looks again."""
        self.timers_changed.set()
        self.changed()

    def changed(self) -> None:
        """Something in the groups may have changed: tell the watchers."""
        for watcher in self.watchers:
            watcher()

    # ------------------------------------------------------------------ partitions
    def offsets_partition_count(self) -> int:
        count = self.runtime.partition_count(OFFSETS_TOPIC)
        return count if count is not None else self.config.offsets_topic_partitions

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.offsets_partition_count())

    def coordinated_partitions(self) -> set[int]:
        """The `__consumer_offsets` partitions whose groups this broker coordinates: those it
        leads (standalone: all of them)."""
        if not self.runtime.is_cluster:
            return set(range(self.offsets_partition_count()))
        return set(self.runtime.led_partitions(OFFSETS_TOPIC))

    def is_coordinator(self, group_id: str) -> bool:
        return self.partition_of(group_id) in self.coordinated_partitions()

    def group_error(self, group_id: str | None) -> ErrorCode | None:
        """Why a request for ``group_id`` cannot be served here now, or None."""
        if not self.active:
            return ErrorCode.NOT_COORDINATOR
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.is_coordinator(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    def topics(self) -> dict[str, TopicMeta]:
        return self.runtime.topics()

    def kind_of(self, group_id: str) -> str | None:
        """The kind of the live group ``group_id`` (one id is one group, whatever its kind:
        "classic", "consumer", "streams" or "share"), None when there is none."""
        if group_id in self.consumer:
            return "consumer"
        if group_id in self.streams:
            return "streams"
        if group_id in self.share:
            return "share"
        return "classic" if self.classic_group(group_id) is not None else None

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether the partition exists anywhere in the cluster (Kafka's metadata cache), not only
        on this broker: a group's offsets are kept for partitions other brokers lead too."""
        return self.runtime.partition_exists(topic, index)

    # ------------------------------------------------------------------ classic groups
    def classic_group(self, group_id: str) -> Group | None:
        group = self.classic.get(group_id)
        return None if group is None or group.state is GroupState.DEAD else group

    def classic_group_or_new(self, group_id: str) -> Group:
        """The live classic group ``group_id``, created Empty if there is none."""
        group = self.classic.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            group = self.classic[group_id] = Group(group_id, self.config.classic, self.wall_ms)
        return group

    # ------------------------------------------------------------------ writing
    def append(
        self,
        group_id: str,
        records: list[Record],
        producer: tuple[int, int] | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> PendingWrite:
        """Append ``records`` in one batch to the group's partition (a transactional batch with
        ``producer``'s id and epoch); raises `StorageError` (not led here, fewer in-sync replicas
        than the topic's min.insync.replicas, fenced, disk). Kafka's coordinator appends with
        acks=all: with too few in-sync replicas nothing is written (NOT_ENOUGH_REPLICAS)."""
        index = self.partition_of(group_id)
        replica = self.runtime.replica(OFFSETS_TOPIC, index)
        if replica is None or not replica.is_leader:
            raise NotLeaderForPartition(f"{OFFSETS_TOPIC} partition of group {group_id} is not led here")
        if replica.isr_size < replica.min_insync_replicas:
            raise NotEnoughReplicas(
                f"{OFFSETS_TOPIC}-{index} has {replica.isr_size} in-sync replicas, "
                f"fewer than its min.insync.replicas {replica.min_insync_replicas}"
            )
        data = build_records_batch(records, self.wall_ms(), producer)
        pending = self.runtime.append(OFFSETS_TOPIC, index, data, verification_guard=verification_guard)
        self.changed()
        return pending

    def append_changes(
        self,
        kind: str,
        group_id: str,
        records: list[Record],
        persisted: dict[str, dict[K, bytes]],
        current: dict[K, bytes],
    ) -> bool:
        """Append a group's changed records (a ``kind`` group's: consumer, streams) in one batch and,
        once appended, remember ``current`` as what `__consumer_offsets` holds of it in
        ``persisted``; False if they could not be written (logged)."""
        try:
            self.append(group_id, records)
        except (StorageError, OSError) as exc:
            (log.warning if isinstance(exc, NotEnoughReplicas) else log.error)(
                "could not persist %s group %s: %s", kind, group_id, exc
            )
            return False
        if current:
            persisted[group_id] = current
        else:
            persisted.pop(group_id, None)
        return True

"""The coordinator runtime over the broker's services: `coordinator.runtime.CoordinatorRuntime`
as the composition root gives it to the group and transaction coordinators.

Partitions come from the replica manager; appends go through the partition as the coordinator
(``AppendOrigin.COORDINATOR``, never the producer duplicate check) and wake the replica manager's
waiters; replication is awaited as acks=all produce waits (`PendingAppend`, keyed by the leader
epoch of the append). Topics, leaders and endpoints come from the metadata view, topic creation
and producer ids from the admin side.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from strom.broker.config import BrokerConfig
from strom.broker.coordinator.loader import replay_partition
from strom.broker.coordinator.runtime import NotLeaderForPartition, OnBatch, PendingWrite, ReplicaState, TopicMetadata
from strom.broker.replica.manager import ReplicaManager
from strom.broker.replica.partition import Partition
from strom.broker.replica.purgatory import PendingAppend, await_appends
from strom.broker.topics import TopicInfo
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import validate_batches
from strom.storage import clock
from strom.storage.producer_state import AppendOrigin, VerificationGuard

log = logging.getLogger("strom.coordinator")


class MetadataView(Protocol):
    """What the runtime reads of the cluster's metadata (today's `Broker` methods)."""

    def partition_view(self, topic: str, index: int) -> tuple[int, int, list[int], list[int], list[int]] | None: ...

    def broker_endpoint(self, broker_id: int, listener_name: str | None = None) -> tuple[str, int] | None: ...


class TopicAdmin(Protocol):
    """What the runtime asks of topic administration."""

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> object: ...

    async def allocate_producer_id(self) -> int: ...


class BrokerCoordinatorRuntime:
    """The coordinators' runtime on a running broker."""

    def __init__(
        self,
        *,
        node_id: int,
        is_cluster: bool,
        config: BrokerConfig,
        replicas: ReplicaManager,
        metadata: MetadataView,
        admin: TopicAdmin,
        topic_infos: Callable[[], Mapping[str, TopicInfo]],
        on_markers_written: Callable[[str, int, int, bool], None] | None = None,
    ) -> None:
        self._node_id = node_id
        self._is_cluster = is_cluster
        self._config = config
        self._replicas = replicas
        self._metadata = metadata
        self._admin = admin
        self._topic_infos = topic_infos
        self.on_markers_written = on_markers_written

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def is_cluster(self) -> bool:
        return self._is_cluster

    # ------------------------------------------------------------ partition writer
    def _partition(self, topic: str, index: int) -> Partition | None:
        return self._replicas.partition(topic, index)

    def _led(self, topic: str, index: int) -> Partition:
        partition = self._partition(topic, index)
        if partition is None or not partition.is_leader:
            raise NotLeaderForPartition(f"{topic}-{index} is not led here")
        return partition

    def replica(self, topic: str, index: int) -> ReplicaState | None:
        partition = self._partition(topic, index)
        if partition is None:
            return None
        plog = partition.log
        return ReplicaState(
            partition.is_leader,
            partition.leader_epoch,
            plog.log_start_offset,
            plog.log_end_offset,
            len(partition.isr),
            partition.high_watermark,
            self._replicas.min_insync_replicas(topic),
        )

    def led_partitions(self, topic: str) -> dict[int, int]:
        return {
            p.index: p.leader_epoch
            for p in list(self._replicas.partitions.values())
            if p.topic == topic and p.is_leader
        }

    def append(
        self, topic: str, index: int, records: bytearray, verification_guard: VerificationGuard | None = None
    ) -> PendingWrite:
        partition = self._led(topic, index)
        info = partition.append(
            records, validate_batches(records), AppendOrigin.COORDINATOR, verification_guard=verification_guard
        )
        pending = PendingAppend.of(partition, info.last_offset + 1)
        # wakes what waits on this partition (a read_committed fetch of a marker's partition, a
        # follower of the offsets partition) and whatever waits on any change; not every long poll
        self._replicas.notify_data([(topic, index)])
        return pending

    def log_end(self, topic: str, index: int) -> PendingWrite:
        partition = self._led(topic, index)
        return PendingAppend.of(partition, partition.log.log_end_offset)

    async def await_replication(self, writes: Sequence[PendingWrite], timeout_s: float) -> list[ErrorCode]:
        pending = [w for w in writes if isinstance(w, PendingAppend)]
        if len(pending) != len(writes):
            raise TypeError("writes not made by this runtime")
        return await await_appends(pending, timeout_s, self._replicas.wait_for_data)

    def delete_records_before(self, topic: str, index: int, offset: int) -> int:
        partition = self._led(topic, index)
        plog = partition.log
        offset = min(offset, partition.high_watermark)
        if offset > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(offset)
            log.info("log start offset of %s-%d moved to %d (pruned by its coordinator)", topic, index, offset)
        return plog.log_start_offset

    # ------------------------------------------------------------ loader
    def load(self, topic: str, index: int, on_batch: OnBatch) -> bool:
        partition = self._partition(topic, index)
        if partition is None:
            return False
        return replay_partition(partition.log, topic, index, on_batch, log)

    # ------------------------------------------------------------ cluster facts
    def partition_count(self, topic: str) -> int | None:
        info = self._topic_infos().get(topic)
        return None if info is None else info.partitions

    def partition_exists(self, topic: str, index: int) -> bool:
        return self._metadata.partition_view(topic, index) is not None

    def leader_of(self, topic: str, index: int) -> int | None:
        view = self._metadata.partition_view(topic, index)
        return None if view is None or view[0] < 0 else view[0]

    def topics(self) -> dict[str, TopicMetadata]:
        return {name: TopicMetadata(name, info.topic_id, info.partitions) for name, info in self._topic_infos().items()}

    async def create_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        await self._admin.create_topic(name, partitions, replication_factor, configs)

    async def allocate_producer_id(self) -> int:
        return await self._admin.allocate_producer_id()

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return self._metadata.broker_endpoint(broker_id, self._config.inter_broker_listener)

    def markers_written(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        if self.on_markers_written is not None:
            self.on_markers_written(topic, index, producer_id, commit)

    def now_ms(self) -> int:
        return clock.wall_ms()

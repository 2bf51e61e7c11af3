"""The group coordinator: groups in memory, their records in `__consumer_offsets`, timers on trio.

On disk: the internal topic `__consumer_offsets` (compacted, `offsets.topic.num.partitions`
partitions, created on first use). Group `g` lives in partition
`abs(java_string_hashcode(g)) % partitions`. Offsets are written by the offset metadata manager
(`offset_metadata_manager`); the end of a rebalance, a member change seen by a static rejoin and a
group becoming Empty append one group metadata record (generation, protocol, leader, members with
subscription and assignment), a KIP-848 group its own records (`consumer_groups`). A null value
(tombstone) deletes an offset (OffsetDelete, expiry) or a whole group (DeleteGroups, expiry of an
Empty group). Formats: `records`.

The coordinator is written against the coordinator runtime (`coordinator.runtime`) and its
config only, never the broker. Its parts share one `GroupStore`:

* `classic_groups` — the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) over the
  state machine in `state`, and its timers;
* `consumer_groups` — KIP-848 consumer groups (`consumer`, with the server-side `assignors`), and
  the conversions to and from classic groups (`migration`);
* `group_metadata_manager` — which protocol serves a request, deletion, group records;
* `offset_metadata_manager` — committed and transactional offsets, expiry, offset records.

After a crash or restart, or on becoming the leader of a partition of `__consumer_offsets`, the
coordinator replays that partition from its log start (the runtime's loader): the last record per
key wins, tombstones remove, a transactional batch counts once its COMMIT marker follows. A group
with members comes back Stable with its generation and assignment; its members' sessions start
again from the first tick, so members that went away with the broker expire after their session
timeout. On losing the leadership, the partition's groups are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

import trio

from strom.broker.coordinator.group.classic_groups import ClassicGroups
from strom.broker.coordinator.group.config import GroupCoordinatorConfig
from strom.broker.coordinator.group.consumer_groups import ConsumerGroups
from strom.broker.coordinator.group.group_configs import GroupConfigs
from strom.broker.coordinator.group.group_metadata_manager import GroupMetadataManager
from strom.broker.coordinator.group.offset_metadata_manager import CommitResult, OffsetMetadataManager, Offsets
from strom.broker.coordinator.group.records import CommittedOffset, GroupRecordError, OffsetKey, decode_key
from strom.broker.coordinator.group.share_groups import ShareGroups
from strom.broker.coordinator.group.state import Group, JoinRequest, JoinResult, SyncResult
from strom.broker.coordinator.group.store import OFFSETS_TOPIC, GroupStore, Record
from strom.broker.coordinator.group.streams_groups import StreamsGroups
from strom.broker.coordinator.group.streams_records import decode_streams_key, is_streams_key
from strom.broker.coordinator.runtime import CoordinatorRuntime, replicated
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records
from strom.protocol.records.control import COMMIT, control_type
from strom.protocol.records.header import BatchHeader
from strom.storage.producer_state import VerificationGuard

log = logging.getLogger("strom.group")

__all__ = ["OFFSETS_TOPIC", "CommitResult", "GroupCoordinator"]


class GroupCoordinator:
    """Every consumer group this broker coordinates (standalone: all of them)."""

    def __init__(
        self,
        runtime: CoordinatorRuntime,
        config: GroupCoordinatorConfig,
        stored_group_configs: Callable[[], Mapping[str, Mapping[str, str]]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.config = config
        self.store = GroupStore(runtime, config)
        self.classic = ClassicGroups(self.store)
        self.consumer = ConsumerGroups(self.store)  # KIP-848 groups, beside the classic ones
        self.streams = StreamsGroups(self.store, config.streams)  # KIP-1071 streams groups
        self.group_manager = GroupMetadataManager(self.store, self.classic, self.consumer)
        self.offset_manager = OffsetMetadataManager(self.store, self.classic, self.consumer, self.streams)
        # GROUP config resources: the values stored with the metadata (the admin manager writes them)
        self.group_configs = GroupConfigs(config.group_config_defaults, stored_group_configs)
        self.share = ShareGroups(self.store, self.group_configs, config.share_max_size)  # KIP-932 groups
        self._led: set[int] = set()

    @property
    def groups(self) -> dict[str, Group]:
        """The classic groups by id (and the holders of consumer groups' offsets)."""
        return self.store.classic

    @property
    def loading(self) -> bool:
        return self.store.loading

    # ------------------------------------------------------------------ partitions
    def offsets_partition_count(self) -> int:
        return self.store.offsets_partition_count()

    def partition_of(self, group_id: str) -> int:
        return self.store.partition_of(group_id)

    def coordinated_partitions(self) -> set[int]:
        return self.store.coordinated_partitions()

    def is_coordinator(self, group_id: str) -> bool:
        return self.store.is_coordinator(group_id)

    def coordinator_of(self, group_id: str) -> int | None:
        """The broker id coordinating `group_id` (the leader of its partition), if any."""
        return self.runtime.leader_of(OFFSETS_TOPIC, self.partition_of(group_id))

    def partition_exists(self, topic: str, index: int) -> bool:
        return self.store.partition_exists(topic, index)

    def group_error(self, group_id: str | None) -> ErrorCode | None:
        return self.store.group_error(group_id)

    def get(self, group_id: str) -> Group | None:
        return self.store.classic_group(group_id)

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` (compacted, internal) if it does not exist yet."""
        if self.runtime.partition_count(OFFSETS_TOPIC) is not None:
            return
        config = self.config
        try:
            await self.runtime.create_internal_topic(
                OFFSETS_TOPIC,
                config.offsets_topic_partitions,
                config.offsets_topic_replication_factor,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(config.offsets_topic_segment_bytes),
                    "compression.type": "producer",
                },
            )
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    async def replicated(self, group_id: str) -> ErrorCode:
        """As Kafka: a commit counts once every in-sync replica of the group's offsets partition
        has it, while this broker still leads that partition in the epoch it was written in. NONE;
        COORDINATOR_NOT_AVAILABLE when the replicas did not have it in time; NOT_COORDINATOR when
        the leadership was lost meanwhile (the commit may have been truncated as a follower since)."""
        return await replicated(
            self.runtime, OFFSETS_TOPIC, self.partition_of(group_id), self.config.offset_commit_timeout_ms / 1000
        )

    # ------------------------------------------------------------------ loading and unloading
    def load(self) -> None:
        """Replay `__consumer_offsets` into memory (called once, before serving)."""
        self.store.loading = True
        if self.runtime.partition_count(OFFSETS_TOPIC) is not None:
            for index in self.coordinated_partitions():
                self.load_partition(index)
        self.group_manager.loaded()
        self.store.loading = False
        log.info("loaded %d consumer groups from %s", len(self.store.classic), OFFSETS_TOPIC)

    def follow_leadership(self) -> None:
        """After leadership changed: load the groups of partitions now led here, drop the others.

        Dropped groups' waiting members are answered NOT_COORDINATOR; they find the new
        coordinator, which has loaded the same records from its replica."""
        if not self.runtime.is_cluster:
            return
        now_led = self.coordinated_partitions()
        gained = now_led - self._led
        lost = self._led - now_led
        self._led = now_led
        self.group_manager.unload(lambda g: self.partition_of(g) in now_led)
        self.streams.drop_unled(lambda g: self.partition_of(g) in now_led)
        self.share.drop_unled(lambda g: self.partition_of(g) in now_led)
        for index in sorted(gained):
            self.load_partition(index)
        if gained or lost:
            log.info(
                "coordinating groups of %d %s partitions (+%d, -%d)",
                len(now_led),
                OFFSETS_TOPIC,
                len(gained),
                len(lost),
            )
            self.store.wake_timers()

    def load_partition(self, index: int) -> None:
        """Replay one partition of `__consumer_offsets` led here (the runtime's loader)."""
        if self.runtime.replica(OFFSETS_TOPIC, index) is None:
            return
        open_txns: dict[int, list[Record]] = {}
        self.offset_manager.forget_pending(index)

        def on_batch(header: BatchHeader, batch: memoryview) -> None:
            if header.is_control:
                records = open_txns.pop(header.producer_id, [])
                if control_type(batch) == COMMIT:
                    for key, value in records:
                        self._replay(key, value)
            elif header.is_transactional:
                open_txns.setdefault(header.producer_id, []).extend((r.key, r.value) for r in iter_records(batch))
            else:
                for record in iter_records(batch):
                    self._replay(record.key, record.value)

        if not self.runtime.load(OFFSETS_TOPIC, index, on_batch):
            return
        for pid, records in open_txns.items():
            for key, value in records:
                try:
                    key_obj = decode_key(key)
                    if isinstance(key_obj, OffsetKey) and value is not None:
                        self.offset_manager.replay_pending(pid, key_obj, value)
                except GroupRecordError as exc:
                    log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    def _replay(self, key_bytes: bytes | None, value: bytes | None) -> None:
        try:
            if key_bytes is not None and is_streams_key(key_bytes):  # a KIP-1071 streams group's record
                self.streams.replay(decode_streams_key(key_bytes), value)
                return
            key = decode_key(key_bytes)
            if isinstance(key, OffsetKey):
                self.offset_manager.replay(key, value)
            else:
                self.group_manager.replay(key, value)
        except GroupRecordError as exc:
            log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    # ------------------------------------------------------------------ timers
    async def run(self) -> None:
        """Serve every timer until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.classic.run)
            nursery.start_soon(self.consumer.run)
            nursery.start_soon(self.streams.run)
            nursery.start_soon(self.offset_manager.run_expiry)
            nursery.start_soon(self.share.run)

    def tick(self, now: float) -> None:
        self.classic.tick(now)

    def expire_offsets(self, now_ms: int) -> int:
        return self.offset_manager.expire_offsets(now_ms)

    def shutdown(self) -> None:
        """Stop coordinating: waiting joins and syncs are answered NOT_COORDINATOR, later requests too.
        Everything is already in the log, so nothing is lost."""
        self.store.active = False
        self.group_manager.shutdown()
        self.store.wake_timers()

    # ------------------------------------------------------------------ groups
    async def join_group(self, group_id: str, req: JoinRequest) -> JoinResult:
        return await self.group_manager.join_group(group_id, req)

    async def sync_group(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        return await self.group_manager.sync_group(
            group_id, member_id, instance_id, generation, protocol_type, protocol_name, assignments
        )

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        return self.group_manager.heartbeat(group_id, member_id, instance_id, generation)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        return self.group_manager.leave_group(group_id, members)

    def delete_group(self, group_id: str) -> ErrorCode:
        if self.store.group_error(group_id) is None:
            streams = self.streams.delete(group_id)  # a streams group, then the offsets it leaves
            if streams is ErrorCode.NON_EMPTY_GROUP or (streams is ErrorCode.NONE and self.get(group_id) is None):
                return streams
        return self.group_manager.delete_group(group_id)

    # ------------------------------------------------------------------ offsets
    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        retention_ms: int,
        offsets: Offsets,
        api_version: int = 9,
    ) -> list[CommitResult]:
        return self.offset_manager.commit_offsets(
            group_id, member_id, instance_id, generation, retention_ms, offsets, api_version
        )

    def txn_commit_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        instance_id: str | None,
        generation: int,
        offsets: Offsets,
        verification_guard: VerificationGuard | None = None,
    ) -> list[CommitResult]:
        return self.offset_manager.txn_commit_offsets(
            group_id, producer_id, producer_epoch, member_id, instance_id, generation, offsets, verification_guard
        )

    def complete_txn(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to a local partition: settle pending offsets if it is
        a partition of `__consumer_offsets`."""
        if topic == OFFSETS_TOPIC:
            self.offset_manager.complete_txn(index, producer_id, commit)

    def has_pending_txn_offset(self, group_id: str, topic: str, index: int) -> bool:
        return self.offset_manager.has_pending_txn_offset(group_id, topic, index)

    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        return self.offset_manager.fetch_offsets(group_id, topics)

    def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        return self.offset_manager.delete_offsets(group_id, partitions)

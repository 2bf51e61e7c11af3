"""The share coordinator (Kafka's ShareCoordinator): durable state of share-partitions.

A share-partition (share group, topic id, partition) has a *state*: the state epoch (raised when
the group's offsets are reset), the leader epoch of the share-partition leader that last wrote it,
the share-partition start offset (SPSO) and the delivery state of in-flight offsets past it (state
batches: first offset, last offset, delivery state 0 available / 2 acknowledged / 4 archived,
delivery count). The share-partition leader reads it when it starts serving the partition and
writes every change (acknowledgements, releases, a moved start offset) through the `Persister`
before it answers; the group coordinator initializes it when a share group first gets a partition
and deletes it with the group's offsets.

Where it lives: the internal topic ``__share_group_state`` (``share.coordinator.state.topic.*``:
50 partitions by default, ``cleanup.policy=delete``, ``retention.ms=-1``). The share-partition
``g:topicId:p`` belongs to partition ``abs(javaHash("g:topicId:p")) % partitions``, whose leader
is its coordinator (FindCoordinator key type SHARE). Each write appends one record (see
`coordinator.share.records`): a ShareSnapshot (the whole state) for the first write of a key, every
``share.coordinator.snapshot.update.records.per.snapshot`` updates after it, and for every
initialization; otherwise a ShareUpdate with what the write changed. Replaying a partition
(start-up, becoming its leader) applies snapshots and updates in order and gives the state the
writes built; a lost leadership drops the partition's keys.

Writes are serialized per `__share_group_state` partition: the record is built from the state in
memory, appended, and applied in memory only once the in-sync replicas have it, exactly as a replay
applies it. A failed write leaves memory as it was and answers NOT_COORDINATOR (leadership lost) or
COORDINATOR_NOT_AVAILABLE (the replicas did not have it in time), both retriable for the caller.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import trio

from strom.broker.coordinator.runtime import ConfigSource, CoordinatorRuntime
from strom.broker.coordinator.share.persister import SharePartitionKey, StateBatch
from strom.broker.coordinator.share.records import (
    SNAPSHOT_KEY_TYPE,
    UPDATE_KEY_TYPE,
    ShareRecordError,
    SnapshotValue,
    UpdateValue,
    coordinator_key,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
)
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.internal_records import build_records_batch, partition_for
from strom.protocol.records.batch import iter_records
from strom.protocol.records.header import BatchHeader
from strom.storage.errors import StorageError

log = logging.getLogger("strom.share.coordinator")

SHARE_GROUP_STATE_TOPIC = "__share_group_state"

UNINITIALIZED_START_OFFSET = -1  # Kafka's PartitionFactory defaults for a share-partition with no state
DEFAULT_STATE_EPOCH = 0
DEFAULT_LEADER_EPOCH = 0
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1


@dataclass(frozen=True)
class ShareCoordinatorSettings:
    """The broker configs the share coordinator reads (Kafka's names and defaults, except the
    replication factor and min ISR, 1 as for Strom's other internal topics)."""

    num_partitions: int = 50  # share.coordinator.state.topic.num.partitions
    replication_factor: int = 1  # share.coordinator.state.topic.replication.factor
    min_isr: int = 1  # share.coordinator.state.topic.min.isr
    segment_bytes: int = 100 * 1024 * 1024  # share.coordinator.state.topic.segment.bytes
    snapshot_update_records: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    write_timeout_ms: int = 5_000  # share.coordinator.write.timeout.ms
    prune_interval_ms: int = 300_000  # share.coordinator.state.topic.prune.interval.ms

    @classmethod
    def from_config(cls, config: ConfigSource) -> ShareCoordinatorSettings:
        return cls(
            config["share.coordinator.state.topic.num.partitions"],
            config["share.coordinator.state.topic.replication.factor"],
            config["share.coordinator.state.topic.min.isr"],
            config["share.coordinator.state.topic.segment.bytes"],
            config["share.coordinator.snapshot.update.records.per.snapshot"],
            config["share.coordinator.write.timeout.ms"],
            config["share.coordinator.state.topic.prune.interval.ms"],
        )


@dataclass(frozen=True)
class ShareGroupOffset:
    """The state of one share-partition as the coordinator holds it (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp: int = -1
    write_timestamp: int = -1
    delivery_complete_count: int = -1


@dataclass(frozen=True)
class StateResult:
    """One share-partition's answer: an error, or its state (read) / nothing (write)."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    state_epoch: int = DEFAULT_STATE_EPOCH
    leader_epoch: int = DEFAULT_LEADER_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT


# Kafka's messages for the errors the share coordinator answers with (its Errors table)
KAFKA_MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch on the broker.",
    ErrorCode.FENCED_STATE_EPOCH: "The share coordinator rejected the request because the share-group state epoch "
    "did not match.",
}


def _error(code: ErrorCode, message: str | None = None) -> StateResult:
    """An error answer; its other fields are zeros, as Kafka's error answers carry."""
    return StateResult(code, message if message is not None else KAFKA_MESSAGES.get(code, code.name), start_offset=0)


def combine_batches(
    so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    """The state batches after ``new`` is written over ``so_far`` (Kafka's
    PersisterStateBatchCombiner): where batches overlap, the one with the higher delivery count
    wins, then the higher delivery state (a delivery only moves forward); offsets below
    ``start_offset`` are dropped; adjacent runs of one state and count are joined."""
    batches = sorted([*so_far, *new], key=lambda b: b.first_offset)
    if not batches:
        return ()
    points = sorted({b.first_offset for b in batches} | {b.last_offset + 1 for b in batches})
    out: list[StateBatch] = []
    heap: list[tuple[int, int, int]] = []  # (-count, -state, last offset) of batches covering the segment
    i = 0
    for start, end in zip(points, points[1:], strict=False):
        while i < len(batches) and batches[i].first_offset <= start:
            b = batches[i]
            heapq.heappush(heap, (-b.delivery_count, -b.delivery_state, b.last_offset))
            i += 1
        while heap and heap[0][2] < start:  # the winner ended before this segment (lazy removal)
            heapq.heappop(heap)
        if not heap or end - 1 < start_offset:
            continue
        count, state = -heap[0][0], -heap[0][1]
        first = max(start, start_offset)
        if (
            out
            and out[-1].last_offset + 1 == first
            and (out[-1].delivery_state, out[-1].delivery_count)
            == (
                state,
                count,
            )
        ):
            out[-1] = replace(out[-1], last_offset=end - 1)
        else:
            out.append(StateBatch(first, end - 1, state, count))
    return tuple(out)


@dataclass
class _Partition:
    """What the coordinator holds for one `__share_group_state` partition it leads."""

    epoch: int
    lock: trio.Lock = field(default_factory=trio.Lock)


class ShareCoordinator:
    """Share-partition state in `__share_group_state`, on the coordinator runtime."""

    def __init__(self, runtime: CoordinatorRuntime, settings: ShareCoordinatorSettings) -> None:
        self.runtime = runtime
        self.settings = settings
        self.states: dict[SharePartitionKey, ShareGroupOffset] = {}
        self.update_counts: dict[SharePartitionKey, int] = {}  # ShareUpdates since the last snapshot
        # where each share-partition's last ShareSnapshot is: what is below the lowest is pruned
        self.snapshot_offsets: dict[SharePartitionKey, int] = {}
        self.owned: dict[int, _Partition] = {}
        self.loading: set[int] = set()
        self.active = True

    # ------------------------------------------------------------------ partitions
    def num_partitions(self) -> int:
        count = self.runtime.partition_count(SHARE_GROUP_STATE_TOPIC)
        return count if count is not None else self.settings.num_partitions

    def partition_of(self, key: SharePartitionKey | str) -> int:
        text = key if isinstance(key, str) else coordinator_key(key)
        return partition_for(text, self.num_partitions())

    def coordinator_of(self, coordinator_key: str) -> int | None:
        """The broker leading the partition of ``group:topicId:partition`` (FindCoordinator)."""
        return self.runtime.leader_of(SHARE_GROUP_STATE_TOPIC, self.partition_of(coordinator_key))

    def is_local(self, key: SharePartitionKey) -> bool:
        return self.partition_of(key) in self.owned

    async def ensure_topic(self) -> None:
        """Create `__share_group_state` as Kafka does, on the first FindCoordinator for a share key."""
        if self.runtime.partition_count(SHARE_GROUP_STATE_TOPIC) is not None:
            return
        s = self.settings
        try:
            await self.runtime.create_internal_topic(
                SHARE_GROUP_STATE_TOPIC,
                s.num_partitions,
                s.replication_factor,
                {  # Kafka 4.3's overrides of the topic (DescribeConfigs of the reference's)
                    "cleanup.policy": "delete",
                    "retention.ms": "-1",
                    "segment.bytes": str(s.segment_bytes),
                    "min.insync.replicas": str(s.min_isr),
                    "compression.type": "producer",
                },
            )
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    def load(self) -> None:
        """Standalone start-up: coordinate every partition of `__share_group_state` there is."""
        self.follow_leadership()

    def follow_leadership(self) -> tuple[list[int], list[int]]:
        """Load the partitions newly led here, unload those lost: (gained, lost)."""
        now = self.runtime.led_partitions(SHARE_GROUP_STATE_TOPIC)
        lost = [i for i, p in self.owned.items() if now.get(i) != p.epoch]
        gained = [i for i, epoch in now.items() if i not in self.owned or self.owned[i].epoch != epoch]
        for index in lost:
            del self.owned[index]
            self._drop_partition(index)
        for index in sorted(gained):
            self.loading.add(index)
            try:
                self._load_partition(index)
            finally:
                self.loading.discard(index)
            self.owned[index] = _Partition(now[index])
        if gained or lost:
            log.info(
                "coordinating share-partition state of %d %s partitions (+%d, -%d)",
                len(self.owned),
                SHARE_GROUP_STATE_TOPIC,
                len(gained),
                len(lost),
            )
        return gained, lost

    def shutdown(self) -> None:
        self.active = False

    def _keys_of(self, index: int) -> list[SharePartitionKey]:
        keys = set(self.states) | set(self.update_counts) | set(self.snapshot_offsets)
        return [k for k in keys if self.partition_of(k) == index]

    def _drop_partition(self, index: int) -> None:
        for key in self._keys_of(index):
            self._forget(key)

    def _forget(self, key: SharePartitionKey) -> None:
        self.states.pop(key, None)
        self.update_counts.pop(key, None)
        self.snapshot_offsets.pop(key, None)

    def _load_partition(self, index: int) -> None:
        replica = self.runtime.replica(SHARE_GROUP_STATE_TOPIC, index)
        if replica is None:
            return
        self._drop_partition(index)
        start = replica.log_start_offset

        def on_batch(header: BatchHeader, batch: memoryview) -> None:
            if header.is_control:
                return
            for record in iter_records(batch):
                if record.offset >= start:
                    self.apply(record.key, record.value, record.offset)

        self.runtime.load(SHARE_GROUP_STATE_TOPIC, index, on_batch)

    # ------------------------------------------------------------------ replay
    def apply(self, key_bytes: bytes | None, value: bytes | None, offset: int) -> None:
        """Apply one `__share_group_state` record (at ``offset``) to memory: a replayed one, or one
        just written."""
        try:
            record_type, key = decode_key(key_bytes)
            if value is None:
                if record_type == SNAPSHOT_KEY_TYPE:
                    self._forget(key)
                return
            if record_type == SNAPSHOT_KEY_TYPE:
                self._apply_snapshot(key, decode_snapshot(value))
                self.snapshot_offsets[key] = offset
            else:
                self._apply_update(key, decode_update(value))
                self.snapshot_offsets.setdefault(key, offset)  # an update with no snapshot before it
        except ShareRecordError as exc:
            log.warning("skipping an unreadable %s record: %s", SHARE_GROUP_STATE_TOPIC, exc)

    def _apply_snapshot(self, key: SharePartitionKey, v: SnapshotValue) -> None:
        self.states[key] = ShareGroupOffset(
            v.snapshot_epoch,
            v.state_epoch,
            v.leader_epoch,
            v.start_offset,
            v.state_batches,
            v.create_timestamp,
            v.write_timestamp,
            v.delivery_complete_count,
        )
        self.update_counts[key] = 0

    def _apply_update(self, key: SharePartitionKey, v: UpdateValue) -> None:
        current = self.states.get(key)
        if current is None:  # an update with no snapshot before it (its snapshot was pruned): as Kafka
            self.states[key] = ShareGroupOffset(
                v.snapshot_epoch, DEFAULT_STATE_EPOCH, v.leader_epoch, v.start_offset, v.state_batches
            )
            self.update_counts[key] = 0
            return
        start = current.start_offset if v.start_offset == -1 else v.start_offset
        self.states[key] = replace(
            current,
            start_offset=start,
            leader_epoch=current.leader_epoch if v.leader_epoch == -1 else v.leader_epoch,
            state_batches=combine_batches(current.state_batches, v.state_batches, start),
            delivery_complete_count=v.delivery_complete_count,
        )
        self.update_counts[key] = self.update_counts.get(key, 0) + 1

    # ------------------------------------------------------------------ checks
    def _ownership_error(self, key: SharePartitionKey) -> StateResult | None:
        index = self.partition_of(key)
        if index in self.loading:
            return _error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if index not in self.owned or not self.active:
            return _error(ErrorCode.NOT_COORDINATOR)
        return None

    def _request_error(self, key: SharePartitionKey) -> StateResult | None:
        if key.partition < 0:
            return _error(ErrorCode.INVALID_REQUEST, "The partition id cannot be a negative number.")
        return self._ownership_error(key)

    def _topic_error(self, key: SharePartitionKey) -> StateResult | None:
        for topic in self.runtime.topics().values():
            if topic.topic_id == key.topic_id:
                if 0 <= key.partition < topic.partitions:
                    return None
                break
        return _error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    # ------------------------------------------------------------------ operations
    # Kafka 4.3's answers, as its share coordinator gives them: reads and writes of a share-partition
    # nobody initialized are INVALID_REQUEST; the leader epoch a state records is the one of the
    # last read by a share-partition leader (an initialization sets 0), a write with an older one is
    # FENCED_LEADER_EPOCH (-1: none given, not checked), and writes leave it as it is; a write
    # carries no state epoch of its own (an older one is FENCED_STATE_EPOCH); a summary ignores
    # the leader epoch it is asked with.
    async def write_state(
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        delivery_complete_count: int = -1,
    ) -> StateResult:
        """WriteShareGroupState for one share-partition."""
        error = self._request_error(key)
        if error is not None:
            return error
        async with self.owned[self.partition_of(key)].lock:
            current = self.states.get(key)
            if current is None:
                return _error(
                    ErrorCode.INVALID_REQUEST, "Write operation on uninitialized share partition not allowed."
                )
            if current.leader_epoch > leader_epoch and leader_epoch != -1:
                return _error(ErrorCode.FENCED_LEADER_EPOCH)
            if current.state_epoch > state_epoch:
                return _error(ErrorCode.FENCED_STATE_EPOCH)
            error = self._topic_error(key)
            if error is not None:
                return error
            record = self._state_record(key, current, start_offset, batches, delivery_complete_count)
            return await self._write(key, [record])

    def _state_record(
        self,
        key: SharePartitionKey,
        current: ShareGroupOffset,
        start_offset: int,
        batches: Sequence[StateBatch],
        delivery_complete_count: int,
        leader_epoch: int | None = None,
    ) -> tuple[bytes, bytes]:
        """A ShareUpdate with what changed, or a whole ShareSnapshot once enough updates were written
        since the last one."""
        leader = current.leader_epoch if leader_epoch is None else leader_epoch
        if self.update_counts.get(key, 0) >= self.settings.snapshot_update_records:
            start = current.start_offset if start_offset == -1 else start_offset
            return encode_key(key, SNAPSHOT_KEY_TYPE), encode_snapshot(
                SnapshotValue(
                    current.snapshot_epoch + 1,
                    current.state_epoch,
                    leader,
                    start,
                    current.create_timestamp,
                    self.runtime.now_ms(),
                    combine_batches(current.state_batches, batches, start),
                    delivery_complete_count,
                )
            )
        return encode_key(key, UPDATE_KEY_TYPE), encode_update(
            UpdateValue(
                current.snapshot_epoch,
                leader,
                start_offset,
                combine_batches((), batches, start_offset),
                delivery_complete_count,
            )
        )

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> StateResult:
        """ReadShareGroupState: the state, as the share-partition leader starts from it. A leader
        epoch other than the recorded one is recorded (written), so an older leader is fenced after."""
        error = self._request_error(key)
        if error is not None:
            return error
        async with self.owned[self.partition_of(key)].lock:
            current = self.states.get(key)
            if current is None:
                return _error(ErrorCode.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.")
            if current.leader_epoch > leader_epoch and leader_epoch != -1:
                return _error(ErrorCode.FENCED_LEADER_EPOCH)
            error = self._topic_error(key)
            if error is not None:
                return error
            if leader_epoch != -1 and leader_epoch != current.leader_epoch:
                # as Kafka 4.3 records a new leader: the start offset restated, the count unknown
                record = self._state_record(
                    key, current, current.start_offset, (), UNINITIALIZED_DELIVERY_COMPLETE_COUNT, leader_epoch
                )
                written = await self._write(key, [record])
                if written.error != ErrorCode.NONE:
                    return written
                current = self.states[key]
            return StateResult(
                state_epoch=current.state_epoch,
                leader_epoch=current.leader_epoch,
                start_offset=current.start_offset,
                state_batches=current.state_batches,
                delivery_complete_count=current.delivery_complete_count,
            )

    def read_state_summary(self, key: SharePartitionKey) -> StateResult:
        """ReadShareGroupStateSummary: epochs, start offset and delivered count, not the batches."""
        error = self._request_error(key) or self._topic_error(key)
        if error is not None:
            return error
        current = self.states.get(key)
        if current is None:
            return StateResult()
        return StateResult(
            state_epoch=current.state_epoch,
            leader_epoch=current.leader_epoch,
            start_offset=current.start_offset,
            delivery_complete_count=current.delivery_complete_count,
        )

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> StateResult:
        """InitializeShareGroupState: a state epoch and start offset, no batches, leader epoch 0 (a
        share group's new partition, or offsets altered by an admin). An older state epoch is fenced."""
        error = self._request_error(key)
        if error is not None:
            return error
        async with self.owned[self.partition_of(key)].lock:
            current = self.states.get(key)
            if current is not None and current.state_epoch > state_epoch:
                return _error(ErrorCode.FENCED_STATE_EPOCH)
            error = self._topic_error(key)
            if error is not None:
                return error
            now = self.runtime.now_ms()
            # nothing past a known start offset is delivered yet; from an unknown one (-1: where
            # share.auto.offset.reset says) the count is unknown too (as Kafka 4.3 writes it)
            value = SnapshotValue(
                0 if current is None else current.snapshot_epoch + 1,
                state_epoch,
                DEFAULT_LEADER_EPOCH,
                start_offset,
                now,
                now,
                (),
                0 if start_offset >= 0 else UNINITIALIZED_DELIVERY_COMPLETE_COUNT,
            )
            return await self._write(key, [(encode_key(key, SNAPSHOT_KEY_TYPE), encode_snapshot(value))])

    async def delete_state(self, key: SharePartitionKey) -> StateResult:
        """DeleteShareGroupState: a tombstone for the share-partition's state."""
        error = self._request_error(key) or self._topic_error(key)
        if error is not None:
            return error
        async with self.owned[self.partition_of(key)].lock:
            if key not in self.states:
                return StateResult()
            return await self._write(key, [(encode_key(key, SNAPSHOT_KEY_TYPE), None)])

    async def _write(self, key: SharePartitionKey, records: list[tuple[bytes, bytes | None]]) -> StateResult:
        index = self.partition_of(key)
        owned = self.owned.get(index)
        replica = self.runtime.replica(SHARE_GROUP_STATE_TOPIC, index)
        if owned is None or replica is None or not replica.is_leader:
            return _error(ErrorCode.NOT_COORDINATOR)
        if replica.isr_size < replica.min_insync_replicas:  # the topic's (its min.isr setting at creation)
            log.warning(
                "%s-%d has %d in-sync replicas, fewer than %d: share state not written",
                SHARE_GROUP_STATE_TOPIC,
                index,
                replica.isr_size,
                replica.min_insync_replicas,
            )
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        base = replica.log_end_offset  # the records' offsets: the coordinator is the topic's only writer
        data = build_records_batch(list(records), self.runtime.now_ms())
        try:
            pending = self.runtime.append(SHARE_GROUP_STATE_TOPIC, index, data)
        except (StorageError, OSError) as exc:
            log.error("could not write the share state of %s: %s", coordinator_key(key), exc)
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        (code,) = await self.runtime.await_replication([pending], self.settings.write_timeout_ms / 1000)
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER or self.owned.get(index) is not owned:
            log.info(
                "share state of %s not written: %s-%d leadership lost",
                coordinator_key(key),
                SHARE_GROUP_STATE_TOPIC,
                index,
            )
            return _error(ErrorCode.NOT_COORDINATOR)
        if code != ErrorCode.NONE:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        for i, (record_key, value) in enumerate(records):
            self.apply(record_key, value, base + i)
        return StateResult()

    # ------------------------------------------------------------------ pruning
    def prune(self) -> dict[int, int]:
        """Move the log start of every `__share_group_state` partition led here up to the oldest
        record still needed: the last ShareSnapshot of each of its share-partitions (the updates
        after it too), or its whole log when it holds none (as Kafka's share coordinator prunes
        with DeleteRecords, the topic being ``cleanup.policy=delete`` with no retention). The log
        start offsets after, by partition."""
        out: dict[int, int] = {}
        for index in sorted(self.owned):
            replica = self.runtime.replica(SHARE_GROUP_STATE_TOPIC, index)
            if replica is None or not replica.is_leader:
                continue
            needed = [offset for key, offset in self.snapshot_offsets.items() if self.partition_of(key) == index]
            upto = min(needed) if needed else replica.log_end_offset
            if upto <= replica.log_start_offset:
                continue
            try:
                out[index] = self.runtime.delete_records_before(SHARE_GROUP_STATE_TOPIC, index, upto)
            except (StorageError, OSError) as exc:
                log.warning("could not prune %s-%d: %s", SHARE_GROUP_STATE_TOPIC, index, exc)
        return out

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Prune every ``share.coordinator.state.topic.prune.interval.ms`` until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(self.settings.prune_interval_ms / 1000)
            if self.active:
                self.prune()


__all__ = [
    "SHARE_GROUP_STATE_TOPIC",
    "ShareCoordinator",
    "ShareCoordinatorSettings",
    "ShareGroupOffset",
    "SharePartitionKey",
    "StateBatch",
    "StateResult",
    "combine_batches",
]

"""The group coordinator: groups in memory, their records in `__consumer_offsets`, timers on trio.

On disk: the internal topic `__consumer_offsets` (compacted, `offsets.topic.num.partitions`
partitions, created on first use). Group `g` lives in partition
`abs(java_string_hashcode(g)) % partitions`. An OffsetCommit appends one offset record per
partition (key: group, topic, partition; value: offset, leader epoch, metadata, commit time); the
end of a rebalance, a member change seen by a static rejoin and a group becoming Empty append one
group metadata record (generation, protocol, leader, members with subscription and assignment).
A null value (tombstone) deletes an offset (OffsetDelete, expiry) or a whole group (DeleteGroups,
expiry of an Empty group). Formats: `broker.group.records`.

After a crash or restart, `load()` replays every partition this broker coordinates from its log
start: the last record per key wins, tombstones remove. A group with members comes back Stable with
its generation and assignment; its members' sessions start again from the first tick, so members
that went away with the broker expire after their session timeout. Every record is appended before
the request that caused it is answered; an append that fails leaves memory unchanged for offsets
(the commit is answered with an error) and is logged for group metadata.

Transactional offset commits (TxnOffsetCommit): the offsets are appended as a transactional batch
with the producer's id and epoch and kept *pending* per (group, producer id); the transaction
coordinator's marker in the same `__consumer_offsets` partition (``complete_txn``) makes them the
group's committed offsets (COMMIT) or drops them (ABORT). OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT for a partition while such a commit is pending. Loading replays the same
way: transactional batches are held per producer until their marker, and those still open at the
end stay pending.

Timers: `run()` sleeps until the earliest group deadline (session expiry, pending member expiry,
initial delay, rebalance timeout) or until a request changes one, then calls `Group.expire(now)`
with trio's clock; a second loop expires offsets every `offsets.retention.check.interval.ms`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.internal_records import build_records_batch
from strom.protocol.records.batch import iter_records, validate_batches
from strom.protocol.records.control import COMMIT, control_type
from strom.storage.errors import StorageError
from strom.storage.producer_state import AppendOrigin

from strom.broker.errors import TopicError
from strom.broker.internal_topics import replay_partition

from strom.broker.coordinator.group.records import (CommittedOffset, ConsumerGroupKey, GroupKey, GroupRecordError, OffsetKey, decode_group_value, decode_key,
                      decode_offset_value, encode_group_key, encode_group_value, encode_offset_key,
                      encode_offset_value, partition_for)
from strom.broker.coordinator.group.consumer_groups import ConsumerGroups
from strom.broker.coordinator.group.state import Group, GroupSettings, GroupState, JoinRequest, JoinResult, SyncResult

if TYPE_CHECKING:
    from strom.broker.server.root import BrokerServer

log = logging.getLogger("strom.group")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_METADATA_MAX_BYTES = 4096
INT64_MAX = 2**63 - 1
WAIT_MARGIN_S = 5.0


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class CommitResult:
    topic: str
    partition: int
    error: ErrorCode


class GroupCoordinator:
    """Every consumer group this broker coordinates (standalone: all of them)."""

    def __init__(self, broker: "BrokerServer"):
        self.broker = broker
        config = broker.config
        self.settings = GroupSettings(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"])
        self.num_partitions: int = config["offsets.topic.num.partitions"]
        self.retention_ms: int = config["offsets.retention.minutes"] * 60_000
        self.groups: dict[str, Group] = {}
        # group -> producer id -> (topic, partition) -> offset, committed in an open transaction
        self.pending_txn: dict[str, dict[int, dict[tuple[str, int], CommittedOffset]]] = {}
        self._led: set[int] = set()
        self.consumer = ConsumerGroups(self)  # KIP-848 groups, beside the classic ones
        self.loading = True
        self.active = True
        self._changed = trio.Event()

    # ------------------------------------------------------------------ partitions
    def coordinated_partitions(self) -> set[int]:
        """The `__consumer_offsets` partitions whose groups this broker coordinates: those it
        leads (standalone: all of them)."""
        if self.broker.cluster is None:
            return set(range(self._topic_partitions()))
        return {p.index for p in self.broker.replicas.partitions.values()
                if p.topic == OFFSETS_TOPIC and p.is_leader}

    def coordinator_of(self, group_id: str) -> int | None:
        """The broker id coordinating `group_id` (the leader of its partition), if any."""
        view = self.broker.metadata.partition_view(OFFSETS_TOPIC, self.partition_of(group_id))
        if view is None or view[0] < 0:
            return None
        return view[0]

    def follow_leadership(self) -> None:
        """After leadership changed: load the groups of partitions now led here, drop the others.

        Dropped groups' waiting members are answered NOT_COORDINATOR; they find the new
        coordinator, which has loaded the same records from its replica."""
        if self.broker.cluster is None:
            return
        now_led = self.coordinated_partitions()
        gained = now_led - self._led
        lost = self._led - now_led
        self._led = now_led
        for group_id in [g for g in self.groups if self.partition_of(g) in lost]:
            group = self.groups.pop(group_id)
            for member in list(group.members.values()):
                member.answer_join(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
                member.answer_sync(SyncResult(ErrorCode.NOT_COORDINATOR))
        self.consumer.drop_unled(lambda g: self.partition_of(g) in now_led)
        for index in sorted(gained):
            partition = self.broker.replicas.get(OFFSETS_TOPIC, index)
            if partition is not None:
                self._load_partition(partition)
        if gained or lost:
            log.info("coordinating groups of %d %s partitions (+%d, -%d)", len(now_led), OFFSETS_TOPIC,
                     len(gained), len(lost))
            self._changed.set()

    def _topic_partitions(self) -> int:
        info = self.broker.topics.topics.get(OFFSETS_TOPIC)
        return info.partitions if info is not None else self.num_partitions

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._topic_partitions())

    def is_coordinator(self, group_id: str) -> bool:
        return self.partition_of(group_id) in self.coordinated_partitions()

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` (compacted, internal) if it does not exist yet."""
        if OFFSETS_TOPIC in self.broker.topics.topics:
            return
        config = self.broker.config
        try:
            await self.broker.admin.create_topic(
                OFFSETS_TOPIC, self.num_partitions, config["offsets.topic.replication.factor"],
                {"cleanup.policy": "compact", "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                 "compression.type": "producer"})
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    # ------------------------------------------------------------------ loading
    def load(self) -> None:
        """Replay `__consumer_offsets` into memory (called once, before serving)."""
        self.loading = True
        if OFFSETS_TOPIC in self.broker.topics.topics:
            for index in self.coordinated_partitions():
                partition = self.broker.replicas.get(OFFSETS_TOPIC, index)
                if partition is not None:
                    self._load_partition(partition)
        for group in self.groups.values():
            if not group.members and not group.offsets and group.protocol_type is None:
                group.state = GroupState.DEAD
        self.groups = {g: group for g, group in self.groups.items() if group.state is not GroupState.DEAD}
        self.loading = False
        log.info("loaded %d consumer groups from %s", len(self.groups), OFFSETS_TOPIC)

    def _load_partition(self, partition) -> None:
        open_txns: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        for group_id in [g for g in self.pending_txn if self.partition_of(g) == partition.index]:
            del self.pending_txn[group_id]

        def on_batch(header, batch) -> None:
            if header.is_control:
                records = open_txns.pop(header.producer_id, [])
                if control_type(batch) == COMMIT:
                    for key, value in records:
                        self._apply(key, value)
            elif header.is_transactional:
                open_txns.setdefault(header.producer_id, []).extend((r.key, r.value) for r in iter_records(batch))
            else:
                for record in iter_records(batch):
                    self._apply(record.key, record.value)

        if not replay_partition(partition, OFFSETS_TOPIC, partition.index, on_batch, log):
            return
        for pid, records in open_txns.items():
            for key, value in records:
                try:
                    key_obj = decode_key(key)
                    if isinstance(key_obj, OffsetKey) and value is not None:
                        self.pending_txn.setdefault(key_obj.group, {}).setdefault(pid, {})[
                            (key_obj.topic, key_obj.partition)] = decode_offset_value(value)
                except GroupRecordError as exc:
                    log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    def _apply(self, key_bytes: bytes | None, value: bytes | None) -> None:
        try:
            key = decode_key(key_bytes)
            if isinstance(key, ConsumerGroupKey):
                self.consumer.replay(key, value)
            elif isinstance(key, OffsetKey):
                group = self._get_or_create(key.group)
                if value is None:
                    group.offsets.pop((key.topic, key.partition), None)
                else:
                    group.offsets[(key.topic, key.partition)] = decode_offset_value(value)
            elif value is None:
                gone = self.groups.pop(key.group, None)
                if gone is not None and gone.offsets:
                    self._get_or_create(key.group).offsets.update(gone.offsets)
            else:
                self._get_or_create(key.group).load_record(decode_group_value(value))
        except GroupRecordError as exc:
            log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    # ------------------------------------------------------------------ groups
    def _get_or_create(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id, self.settings, wall_clock_ms)
        return group

    def get(self, group_id: str) -> Group | None:
        group = self.groups.get(group_id)
        return None if group is None or group.state is GroupState.DEAD else group

    def _written(self, group: Group, before: int) -> None:
        """After a group operation: persist its metadata if it changed, wake the timer loop."""
        if group.changes != before:
            self._store_group(group)
        self._changed.set()

    # ------------------------------------------------------------------ writing
    def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]],
                producer: tuple[int, int] | None = None, verification_guard=None) -> None:
        partition = self.broker.replicas.get(OFFSETS_TOPIC, self.partition_of(group_id))
        if partition is None or not partition.is_leader:
            raise StorageError(f"{OFFSETS_TOPIC} partition of group {group_id} is not led here")
        data = build_records_batch(records, wall_clock_ms(), producer)
        partition.append(data, validate_batches(data), AppendOrigin.COORDINATOR,
                         verification_guard=verification_guard)
        self.broker.replicas.notify_data()

    def _store_group(self, group: Group) -> None:
        """Write the group's metadata record, as Kafka does only when it is Stable or Empty."""
        if group.protocol_type is None or group.state not in (GroupState.STABLE, GroupState.EMPTY):
            return
        try:
            self._append(group.group_id, [(encode_group_key(GroupKey(group.group_id)),
                                           encode_group_value(group.to_record()))])
        except (StorageError, OSError) as exc:
            log.error("could not persist group=%s generation=%d: %s", group.group_id, group.generation, exc)

    def _remove_group(self, group: Group) -> None:
        """Tombstones for every offset and the group itself; the group is Dead."""
        keys = [encode_offset_key(OffsetKey(group.group_id, t, p)) for t, p in group.offsets]
        keys.append(encode_group_key(GroupKey(group.group_id)))
        self._append(group.group_id, [(k, None) for k in keys])
        group.state = GroupState.DEAD
        group.offsets.clear()
        self.groups.pop(group.group_id, None)

    # ------------------------------------------------------------------ timers
    async def run(self) -> None:
        """Serve every timer until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timer_loop)
            nursery.start_soon(self.consumer.run)
            nursery.start_soon(self._retention_loop)

    async def _timer_loop(self) -> None:
        while True:
            self._changed = trio.Event()
            deadline = min((g.next_deadline() for g in self.groups.values()), default=float("inf"))
            with trio.move_on_at(deadline):
                await self._changed.wait()
            self.tick(trio.current_time())

    def tick(self, now: float) -> None:
        for group in list(self.groups.values()):
            before = group.changes
            try:
                group.expire(now)
            except Exception:
                log.exception("expiring timers of group=%s failed", group.group_id)
            if group.changes != before:
                self._store_group(group)

    async def _retention_loop(self) -> None:
        interval = self.broker.config["offsets.retention.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval)
            try:
                self.expire_offsets(wall_clock_ms())
            except Exception:
                log.exception("offset expiry failed; will try again")

    def expire_offsets(self, now_ms: int) -> int:
        """Delete offsets past their retention; Empty groups left without offsets die.

        As Kafka 4.0: a consumer group (KIP-848) without members whose offsets all expired, or that
        has none, is deleted too, its offset tombstones and its own in one batch, so that a restart
        does not bring it back."""
        removed = 0
        for group_id in sorted(set(self.groups) | set(self.consumer.groups)):
            group = self.groups.get(group_id)  # a classic group, or what holds a consumer group's offsets
            consumer = self.consumer.get(group_id)
            expired = group.expired_offsets(now_ms, self.retention_ms) if group is not None else []
            if expired and consumer is not None and consumer.members:
                # a consumer group keeps the offsets of topics its members subscribe to, as Kafka does
                subscribed = set().union(*consumer.subscribed_topics(self.consumer.topics()).values())
                expired = [tp for tp in expired if tp[0] not in subscribed]
            tombstones = [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in expired]
            if (consumer is not None and not consumer.members and group_id not in self.pending_txn
                    and (group is None or len(expired) == len(group.offsets))):
                if self.consumer.expire(group_id, tombstones):
                    if group is not None:
                        group.offsets.clear()
                        self.groups.pop(group_id, None)
                    removed += len(expired)
                continue
            if expired:
                self._append(group_id, tombstones)
                for tp in expired:
                    del group.offsets[tp]
                removed += len(expired)
            if (consumer is None and group is not None and group.state is GroupState.EMPTY and not group.offsets
                    and not group.members and group_id not in self.pending_txn):
                log.info("group=%s is empty and has no offsets left: removed", group_id)
                self._remove_group(group)
        return removed

    # ------------------------------------------------------------------ waiting
    async def _wait(self, group: Group, start, bound_s: float, attr: str, timeout_result):
        """Run `start(waiter)`; if it answered later, wait (bounded) for the waiter's result."""
        box: list = []
        done = trio.Event()

        def waiter(result) -> None:
            box.append(result)
            done.set()

        before = group.changes
        result = start(waiter)
        self._written(group, before)
        if result is not None:
            return result
        with trio.move_on_after(bound_s):
            await done.wait()
        if box:
            return box[0]
        for member in group.members.values():
            if getattr(member, attr) is waiter:
                setattr(member, attr, None)
        self._changed.set()
        return timeout_result

    def shutdown(self) -> None:
        """Stop coordinating: waiting joins and syncs are answered NOT_COORDINATOR, later requests too.
        Everything is already in the log, so nothing is lost."""
        self.active = False
        for group in self.groups.values():
            for member in list(group.members.values()):
                member.answer_join(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
                member.answer_sync(SyncResult(ErrorCode.NOT_COORDINATOR))
        self._changed.set()

    # ------------------------------------------------------------------ API operations
    def _session_error(self, session_timeout_ms: int) -> ErrorCode | None:
        s = self.settings
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return None

    def group_error(self, group_id: str | None) -> ErrorCode | None:
        if not self.active:
            return ErrorCode.NOT_COORDINATOR
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.is_coordinator(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    async def join_group(self, group_id: str, req: JoinRequest) -> JoinResult:
        error = self.group_error(group_id) or self._session_error(req.session_timeout_ms)
        if error is not None:
            return JoinResult(error, member_id=req.member_id)
        if self.consumer.has_members(group_id):
            # a classic member joins a consumer group (a rolling downgrade, or mixed clients)
            return self.consumer.classic_join(group_id, req)
        if self.consumer.get(group_id) is not None:
            # an empty consumer group becomes a classic one (its offsets stay), as Kafka 4.0 converts it
            self.consumer.delete(group_id)
            log.info("empty consumer group %s converted to a classic group", group_id)
        if req.member_id and self.get(group_id) is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id)
        group = self._get_or_create(group_id)
        bound = (max(req.rebalance_timeout_ms, req.session_timeout_ms)
                 + self.settings.initial_rebalance_delay_ms) / 1000 + WAIT_MARGIN_S
        return await self._wait(group, lambda w: group.join(req, trio.current_time(), w), bound, "join_waiter",
                                JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=req.member_id))

    async def sync_group(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
        error = self.group_error(group_id)
        if error is not None:
            return SyncResult(error)
        if self.consumer.get(group_id) is not None:
            return self.consumer.classic_sync(group_id, member_id, instance_id, generation, protocol_type,
                                              protocol_name)
        group = self.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        member = group.members.get(member_id)
        bound = (member.rebalance_timeout_ms if member else 0) / 1000 + WAIT_MARGIN_S
        return await self._wait(
            group, lambda w: group.sync(member_id, instance_id, generation, protocol_type, protocol_name,
                                        assignments, trio.current_time(), w),
            bound, "sync_waiter", SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        error = self.group_error(group_id)
        if error is not None:
            return error
        if self.consumer.get(group_id) is not None:
            return self.consumer.classic_heartbeat(group_id, member_id, instance_id, generation)
        group = self.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        before = group.changes
        result = group.heartbeat(member_id, instance_id, generation, trio.current_time())
        self._written(group, before)
        return result

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        error = self.group_error(group_id)
        if error is not None:
            return error, []
        if self.consumer.get(group_id) is not None:
            return ErrorCode.NONE, self.consumer.classic_leave(group_id, members)
        group = self.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        before = group.changes
        results = [group.leave(member_id, instance_id, trio.current_time()) for member_id, instance_id in members]
        self._written(group, before)
        return ErrorCode.NONE, results

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
                       retention_ms: int, offsets: list[tuple[str, int, CommittedOffset]],
                       api_version: int = 9) -> list[CommitResult]:
        # As Kafka: partitions that do not exist are answered before the group is looked at (and
        # when no partition exists, the group is not looked at at all)
        unknown = [(t, p) for t, p, _ in offsets if not self.partition_exists(t, p)]
        if unknown:
            known = [o for o in offsets if self.partition_exists(o[0], o[1])]
            results = {(r.topic, r.partition): r for r in
                       (self.commit_offsets(group_id, member_id, instance_id, generation, retention_ms, known,
                                            api_version) if known else [])}
            return [results.get((t, p)) or CommitResult(t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    for t, p, _ in offsets]
        error = self.group_error(group_id)
        if error is None and self.consumer.get(group_id) is not None:
            error = self.consumer.commit_error(group_id, member_id, generation, api_version)
            if error is None:
                # checked against the member epoch; the classic group only holds the offsets
                member_id, instance_id, generation = "", None, -1
        group = self.get(group_id)
        if error is None and group is None:
            error = None if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if error is None and group is not None:
            error = group.commit_error(member_id, instance_id, generation, trio.current_time())
        if error is not None:
            return [CommitResult(t, p, error) for t, p, _ in offsets]
        results, accepted = self._write_offsets(group_id, offsets, retention_ms)
        if accepted:
            group = self._get_or_create(group_id)
            for topic, index, value in accepted:
                group.offsets[(topic, index)] = value
        return results

    def _write_offsets(self, group_id: str, offsets: list[tuple[str, int, CommittedOffset]], retention_ms: int = -1,
                       producer: tuple[int, int] | None = None, verification_guard=None
                       ) -> tuple[list[CommitResult], list[tuple[str, int, CommittedOffset]]]:
        """The records of an OffsetCommit or (with ``producer``) a TxnOffsetCommit: every offset
        checked, those accepted stamped with the commit time (and expiry, with ``retention_ms`` >= 0)
        and appended in one batch. (results, accepted); a failed append is every accepted
        partition's error and accepts nothing."""
        results, accepted = [], []
        now = wall_clock_ms()
        expire = min(now + retention_ms, INT64_MAX) if retention_ms >= 0 else -1  # v2-4 may ask 2^63-1
        for topic, index, value in offsets:
            code = self._offset_error(topic, index, value)
            results.append(CommitResult(topic, index, code))
            if code is ErrorCode.NONE:
                accepted.append((topic, index, CommittedOffset(value.offset, value.leader_epoch, value.metadata,
                                                               now, expire)))
        if not accepted:
            return results, []
        try:
            self._append(group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), encode_offset_value(v))
                                    for t, p, v in accepted], producer=producer,
                         verification_guard=verification_guard)
        except (StorageError, OSError) as exc:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if producer is not None and isinstance(exc, StorageError) and ErrorCode[exc.error_code_name] in (
                    ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE):
                code = ErrorCode[exc.error_code_name]    # the producer was fenced: the client's answer
            else:
                log.error("could not persist %soffsets of group=%s: %s",
                          "" if producer is None else "transactional ", group_id, exc)
            return [CommitResult(r.topic, r.partition, code if r.error is ErrorCode.NONE else r.error)
                    for r in results], []
        return results, accepted

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether the partition exists anywhere in the cluster (Kafka's metadata cache), not only
        on this broker: a group's offsets are kept for partitions other brokers lead too."""
        return self.broker.metadata.partition_view(topic, index) is not None

    def _offset_error(self, topic: str, index: int, value: CommittedOffset) -> ErrorCode:
        if not self.partition_exists(topic, index):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if len(value.metadata.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES:
            return ErrorCode.OFFSET_METADATA_TOO_LARGE
        return ErrorCode.NONE

    def fetch_offsets(self, group_id: str,
                      topics: list[tuple[str, list[int]]] | None) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets of the asked partitions (None: nothing committed); all when topics is None."""
        group = self.get(group_id)
        known = group.offsets if group is not None else {}
        if topics is None:
            return dict(known)
        return {(t, p): known.get((t, p)) for t, parts in topics for p in parts}

    # ------------------------------------------------------------------ transactional offsets
    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                           instance_id: str | None, generation: int,
                           offsets: list[tuple[str, int, CommittedOffset]],
                           verification_guard=None) -> list[CommitResult]:
        """TxnOffsetCommit: append the offsets in the producer's transaction; pending until its marker.

        Checked as Kafka 4.0 checks it: with a member id, instance id or generation, against that
        member (any kind of group); without (a producer's sendOffsetsToTransaction(offsets, groupId)),
        not at all. A generation for a group that does not exist is ILLEGAL_GENERATION; without one,
        the group is created (Empty, as a simple consumer's commit creates it). ``verification_guard``:
        the offsets partition's guard taken before the transaction coordinator was awaited (KIP-890):
        a marker written meanwhile refuses the commit (INVALID_TXN_STATE)."""
        error = self.group_error(group_id)
        group = self.get(group_id)
        as_member = generation >= 0 or bool(member_id) or instance_id is not None
        if error is None and self.consumer.get(group_id) is not None:
            # a consumer group (its members of either protocol): checked against its member epochs
            if as_member:
                error = self.consumer.txn_commit_error(group_id, member_id, generation)
        elif error is None and group is None:
            if generation >= 0:
                error = ErrorCode.ILLEGAL_GENERATION
        elif error is None and as_member:
            error = group.commit_error(member_id, instance_id, generation, trio.current_time())
        if error is not None:
            return [CommitResult(t, p, error) for t, p, _ in offsets]
        results, accepted = self._write_offsets(group_id, offsets, producer=(producer_id, producer_epoch),
                                                verification_guard=verification_guard)
        if accepted and group is None and self.consumer.get(group_id) is None:
            self._get_or_create(group_id)
        if accepted:
            pending = self.pending_txn.setdefault(group_id, {}).setdefault(producer_id, {})
            for topic, index, value in accepted:
                pending[(topic, index)] = value
        return results

    def complete_txn(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to `__consumer_offsets`-`index`: settle pending offsets."""
        if topic != OFFSETS_TOPIC:
            return
        for group_id in [g for g, by_pid in self.pending_txn.items()
                         if producer_id in by_pid and self.partition_of(g) == index]:
            offsets = self.pending_txn[group_id].pop(producer_id)
            if not self.pending_txn[group_id]:
                del self.pending_txn[group_id]
            if commit:
                group = self._get_or_create(group_id)
                group.offsets.update(offsets)

    def has_pending_txn_offset(self, group_id: str, topic: str, index: int) -> bool:
        return any((topic, index) in offsets for offsets in self.pending_txn.get(group_id, {}).values())

    def delete_group(self, group_id: str) -> ErrorCode:
        error = self.group_error(group_id)
        if error is not None:
            return error
        consumer = self.consumer.delete(group_id)
        if consumer is ErrorCode.NON_EMPTY_GROUP:
            return consumer
        group = self.get(group_id)
        if group is None and consumer is ErrorCode.NONE:
            log.info("deleted consumer group=%s", group_id)
            return ErrorCode.NONE
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        self._remove_group(group)
        log.info("deleted group=%s", group_id)
        return ErrorCode.NONE

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> tuple[ErrorCode, dict]:
        error = self.group_error(group_id)
        if error is not None:
            return error, {}
        group = self.get(group_id)
        consumer = self.consumer.get(group_id)
        if consumer is not None:
            # a KIP-848 group (as Kafka 4.0): offsets may go at any time, except those of topics a
            # member subscribes to (by name or by its regex)
            subscribed = set().union(*consumer.subscribed_topics(self.consumer.topics()).values())
        elif group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        else:
            subscribed = group.subscribed_topics()
            if group.state is not GroupState.EMPTY and subscribed is None:
                return ErrorCode.NON_EMPTY_GROUP, {}
        offsets = group.offsets if group is not None else {}
        results, doomed = {}, []
        for topic, index in partitions:
            if subscribed and topic in subscribed:
                results[(topic, index)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            elif not self.partition_exists(topic, index):
                results[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                results[(topic, index)] = ErrorCode.NONE
                if (topic, index) in offsets:
                    doomed.append((topic, index))
        if doomed:
            self._append(group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in doomed])
            for tp in doomed:
                del group.offsets[tp]
        return ErrorCode.NONE, results

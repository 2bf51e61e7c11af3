"""Committed offsets (Kafka's OffsetMetadataManager): OffsetCommit, TxnOffsetCommit and their
markers, OffsetFetch, OffsetDelete, expiry, and the offset records of `__consumer_offsets`.

A group's committed offsets are held by its classic `Group` in the store (a member-less one while
the id is a KIP-848 consumer group). An OffsetCommit appends one offset record per partition (key:
group, topic, partition; value: offset, leader epoch, metadata, commit time); a null value
(tombstone) deletes one (OffsetDelete, expiry). Every record is appended before the request that
caused it is answered; an append that fails leaves memory unchanged (the commit is answered with
an error).

Transactional offset commits (TxnOffsetCommit): the offsets are appended as a transactional batch
with the producer's id and epoch and kept *pending* per (group, producer id); the transaction
coordinator's marker in the same `__consumer_offsets` partition (:meth:`complete_txn`) makes them
the group's committed offsets (COMMIT) or drops them (ABORT). OffsetFetch with require_stable
answers UNSTABLE_OFFSET_COMMIT for a partition while such a commit is pending. Loading replays the
same way: transactional batches are held per producer until their marker, and those still open
at the end stay pending.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import trio

from strom.broker.coordinator.group.classic_groups import ClassicGroups
from strom.broker.coordinator.group.consumer_groups import ConsumerGroups
from strom.broker.coordinator.group.records import (
    CommittedOffset,
    OffsetKey,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)
from strom.broker.coordinator.group.state import GroupState
from strom.broker.coordinator.group.store import GroupStore
from strom.broker.coordinator.group.streams_groups import StreamsGroups
from strom.broker.coordinator.runtime import NotEnoughReplicas
from strom.protocol.errors import ErrorCode
from strom.storage.errors import StorageError
from strom.storage.producer_state import VerificationGuard

log = logging.getLogger("strom.group")

OFFSET_METADATA_MAX_BYTES = 4096
INT64_MAX = 2**63 - 1

Offsets = list[tuple[str, int, CommittedOffset]]


@dataclass
class CommitResult:
    topic: str
    partition: int
    error: ErrorCode


class OffsetMetadataManager:
    """The committed offsets of every group of a store."""

    def __init__(
        self, store: GroupStore, classic: ClassicGroups, consumer: ConsumerGroups, streams: StreamsGroups | None = None
    ) -> None:
        self.store = store
        self.classic = classic
        self.consumer = consumer
        self.streams = streams  # KIP-1071 groups: their members commit with their member epochs

    # ------------------------------------------------------------------ OffsetCommit
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
        # As Kafka: partitions that do not exist are answered before the group is looked at (and
        # when no partition exists, the group is not looked at at all)
        exists = self.store.partition_exists
        unknown = [(t, p) for t, p, _ in offsets if not exists(t, p)]
        if unknown:
            known = [o for o in offsets if exists(o[0], o[1])]
            results = {
                (r.topic, r.partition): r
                for r in (
                    self.commit_offsets(group_id, member_id, instance_id, generation, retention_ms, known, api_version)
                    if known
                    else []
                )
            }
            return [
                results.get((t, p)) or CommitResult(t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for t, p, _ in offsets
            ]
        error = self.store.group_error(group_id)
        if error is None and self.streams is not None and self.streams.get(group_id) is not None:
            error = self.streams.commit_error(group_id, member_id, generation)
            if error is None:
                member_id, instance_id, generation = "", None, -1
        elif error is None and self.consumer.get(group_id) is not None:
            error = self.consumer.commit_error(group_id, member_id, generation, api_version)
            if error is None:
                # checked against the member epoch; the classic group only holds the offsets
                member_id, instance_id, generation = "", None, -1
        group = self.store.classic_group(group_id)
        if error is None and group is None:
            error = None if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if error is None and group is not None:
            error = group.commit_error(member_id, instance_id, generation, trio.current_time())
        if error is not None:
            return [CommitResult(t, p, error) for t, p, _ in offsets]
        written, accepted = self._write_offsets(group_id, offsets, retention_ms)
        if accepted:
            group = self.store.classic_group_or_new(group_id)
            for topic, index, value in accepted:
                group.offsets[(topic, index)] = value
        return written

    def _write_offsets(
        self,
        group_id: str,
        offsets: Offsets,
        retention_ms: int = -1,
        producer: tuple[int, int] | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> tuple[list[CommitResult], Offsets]:
        """The records of an OffsetCommit or (with ``producer``) a TxnOffsetCommit: every offset
        checked, those accepted stamped with the commit time (and expiry, with ``retention_ms`` >= 0)
        and appended in one batch. (results, accepted); a failed append is every accepted
        partition's error and accepts nothing."""
        results: list[CommitResult] = []
        accepted: Offsets = []
        now = self.store.wall_ms()
        expire = min(now + retention_ms, INT64_MAX) if retention_ms >= 0 else -1  # v2-4 may ask 2^63-1
        for topic, index, value in offsets:
            code = self._offset_error(topic, index, value)
            results.append(CommitResult(topic, index, code))
            if code is ErrorCode.NONE:
                accepted.append(
                    (topic, index, CommittedOffset(value.offset, value.leader_epoch, value.metadata, now, expire))
                )
        if not accepted:
            return results, []
        try:
            self.store.append(
                group_id,
                [(encode_offset_key(OffsetKey(group_id, t, p)), encode_offset_value(v)) for t, p, v in accepted],
                producer=producer,
                verification_guard=verification_guard,
            )
        except (StorageError, OSError) as exc:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if (
                producer is not None
                and isinstance(exc, StorageError)
                and ErrorCode[exc.error_code_name] in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE)
            ):
                code = ErrorCode[exc.error_code_name]  # the producer was fenced: the client's answer
            else:  # too few in-sync replicas is the cluster's state, not this write's failure
                (log.warning if isinstance(exc, NotEnoughReplicas) else log.error)(
                    "could not persist %soffsets of group=%s: %s",
                    "" if producer is None else "transactional ",
                    group_id,
                    exc,
                )
            return [
                CommitResult(r.topic, r.partition, code if r.error is ErrorCode.NONE else r.error) for r in results
            ], []
        return results, accepted

    def _offset_error(self, topic: str, index: int, value: CommittedOffset) -> ErrorCode:
        if not self.store.partition_exists(topic, index):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if len(value.metadata.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES:
            return ErrorCode.OFFSET_METADATA_TOO_LARGE
        return ErrorCode.NONE

    # ------------------------------------------------------------------ OffsetFetch
    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None
    ) -> dict[tuple[str, int], CommittedOffset | None]:
        """Committed offsets of the asked partitions (None: nothing committed); all when topics is None."""
        group = self.store.classic_group(group_id)
        known = group.offsets if group is not None else {}
        if topics is None:
            return dict(known)
        return {(t, p): known.get((t, p)) for t, parts in topics for p in parts}

    # ------------------------------------------------------------------ transactional offsets
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
        """TxnOffsetCommit: append the offsets in the producer's transaction; pending until its marker.

        Checked as Kafka 4.0 checks it: with a member id, instance id or generation, against that
        member (any kind of group); without (a producer's sendOffsetsToTransaction(offsets, groupId)),
        not at all. A generation for a group that does not exist is ILLEGAL_GENERATION; without one,
        the group is created (Empty, as a simple consumer's commit creates it). ``verification_guard``:
        the offsets partition's guard taken before the transaction coordinator was awaited (KIP-890):
        a marker written meanwhile refuses the commit (INVALID_TXN_STATE)."""
        error = self.store.group_error(group_id)
        group = self.store.classic_group(group_id)
        as_member = generation >= 0 or bool(member_id) or instance_id is not None
        if error is None and self.streams is not None and self.streams.get(group_id) is not None:
            if as_member:
                error = self.streams.commit_error(group_id, member_id, generation)
        elif error is None and self.consumer.get(group_id) is not None:
            # a consumer group (its members of either protocol): checked against its member epochs
            if as_member:
                error = self.consumer.txn_commit_error(group_id, member_id, generation)
        elif error is None and group is None:
            if generation >= 0:
                error = ErrorCode.ILLEGAL_GENERATION
        elif error is None and as_member and group is not None:
            error = group.commit_error(member_id, instance_id, generation, trio.current_time())
        if error is not None:
            return [CommitResult(t, p, error) for t, p, _ in offsets]
        results, accepted = self._write_offsets(
            group_id, offsets, producer=(producer_id, producer_epoch), verification_guard=verification_guard
        )
        if accepted and group is None and self.consumer.get(group_id) is None:
            self.store.classic_group_or_new(group_id)
        if accepted:
            pending = self.store.pending_txn.setdefault(group_id, {}).setdefault(producer_id, {})
            for topic, index, value in accepted:
                pending[(topic, index)] = value
        return results

    def complete_txn(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to `__consumer_offsets`-`index`: settle pending offsets."""
        pending_txn = self.store.pending_txn
        for group_id in [
            g for g, by_pid in pending_txn.items() if producer_id in by_pid and self.store.partition_of(g) == index
        ]:
            offsets = pending_txn[group_id].pop(producer_id)
            if not pending_txn[group_id]:
                del pending_txn[group_id]
            if commit:
                self.store.classic_group_or_new(group_id).offsets.update(offsets)

    def has_pending_txn_offset(self, group_id: str, topic: str, index: int) -> bool:
        return any((topic, index) in offsets for offsets in self.store.pending_txn.get(group_id, {}).values())

    # ------------------------------------------------------------------ OffsetDelete
    def delete_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        error = self.store.group_error(group_id)
        if error is not None:
            return error, {}
        group = self.store.classic_group(group_id)
        consumer = self.consumer.get(group_id)
        streams = self.streams.get(group_id) if self.streams is not None else None
        subscribed: set[str] | None
        if streams is not None:
            # a KIP-1071 group: as a consumer group, except the topics its members read
            subscribed = streams.subscribed_topics()
        elif consumer is not None:
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
        results: dict[tuple[str, int], ErrorCode] = {}
        doomed: list[tuple[str, int]] = []
        for topic, index in partitions:
            if subscribed and topic in subscribed:
                results[(topic, index)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            elif not self.store.partition_exists(topic, index):
                results[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                results[(topic, index)] = ErrorCode.NONE
                if (topic, index) in offsets:
                    doomed.append((topic, index))
        if doomed:
            self.store.append(group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in doomed])
            for tp in doomed:
                del offsets[tp]
        return ErrorCode.NONE, results

    # ------------------------------------------------------------------ expiry
    def expire_offsets(self, now_ms: int) -> int:
        """Delete offsets past their retention; Empty groups left without offsets die.

        As Kafka 4.0: a consumer group (KIP-848) without members whose offsets all expired, or that
        has none, is deleted too, its offset tombstones and its own in one batch, so that a restart
        does not bring it back."""
        removed = 0
        store = self.store
        for group_id in sorted(set(store.classic) | set(store.consumer)):
            group = store.classic.get(group_id)  # a classic group, or what holds a consumer group's offsets
            consumer = self.consumer.get(group_id)
            expired = group.expired_offsets(now_ms, store.config.offsets_retention_ms) if group is not None else []
            if expired and consumer is not None and consumer.members:
                # a consumer group keeps the offsets of topics its members subscribe to, as Kafka does
                subscribed = set().union(*consumer.subscribed_topics(self.consumer.topics()).values())
                expired = [tp for tp in expired if tp[0] not in subscribed]
            tombstones: list[tuple[bytes | None, bytes | None]] = [
                (encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in expired
            ]
            if (
                consumer is not None
                and not consumer.members
                and group_id not in store.pending_txn
                and (group is None or len(expired) == len(group.offsets))
            ):
                if self.consumer.expire(group_id, tombstones):
                    if group is not None:
                        group.offsets.clear()
                        store.classic.pop(group_id, None)
                    removed += len(expired)
                continue
            if expired and group is not None:
                store.append(group_id, tombstones)
                for tp in expired:
                    del group.offsets[tp]
                removed += len(expired)
            if (
                consumer is None
                and group is not None
                and group.state is GroupState.EMPTY
                and not group.offsets
                and not group.members
                and group_id not in store.pending_txn
            ):
                log.info("group=%s is empty and has no offsets left: removed", group_id)
                self.classic.remove(group)
        return removed

    async def run_expiry(self) -> None:
        """Expire offsets every `offsets.retention.check.interval.ms` until cancelled."""
        interval = self.store.config.offsets_retention_check_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            try:
                self.expire_offsets(self.store.wall_ms())
            except Exception:
                log.exception("offset expiry failed; will try again")

    # ------------------------------------------------------------------ loading
    def replay(self, key: OffsetKey, value: bytes | None) -> None:
        """Loading `__consumer_offsets`: one committed offset (None: its tombstone); raises
        `GroupRecordError` if unreadable."""
        group = self.store.classic_group_or_new(key.group)
        if value is None:
            group.offsets.pop((key.topic, key.partition), None)
        else:
            group.offsets[(key.topic, key.partition)] = decode_offset_value(value)

    def replay_pending(self, producer_id: int, key: OffsetKey, value: bytes) -> None:
        """Loading: an offset of a transaction still open at the end of the partition: pending."""
        self.store.pending_txn.setdefault(key.group, {}).setdefault(producer_id, {})[(key.topic, key.partition)] = (
            decode_offset_value(value)
        )

    def forget_pending(self, index: int) -> None:
        """Before a partition is loaded again: its pending transactional offsets go."""
        for group_id in [g for g in self.store.pending_txn if self.store.partition_of(g) == index]:
            del self.store.pending_txn[group_id]

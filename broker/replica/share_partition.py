"""The share-partition state machine on a partition's leader (KIP-932; Kafka's ``SharePartition``).

A share group reads a topic partition through one :class:`SharePartition`: the records from the
share-partition start offset (SPSO) up to the end of what was fetched (the SPSO's end, Kafka's
``endOffset``) are *in flight*, each in one state:

* AVAILABLE: may be acquired by the next ShareFetch of any member of the group;
* ACQUIRED: delivered to one member, locked for the acquisition lock duration
  (``group.share.record.lock.duration.ms``, the group's ``share.record.lock.duration.ms``);
* ACKNOWLEDGED: accepted by the member (done);
* ARCHIVED: rejected, past the delivery count limit, a gap, a control record or part of an aborted
  transaction under read_committed (done, never delivered again).

Each acquisition raises the record's delivery count. A release, or a lock that expires, makes the
record AVAILABLE again, or ARCHIVED once its delivery count reached ``group.share.delivery.count.limit``.
The SPSO moves past the records at its head that are done. The number of offsets in flight
(SPSO to end) is capped at ``group.share.partition.max.record.locks``.

Every change an acknowledgement, a release or an expiry makes is written through the
:class:`~strom.broker.coordinator.share.persister.Persister` before it is answered (write-through
as Kafka does); state loaded from it on first use makes acknowledgements survive the leader.

The class is pure apart from the persister and the clock it is given; the log is read by its
caller (:mod:`.share_manager`), which hands over the batches it read as :class:`LogBatch` facts.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from strom.broker.coordinator.share.persister import (
    UNINITIALIZED_START_OFFSET,
    DeliveryState,
    PartitionState,
    Persister,
    PersisterError,
    SharePartitionKey,
    StateBatch,
)
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.share")


class RecordState(enum.IntEnum):
    """An in-flight record's state (Kafka's ``RecordState``; the ids are those it persists)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types (0 gap, 1 accept, 2 release, 3 reject, 4 renew)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True)
class ShareSettings:
    """What one share partition follows: broker defaults overridden by the group's configs."""

    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms / share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit / share.delivery.count.limit
    max_record_locks: int = 2_000  # group.share.partition.max.record.locks / share.partition.max.record.locks
    read_committed: bool = False  # share.isolation.level
    auto_offset_reset: str = "latest"  # share.auto.offset.reset: earliest, latest, by_duration:<ISO 8601>


@dataclass(frozen=True)
class LogBatch:
    """One batch read from the log: its offsets, and whether its records are never delivered
    (a control batch, or an aborted transaction's batch under read_committed)."""

    first_offset: int
    last_offset: int
    skip: bool = False


@dataclass(frozen=True)
class AcquiredRange:
    """A run of acquired offsets with one delivery count (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline: float = 0.0  # trio time at which an ACQUIRED record's lock expires


@dataclass(frozen=True)
class AckBatch:
    """One acknowledgement batch of a request: offsets and one type, or one type per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass
class SharePartition:
    """One share group's view of one topic partition, on that partition's leader."""

    key: SharePartitionKey
    persister: Persister
    now: Callable[[], float]  # trio.current_time in the broker; a fake clock in tests
    settings: ShareSettings = field(default_factory=ShareSettings)
    leader_epoch: int = -1
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    end_offset: int = UNINITIALIZED_START_OFFSET  # the next offset never fetched into flight
    records: dict[int, InFlight] = field(default_factory=dict)
    initialized: bool = False

    # ------------------------------------------------------------------ loading
    async def initialize(self, reset_offset: Callable[[str], int]) -> None:
        """Read the persisted state; a share partition nobody started begins where
        ``share.auto.offset.reset`` says (``reset_offset(policy)`` gives the log offset)."""
        if self.initialized:
            return
        state: PartitionState = await self.persister.read_state(self.key, self.leader_epoch)
        self.state_epoch = state.state_epoch
        if state.start_offset == UNINITIALIZED_START_OFFSET:
            start = reset_offset(self.settings.auto_offset_reset)
            await self.persister.initialize_state(self.key, self.state_epoch, start)
            self.start_offset = self.end_offset = start
        else:
            self.start_offset = self.end_offset = state.start_offset
            for batch in state.batches:
                # records acquired when the state was written are available again (their lock died
                # with the leader); their delivery counts stay
                loaded = RecordState(batch.delivery_state)
                if loaded is RecordState.ACQUIRED:
                    loaded = RecordState.AVAILABLE
                for offset in range(max(batch.first_offset, self.start_offset), batch.last_offset + 1):
                    self.records[offset] = InFlight(loaded, batch.delivery_count)
                self.end_offset = max(self.end_offset, batch.last_offset + 1)
            self._advance_start()
        self.initialized = True

    # ------------------------------------------------------------------ reading the state
    def next_fetch_offset(self) -> int:
        """The first offset a fetch may acquire: the first AVAILABLE in flight, else the end."""
        for offset in range(self.start_offset, self.end_offset):
            record = self.records.get(offset)
            if record is None or record.state is RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def in_flight(self) -> int:
        return max(self.end_offset - self.start_offset, 0)

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire something: an available record in flight, or room for more."""
        if any(r.state is RecordState.AVAILABLE for r in self.records.values()):
            return True
        return self.in_flight() < self.settings.max_record_locks

    def counts(self) -> dict[str, int]:
        """How many in-flight records are in each state (console and metrics)."""
        out = {s.name.lower(): 0 for s in RecordState}
        for record in self.records.values():
            out[record.state.name.lower()] += 1
        return out

    def next_deadline(self) -> float | None:
        deadlines = [r.lock_deadline for r in self.records.values() if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------------ acquiring
    def move_start_to(self, log_start_offset: int) -> None:
        """The log's start moved past the SPSO (retention, DeleteRecords): those records are gone."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            self.records.pop(offset, None)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)

    def acquire(self, member_id: str, batches: Iterable[LogBatch], max_records: int) -> list[AcquiredRange]:
        """Acquire for ``member_id`` up to ``max_records`` records of ``batches`` (read from the
        log at :meth:`next_fetch_offset`) that are available or new, within the in-flight cap."""
        deadline = self.now() + self.settings.record_lock_duration_ms / 1000
        acquired: list[tuple[int, int]] = []  # (offset, delivery count)
        limit = self.start_offset + self.settings.max_record_locks
        for batch in batches:
            for offset in range(max(batch.first_offset, self.start_offset), batch.last_offset + 1):
                if len(acquired) >= max_records:
                    break
                record = self.records.get(offset)
                if offset >= self.end_offset:
                    if offset >= limit:
                        break
                    # offsets skipped by compaction between end and here are gaps: archived
                    for gap in range(self.end_offset, offset):
                        self.records[gap] = InFlight(RecordState.ARCHIVED)
                    self.end_offset = offset + 1
                    if batch.skip:
                        self.records[offset] = InFlight(RecordState.ARCHIVED)
                        continue
                    record = self.records[offset] = InFlight(RecordState.AVAILABLE)
                else:
                    if record is None:  # loaded state does not list offsets nobody acquired yet
                        record = self.records[offset] = InFlight(RecordState.AVAILABLE)
                    if record.state is not RecordState.AVAILABLE:
                        continue
                    if batch.skip:
                        record.state = RecordState.ARCHIVED
                        continue
                record.state = RecordState.ACQUIRED
                record.delivery_count += 1
                record.member_id = member_id
                record.lock_deadline = deadline
                acquired.append((offset, record.delivery_count))
        self._advance_start()
        return _ranges(acquired)

    # ------------------------------------------------------------------ acknowledging
    def check_acknowledgements(self, member_id: str, batches: Sequence[AckBatch], renew_allowed: bool) -> ErrorCode:
        """Whether ``batches`` may be applied as a whole: NONE, INVALID_REQUEST for a malformed
        batch, INVALID_RECORD_STATE when a record is not acquired by ``member_id``."""
        for batch in batches:
            size = batch.last_offset - batch.first_offset + 1
            if size <= 0 or not batch.types or (len(batch.types) != 1 and len(batch.types) != size):
                return ErrorCode.INVALID_REQUEST
            for kind in batch.types:
                if kind not in AcknowledgeType._value2member_map_ or (
                    kind == AcknowledgeType.RENEW and not renew_allowed
                ):
                    return ErrorCode.INVALID_REQUEST
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                kind = batch.types[0] if len(batch.types) == 1 else batch.types[i]
                record = self.records.get(offset)
                if kind == AcknowledgeType.GAP and (record is None or offset >= self.end_offset):
                    continue  # a gap the client saw (compaction) beyond what is tracked: nothing to do
                if record is None or record.state is not RecordState.ACQUIRED or record.member_id != member_id:
                    return ErrorCode.INVALID_RECORD_STATE
        return ErrorCode.NONE

    async def acknowledge(self, member_id: str, batches: Sequence[AckBatch], renew_allowed: bool = False) -> ErrorCode:
        """Apply ``batches`` for ``member_id`` and write the change through (NONE or the error)."""
        code = self.check_acknowledgements(member_id, batches, renew_allowed)
        if code != ErrorCode.NONE:
            return code
        changed: list[int] = []
        renew_deadline = self.now() + self.settings.record_lock_duration_ms / 1000
        for batch in batches:
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                kind = batch.types[0] if len(batch.types) == 1 else batch.types[i]
                record = self.records.get(offset)
                if record is None:
                    continue
                if kind == AcknowledgeType.RENEW:
                    record.lock_deadline = renew_deadline
                    continue
                if kind == AcknowledgeType.ACCEPT:
                    self._set(record, RecordState.ACKNOWLEDGED)
                elif kind == AcknowledgeType.RELEASE:
                    self._release(record)
                else:  # REJECT, GAP
                    self._set(record, RecordState.ARCHIVED)
                changed.append(offset)
        return await self._persist(changed)

    async def release_member(self, member_id: str) -> ErrorCode:
        """Release everything ``member_id`` holds (its share session closed, it left the group)."""
        changed = [o for o, r in self.records.items() if r.state is RecordState.ACQUIRED and r.member_id == member_id]
        for offset in changed:
            self._release(self.records[offset])
        return await self._persist(changed)

    async def expire_locks(self) -> int:
        """Make the records whose acquisition lock expired available (or archived) again."""
        now = self.now()
        changed = [o for o, r in self.records.items() if r.state is RecordState.ACQUIRED and r.lock_deadline <= now]
        for offset in changed:
            self._release(self.records[offset])
        if changed:
            log.debug("%s: %d acquisition locks expired", self.key, len(changed))
            await self._persist(changed)
        return len(changed)

    # ------------------------------------------------------------------ internals
    def _set(self, record: InFlight, state: RecordState) -> None:
        record.state = state
        record.member_id = None
        record.lock_deadline = 0.0

    def _release(self, record: InFlight) -> None:
        limit_reached = record.delivery_count >= self.settings.delivery_count_limit
        self._set(record, RecordState.ARCHIVED if limit_reached else RecordState.AVAILABLE)

    def _advance_start(self) -> None:
        start = self.start_offset
        while start < self.end_offset:
            record = self.records.get(start)
            if record is None or record.state not in DONE:
                break
            del self.records[start]
            start += 1
        self.start_offset = start

    async def _persist(self, changed: Sequence[int]) -> ErrorCode:
        if not changed:
            return ErrorCode.NONE
        states = [
            (o, self.records[o].state, self.records[o].delivery_count) for o in sorted(changed) if o in self.records
        ]
        self._advance_start()
        batches: list[StateBatch] = []
        for offset, state, count in states:
            stored = DeliveryState.AVAILABLE if state is RecordState.ACQUIRED else DeliveryState(state)
            last = batches[-1] if batches else None
            if (
                last is not None
                and last.last_offset + 1 == offset
                and (last.delivery_state, last.delivery_count)
                == (
                    stored,
                    count,
                )
            ):
                batches[-1] = StateBatch(last.first_offset, offset, stored, count)
            else:
                batches.append(StateBatch(offset, offset, stored, count))
        try:
            await self.persister.write_state(self.key, self.state_epoch, self.leader_epoch, self.start_offset, batches)
        except PersisterError as exc:
            log.warning("%s: writing share state failed: %s", self.key, exc)
            return exc.code
        return ErrorCode.NONE


def _ranges(acquired: list[tuple[int, int]]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for offset, count in acquired:
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == offset and last.delivery_count == count:
            out[-1] = AcquiredRange(last.first_offset, offset, count)
        else:
            out.append(AcquiredRange(offset, offset, count))
    return out

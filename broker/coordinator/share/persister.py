"""The persister port: where a share-partition leader keeps its state (Kafka's ``Persister``).

A share partition (one group reading one topic partition, KIP-932) has a state the leader of the
topic partition owns in memory and writes through to the share coordinator: the share-partition
start offset (SPSO), a state epoch, and the in-flight records as batches of (first offset, last
offset, delivery state, delivery count). Kafka's ``Persister`` interface has initializeState,
readState, writeState, deleteState and readSummary; :class:`Persister` is that seam, one call per
share partition (Kafka's share-partition leader also asks for one partition per call).

``write_state`` carries a *delta*: the batches whose state changed. The coordinator merges them
over what it holds (a newer batch wins offset by offset), drops what lies below the new start
offset, and keeps the rest, as Kafka's share coordinator merges a ShareUpdate into its snapshot.

Errors are raised as :class:`PersisterError` with Kafka's error code (FENCED_STATE_EPOCH for a
stale state epoch, FENCED_LEADER_EPOCH for a stale leader epoch, COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR, ...). :class:`InMemoryPersister` keeps everything in a dict, for tests of the
share partitions; every broker uses the durable one (`state_persister.DefaultStatePersister`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from strom.protocol.errors import ErrorCode

# Kafka's PartitionFactory: the start offset of a share partition nobody has initialized yet, and
# the state epoch and leader epoch a fresh state starts from.
UNINITIALIZED_START_OFFSET = -1
DEFAULT_STATE_EPOCH = 0
DEFAULT_LEADER_EPOCH = -1
# deliveryCompleteCount when the writer does not know it (WriteShareGroupState v0)
UNKNOWN_DELIVERY_COMPLETE_COUNT = -1


class DeliveryState(enum.IntEnum):
    """A record's state as the persister stores it (Kafka's ``RecordState`` ids)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True, order=True)
class SharePartitionKey:
    """One share partition: a share group reading one topic partition (Kafka's ``SharePartitionKey``)."""

    group_id: str
    topic_id: bytes
    partition: int


@dataclass(frozen=True)
class StateBatch:
    """A run of offsets with one delivery state and count (Kafka's ``PersisterStateBatch``)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True)
class PartitionState:
    """What ``read_state`` answers for one share partition."""

    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True)
class PartitionSummary:
    """What ``read_summary`` answers: the state without its batches (Kafka's readSummary)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


class PersisterError(Exception):
    """A persister call failed with a Kafka error code (and its message)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class Persister(Protocol):
    """The share-partition leader's port to share-group state (Kafka's ``Persister``)."""

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        """Start (or restart) the state of a share partition at ``start_offset`` in ``state_epoch``.

        The batches are dropped. A state epoch lower than the stored one is FENCED_STATE_EPOCH.
        """
        ...

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> PartitionState:
        """The state of a share partition, read by its leader in ``leader_epoch``.

        The stored leader epoch is raised to ``leader_epoch``; a lower one is FENCED_LEADER_EPOCH.
        A share partition never initialized answers start offset -1 and state epoch 0.
        """
        ...

    async def write_state(
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT,
    ) -> None:
        """Merge ``batches`` (the changed ranges) into the stored state and move its start offset.

        A stale state epoch is FENCED_STATE_EPOCH, a stale leader epoch FENCED_LEADER_EPOCH; a
        start offset of -1 keeps the stored one.
        """
        ...

    async def delete_state(self, key: SharePartitionKey) -> None:
        """Forget a share partition's state (the group, or its offsets for the topic, are deleted)."""
        ...

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> PartitionSummary:
        """The start offset and epochs of a share partition, without its batches."""
        ...


def merge_batches(
    current: Iterable[StateBatch], update: Iterable[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    """``update`` laid over ``current`` offset range by offset range, cut below ``start_offset``.

    Adjacent batches with the same state and count are joined. This is the merge Kafka's share
    coordinator does when a ShareUpdate arrives (its PersisterStateBatchCombiner).
    """
    runs: list[StateBatch] = [b for b in current if b.last_offset >= start_offset]
    for new in update:
        if new.last_offset < start_offset or new.last_offset < new.first_offset:
            continue
        kept: list[StateBatch] = []
        for old in runs:
            if old.last_offset < new.first_offset or old.first_offset > new.last_offset:
                kept.append(old)
                continue
            if old.first_offset < new.first_offset:
                kept.append(StateBatch(old.first_offset, new.first_offset - 1, old.delivery_state, old.delivery_count))
            if old.last_offset > new.last_offset:
                kept.append(StateBatch(new.last_offset + 1, old.last_offset, old.delivery_state, old.delivery_count))
        kept.append(new)
        runs = kept
    runs.sort(key=lambda b: b.first_offset)
    out: list[StateBatch] = []
    for run in runs:
        if run.last_offset < start_offset:
            continue
        if run.first_offset < start_offset:
            run = StateBatch(start_offset, run.last_offset, run.delivery_state, run.delivery_count)
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.last_offset + 1 == run.first_offset
            and (prev.delivery_state, prev.delivery_count) == (run.delivery_state, run.delivery_count)
        ):
            out[-1] = StateBatch(prev.first_offset, run.last_offset, prev.delivery_state, prev.delivery_count)
        else:
            out.append(run)
    return tuple(out)


@dataclass
class _Stored:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT


@dataclass
class InMemoryPersister:
    """A :class:`Persister` over a dict: state lives as long as the process."""

    states: dict[SharePartitionKey, _Stored] = field(default_factory=dict)
    writes: int = 0

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        stored = self.states.get(key)
        if stored is not None and state_epoch < stored.state_epoch:
            raise PersisterError(ErrorCode.FENCED_STATE_EPOCH)
        leader_epoch = stored.leader_epoch if stored is not None else DEFAULT_LEADER_EPOCH
        self.states[key] = _Stored(state_epoch, leader_epoch, start_offset)

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> PartitionState:
        stored = self.states.get(key)
        if stored is None:
            return PartitionState(DEFAULT_STATE_EPOCH, UNINITIALIZED_START_OFFSET)
        if leader_epoch != DEFAULT_LEADER_EPOCH:
            if leader_epoch < stored.leader_epoch:
                raise PersisterError(ErrorCode.FENCED_LEADER_EPOCH)
            stored.leader_epoch = leader_epoch
        return PartitionState(stored.state_epoch, stored.start_offset, stored.batches)

    async def write_state(
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT,
    ) -> None:
        stored = self.states.get(key)
        if stored is None:
            stored = _Stored(state_epoch, DEFAULT_LEADER_EPOCH, start_offset)
            self.states[key] = stored
        if state_epoch < stored.state_epoch:
            raise PersisterError(ErrorCode.FENCED_STATE_EPOCH)
        if leader_epoch != DEFAULT_LEADER_EPOCH:
            if leader_epoch < stored.leader_epoch:
                raise PersisterError(ErrorCode.FENCED_LEADER_EPOCH)
            stored.leader_epoch = leader_epoch
        if start_offset != UNINITIALIZED_START_OFFSET:
            stored.start_offset = start_offset
        stored.state_epoch = state_epoch
        stored.batches = merge_batches(stored.batches, batches, stored.start_offset)
        stored.delivery_complete_count = delivery_complete_count
        self.writes += 1

    async def delete_state(self, key: SharePartitionKey) -> None:
        self.states.pop(key, None)

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> PartitionSummary:
        stored = self.states.get(key)
        if stored is None:
            return PartitionSummary(DEFAULT_STATE_EPOCH, DEFAULT_LEADER_EPOCH, UNINITIALIZED_START_OFFSET)
        return PartitionSummary(
            stored.state_epoch, stored.leader_epoch, stored.start_offset, stored.delivery_complete_count
        )

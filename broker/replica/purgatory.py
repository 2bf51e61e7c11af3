"""The purgatories: requests parked until a change to their partitions completes them.

Kafka keeps a DelayedOperationPurgatory per kind of delayed request; here both kinds watch one
`DataWaiters`, because every notification concerns both: an append can satisfy a long-polling
fetch, and a follower's fetch (which moves the high watermark) can satisfy an acks=all produce as
well as a consumer's long poll at a follower (KIP-392).

* `DelayedProduce`: an acks=all produce (or a coordinator's append) waiting for the in-sync
  replicas. Each partition's part is a `PendingAppend`, keyed by the leader epoch the records were
  appended in: the wait completes only while this broker still leads that partition in that
  epoch. Once the broker follows (and may have truncated the record and copied another leader's
  record into its offset, with a high watermark beyond it), leads again in a later epoch, or no
  longer hosts the partition, the append answers NOT_LEADER_OR_FOLLOWER, never success. Every such
  leadership change wakes the waiters of that partition.
* `DelayedFetch`: a fetch waiting for `min_bytes`, woken by changes to its own partitions only.

A `Purgatory` counts the operations of its kind that are waiting (Kafka's purgatory size metric).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Generic,
    TypeVar,
)

import trio

from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from .partition import Partition

TopicPartition = tuple[str, int]


class DataWaiters:
    """Who waits for which partitions: fetches for data or a newer high watermark, produces
    (acks=all) for the ISR to catch up.

    A waiter names the partitions it waits on, or none (it wants every change). A notification
    names the partitions whose data or high watermark changed, or none (a change that may concern
    any partition: leadership, ISR, deletion, markers, ...). A named notification wakes the waiters
    of those partitions and the waiters of none; an unnamed one wakes everybody. So an append
    to one partition no longer makes every long-polling fetch of the broker read its partitions
    again, and any change not known to be local to some partitions still wakes everybody, as all
    notifications did before. Waking is only a hint: a woken waiter checks its condition again.
    Nothing here outlives the process; a waiter's registration goes when its wait ends, also
    when it is cancelled.
    """

    __slots__ = ("_any", "_by_partition")

    def __init__(self) -> None:
        self._by_partition: dict[TopicPartition, set[trio.Event]] = {}
        self._any: set[trio.Event] = set()

    def notify(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        if partitions is None:
            for events in self._by_partition.values():
                for event in events:
                    event.set()
        else:
            for key in partitions:
                for event in self._by_partition.get(key, ()):
                    event.set()
        for event in self._any:
            event.set()

    async def wait(self, partitions: Collection[TopicPartition] | None = None) -> None:
        event = trio.Event()
        if partitions is None:
            self._any.add(event)
        else:
            for key in partitions:
                self._by_partition.setdefault(key, set()).add(event)
        try:
            await event.wait()
        finally:
            if partitions is None:
                self._any.discard(event)
            else:
                for key in partitions:
                    events = self._by_partition.get(key)
                    if events is not None:
                        events.discard(event)
                        if not events:
                            del self._by_partition[key]

    def waiting(self) -> int:
        """How many waits are registered (distinct waiters; for tests and metrics)."""
        return len(self._any) + len({id(e) for events in self._by_partition.values() for e in events})


Op = TypeVar("Op")


class Purgatory(Generic[Op]):
    """The delayed operations of one kind (produce or fetch) while they wait, over the shared
    `DataWaiters` (Kafka's DelayedOperationPurgatory: `delayed` is its size)."""

    def __init__(self, name: str, waiters: DataWaiters) -> None:
        self.name = name
        self._waiters = waiters
        self._operations: set[int] = set()

    @property
    def delayed(self) -> int:
        """How many operations of this kind are waiting now."""
        return len(self._operations)

    async def watch(self, operation: Op, keys: Collection[TopicPartition] | None) -> None:
        """Park ``operation`` until a notification concerning ``keys`` (any, if None)."""
        self._operations.add(id(operation))
        try:
            await self._waiters.wait(keys)
        finally:
            self._operations.discard(id(operation))


@dataclass(slots=True)
class PendingAppend:
    """An append waiting for the in-sync replicas: one partition's part of Kafka's DelayedProduce
    (its ProducePartitionStatus).

    ``required`` is the offset after the appended records, ``leader_epoch`` the epoch they were
    appended in (take it with :meth:`of` right after the append, before anything can await)."""

    partition: Partition
    leader_epoch: int
    required: int

    @classmethod
    def of(cls, partition: Partition, required: int) -> PendingAppend:
        return cls(partition, partition.leader_epoch, required)

    @property
    def key(self) -> TopicPartition:
        return (self.partition.topic, self.partition.index)

    def status(self) -> ErrorCode | None:
        """NOT_LEADER_OR_FOLLOWER once this broker no longer leads the partition in that epoch
        (checked first: a follower's high watermark says nothing of this append), NONE once the
        high watermark covers the append, None while it still waits."""
        if not self.partition.leads(self.leader_epoch):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.partition.high_watermark >= self.required:
            return ErrorCode.NONE
        return None


async def await_appends(
    pending: list[PendingAppend], timeout_s: float, wait: Callable[[list[TopicPartition]], Awaitable[None]]
) -> list[ErrorCode]:
    """Wait (at most ``timeout_s``) until every append is replicated or has lost its leader, and
    answer each: NONE, NOT_LEADER_OR_FOLLOWER, or REQUEST_TIMED_OUT. ``wait(keys)`` parks until a
    change that may concern those partitions (``ReplicaManager.wait_for_data``); every wake-up looks
    at every unfinished append again."""
    with trio.move_on_after(max(timeout_s, 0)):
        while True:
            waiting = [p.key for p in pending if p.status() is None]
            if not waiting:
                break
            await wait(waiting)
    out = []
    for p in pending:
        status = p.status()
        out.append(ErrorCode.REQUEST_TIMED_OUT if status is None else status)
    return out


@dataclass(slots=True)
class DelayedProduce:
    """An acks=all produce: its appends, each with the min.insync.replicas of its topic.

    :meth:`complete` waits until each append is replicated, its leadership lost, or the timeout,
    and answers each as Kafka's DelayedProduce does: NONE, NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum
    while the append waited."""

    appends: list[PendingAppend]
    min_isr: list[int]

    async def complete(self, purgatory: Purgatory[DelayedProduce], timeout_s: float) -> list[ErrorCode]:
        codes = await await_appends(self.appends, timeout_s, lambda keys: purgatory.watch(self, keys))
        out = []
        for pending, min_isr, code in zip(self.appends, self.min_isr, codes, strict=False):
            if code == ErrorCode.NONE and len(pending.partition.isr) < min_isr:
                code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            out.append(code)
        return out


R = TypeVar("R")


@dataclass(slots=True)
class DelayedFetch(Generic[R]):
    """A fetch that found fewer than ``min_bytes``: read again on every change to its partitions
    until it has them, a read fails, or the deadline (trio time) passes.

    ``read()`` is one pass over the fetch's partitions: (result, bytes found, whether it must be
    answered now, the partitions read). ``wake_by(now)`` may bring the next look forward (a
    throttled follower's data is due again when the replication rate falls)."""

    read: Callable[[], tuple[R, int, bool, list[TopicPartition]]]
    min_bytes: int
    deadline: float
    wake_by: Callable[[float], float] | None = None

    async def complete(self, purgatory: Purgatory[DelayedFetch[R]]) -> R:
        while True:
            result, total, answer_now, read = self.read()
            now = trio.current_time()
            if total >= self.min_bytes or answer_now or now >= self.deadline:
                return result
            wake = self.deadline if self.wake_by is None else min(self.deadline, self.wake_by(now))
            with trio.move_on_at(wake):
                await purgatory.watch(self, read)

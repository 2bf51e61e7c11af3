"""Partitions this broker hosts, as leader or follower; high watermarks and in-sync replicas.

A leader keeps, per follower, the log end offset the follower last fetched from and when it
last was caught up. The high watermark is the smallest log end offset in the in-sync replica
set (ISR); it never goes backwards. A follower that is behind the leader's log end and has not
caught up for `replica.lag.time.max.ms` leaves the ISR; one whose log end offset reaches the high
watermark and the offset the leader's epoch started at rejoins. ISR changes go through
`isr_listener` (ZooKeeper in a cluster) before they count.

A standalone broker is the only replica of every partition, so the ISR is just itself and the
high watermark follows the log end offset as soon as an append lands. It is still kept apart
(and checkpointed), so that consumers only ever see what `acks=all` would have acknowledged.

An append that waits for the ISR (acks=all produce, a transaction marker, a coordinator's state
record) is a `PendingAppend`: the partition object, the leader epoch it was appended in and the
offset after it, as Kafka's DelayedProduce keeps them. It completes only while this broker still
leads that partition in that epoch: once the broker follows (and may have truncated the record and
copied another leader's record into its offset, with a high watermark beyond it), leads again in a
later epoch, or no longer hosts the partition, the wait answers NOT_LEADER_OR_FOLLOWER, never
success. Every such leadership change wakes the waiters of that partition.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Collection, Iterable

import trio

from strom.protocol.errors import ErrorCode
from strom.storage.log import Log, LogAppendInfo
from strom.storage.producer_state import AppendOrigin

log = logging.getLogger("strom.replicas")


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class FollowerState:
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    log_start_offset: int = -1
    # the leader's log end offset and the time at the follower's previous fetch (Kafka's
    # lastFetchLeaderLogEndOffset, lastFetchTimeMs): a fetch from at least that offset shows the
    # follower had everything the leader had then, so it was caught up at that time
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_ms: int = 0


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    local_id: int
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    state_version: int = -1  # the partition-state znode version this view came from
    followers: dict[int, FollowerState] = field(default_factory=dict)
    # as a follower: whether the last fetch found this replica at the leader's high watermark
    # (Kafka's "in sync" for the follower replication throttle)
    fetch_caught_up: bool = False
    # as a leader elected in a cluster: the log end offset when it took the lead (where its epoch's
    # data starts). Until the high watermark reaches it, what is committed is not yet known here:
    # ListOffsets answers consumers OFFSET_NOT_AVAILABLE meanwhile, as Kafka does.
    leader_epoch_start_offset: int | None = None
    # no longer hosted here (deleted, reassigned away): a later replica of it is a new Partition
    removed: bool = False
    # called when this replica's leadership changes (the manager wakes the partition's waiters)
    on_leadership_change: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    def leads(self, epoch: int) -> bool:
        """Whether this broker still leads this hosted partition in leader epoch ``epoch``."""
        return not self.removed and self.is_leader and self.leader_epoch == epoch

    def _leadership_changed(self) -> None:
        if self.on_leadership_change is not None:
            self.on_leadership_change()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def append(self, records, headers, origin: AppendOrigin = AppendOrigin.CLIENT,
               verification_guard=None) -> LogAppendInfo:
        info = self.log.append_as_leader(records, headers, self.leader_epoch, origin, verification_guard)
        self.maybe_advance_high_watermark()
        return info

    def become_leader(self, epoch: int, replicas: list[int], isr: list[int], version: int) -> None:
        start = now_ms()
        self.leader_id, self.leader_epoch = self.local_id, epoch
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.replicas, self.isr, self.state_version = list(replicas), list(isr), version
        self.followers = {r: FollowerState(last_caught_up_ms=start) for r in replicas if r != self.local_id}
        self.maybe_advance_high_watermark()
        self._leadership_changed()

    def become_follower(self, leader: int, epoch: int, replicas: list[int], isr: list[int], version: int) -> None:
        changed = self.is_leader or leader != self.leader_id or epoch != self.leader_epoch
        if leader != self.leader_id:
            self.fetch_caught_up = False
        self.leader_id, self.leader_epoch = leader, epoch
        self.leader_epoch_start_offset = None
        self.replicas, self.isr, self.state_version = list(replicas), list(isr), version
        self.followers = {}
        if changed:
            self._leadership_changed()

    def record_follower_fetch(self, replica: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        """A follower fetched from ``fetch_offset``: its log ends there. As Kafka's replica state:
        it is caught up now if that is the leader's log end offset, and was caught up at its
        previous fetch if it reaches the leader's log end offset of then (under a steady load a
        follower fetching as fast as it can is always one fetch behind, yet never lags)."""
        state = self.followers.setdefault(replica, FollowerState())
        current = now_ms()
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, current)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_leader_log_end_offset = max(leader_end, state.last_fetch_leader_log_end_offset)
        state.last_fetch_ms = current

    def maybe_advance_high_watermark(self) -> bool:
        """HW = the smallest log end offset among in-sync replicas (never moves back)."""
        if not self.is_leader:
            return False
        hw = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.local_id:
                follower = self.followers.get(replica)
                hw = min(hw, follower.log_end_offset if follower else -1)
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw
            return True
        return False

    def lagging_replicas(self, max_lag_ms: int) -> list[int]:
        """In-sync followers out of sync (Kafka's isCaughtUp negated): not at the leader's log end
        offset and not caught up for more than ``max_lag_ms``. A follower at the log end of an
        idle partition is in sync however long ago it fetched (a dead broker's replicas leave
        the ISR through the controller)."""
        current = now_ms()
        leader_end = self.log.log_end_offset
        lagging = []
        for r in self.isr:
            if r == self.local_id:
                continue
            state = self.followers.get(r, FollowerState())
            if state.log_end_offset != leader_end and current - state.last_caught_up_ms > max_lag_ms:
                lagging.append(r)
        return lagging

    def caught_up_replicas(self) -> list[int]:
        """Followers out of the ISR that may rejoin it: their log end offset reaches the high
        watermark and the offset this leader's epoch started at (KAFKA-7128: a new leader's
        high watermark can lag its log; a follower admitted below the epoch's start could be
        elected without records the ISR had, and lose them)."""
        start = self.leader_epoch_start_offset
        if not self.is_leader or start is None:
            return []
        hw = self.log.high_watermark
        return [r for r, f in self.followers.items()
                if r not in self.isr and r in self.replicas and f.log_end_offset >= max(hw, start)]


class ReplicaManager:
    def __init__(self, node_id: int):
        self.node_id = node_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._waiters = DataWaiters()
        self.isr_listener: Callable[[Partition, list[int]], None] | None = None

    def add(self, topic: str, index: int, partition_log: Log, *, leader: int | None = None,
            leader_epoch: int | None = None, replicas: list[int] | None = None,
            isr: list[int] | None = None) -> Partition:
        """Host a partition. With no leadership given: standalone, this broker leads alone."""
        if leader_epoch is None:
            epoch = partition_log.latest_epoch()
            leader_epoch = epoch if epoch is not None and epoch >= 0 else 0
        partition = Partition(topic, index, partition_log, self.node_id,
                              leader if leader is not None else self.node_id, leader_epoch,
                              replicas or [self.node_id], isr or [self.node_id])
        partition.maybe_advance_high_watermark()
        key = (topic, index)
        partition.on_leadership_change = lambda: self.notify_data([key])
        previous = self.partitions.get(key)
        self.partitions[key] = partition
        if previous is not None:  # replaced: whoever waits on the old replica must learn it
            previous.removed = True
            self.notify_data([key])
        return partition

    def remove(self, topic: str, index: int) -> Partition | None:
        partition = self.partitions.pop((topic, index), None)
        if partition is not None:
            partition.removed = True
            self.notify_data([(topic, index)])
        return partition

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def notify_data(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Something changed: wake the waiters it concerns (see `DataWaiters`). With `partitions`,
        only data or the high watermark of those changed; without, anything may have."""
        self._waiters.notify(partitions)

    async def wait_for_data(self, partitions: Collection[tuple[str, int]] | None = None) -> None:
        """Park until a `notify_data` that concerns `partitions` (any, if None); callers bound it
        with a deadline and look again at what they wait for when woken."""
        await self._waiters.wait(partitions)


@dataclass(slots=True)
class PendingAppend:
    """An append waiting for the in-sync replicas: one partition's part of Kafka's DelayedProduce.

    ``required`` is the offset after the appended records, ``leader_epoch`` the epoch they were
    appended in (take it with :meth:`of` right after the append, before anything can await)."""
    partition: Partition
    leader_epoch: int
    required: int

    @classmethod
    def of(cls, partition: Partition, required: int) -> "PendingAppend":
        return cls(partition, partition.leader_epoch, required)

    @property
    def key(self) -> tuple[str, int]:
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


async def await_appends(pending: list[PendingAppend], timeout_s: float,
                        wait: Callable[[list[tuple[str, int]]], Awaitable[None]]) -> list[ErrorCode]:
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

    __slots__ = ("_by_partition", "_any")

    def __init__(self) -> None:
        self._by_partition: dict[tuple[str, int], set[trio.Event]] = {}
        self._any: set[trio.Event] = set()

    def notify(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
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

    async def wait(self, partitions: Collection[tuple[str, int]] | None = None) -> None:
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

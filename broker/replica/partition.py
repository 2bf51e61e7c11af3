"""A partition this broker hosts, as leader or follower: its high watermark and in-sync replicas.

A leader keeps, per follower, the log end offset the follower last fetched from and when it
last was caught up. The high watermark is the smallest log end offset in the in-sync replica
set (ISR); it never goes backwards. A follower that is behind the leader's log end and has not
caught up for `replica.lag.time.max.ms` leaves the ISR; one whose log end offset reaches the high
watermark and the offset the leader's epoch started at rejoins. ISR changes go through
the cluster member (a version-conditional write to ZooKeeper) before they count.

A standalone broker is the only replica of every partition, so the ISR is just itself and the
high watermark follows the log end offset as soon as an append lands. It is still kept apart
(and checkpointed), so that consumers only ever see what `acks=all` would have acknowledged.

Appends that wait for the ISR (acks=all) are keyed by the leader epoch they were appended in
(`strom.broker.replica.purgatory`); every leadership change of a partition calls
`on_leadership_change`, with which the `ReplicaManager` wakes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from strom.protocol.records.header import BatchHeader
from strom.storage import clock
from strom.storage.log import Log, LogAppendInfo
from strom.storage.producer_state import AppendOrigin, VerificationGuard


def now_ms() -> int:
    return int(clock.monotonic() * 1000)


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

    def append(
        self,
        records: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
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
        return [
            r
            for r, f in self.followers.items()
            if r not in self.isr and r in self.replicas and f.log_end_offset >= max(hw, start)
        ]

"""The classic consumer-group state machine, pure: no I/O, no trio, time passed in.

States and moves (Kafka's classic protocol)::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join with new metadata, leave, session expiry--> PreparingRebalance
    PreparingRebalance --no members left when the join phase ends--> Empty
    Empty --offsets expired or DeleteGroups--> Dead

* JoinGroup from an unknown member gets a fresh member id. From v4 on (`require_known_member_id`)
  a dynamic member is first answered MEMBER_ID_REQUIRED and kept as *pending* until it joins
  again with that id (KIP-394); a pending member holds up the join phase until it joins or its
  session timeout passes.
* A rebalance from Empty waits `group.initial.rebalance.delay.ms`, extended by the same delay while
  new members keep arriving, up to the rebalance timeout. Otherwise the join phase ends as soon as
  every member has rejoined, or at the largest member rebalance timeout; dynamic members that did
  not rejoin are removed then. Ending it bumps the generation, picks the protocol every member
  supports that most members prefer, and answers each waiting JoinGroup (the leader gets every
  member's metadata).
* The leader's SyncGroup carries the assignment; then every member's SyncGroup is answered.
* Static members (`group.instance.id`) keep their place across restarts: a rejoin under a known
  instance id replaces the old member id (the old one is fenced with FENCED_INSTANCE_ID) and, in
  Stable, does not rebalance when the chosen protocol stays the same.
* A member's session ends `session.timeout.ms` after its last heartbeat, join or sync, unless it
  is waiting in a JoinGroup or SyncGroup.

Delayed answers go to *waiters*: plain callables that receive a JoinResult or SyncResult. The
coordinator supplies them (they set a trio.Event) and runs `expire(now)` at `next_deadline()`.
`changes` counts changes to what is persisted (generation, members, assignment), so the
coordinator knows when to write a group metadata record.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.broker.coordinator.group.records import CommittedOffset, GroupRecord, MemberRecord, subscribed_topics
from strom.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupSettings:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1


@dataclass(frozen=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinWaiter = Callable[[JoinResult], None]
SyncWaiter = Callable[[SyncResult], None]


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: JoinWaiter | None = None
    sync_waiter: SyncWaiter | None = None
    heartbeat_deadline: float | None = None  # None: starts at the coordinator's first tick

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def heartbeat(self, now: float) -> None:
        self.heartbeat_deadline = now + self.session_timeout_ms / 1000

    def answer_join(self, result: JoinResult) -> None:
        waiter, self.join_waiter = self.join_waiter, None
        if waiter is not None:
            waiter(result)

    def answer_sync(self, result: SyncResult) -> None:
        waiter, self.sync_waiter = self.sync_waiter, None
        if waiter is not None:
            waiter(result)


def _error_join(code: ErrorCode, member_id: str = "") -> JoinResult:
    return JoinResult(code, member_id=member_id)


class Group:
    """One consumer group: its members, generation, chosen protocol and committed offsets."""

    def __init__(self, group_id: str, settings: GroupSettings, wall_ms: Callable[[], int]):
        self.group_id = group_id
        self.settings = settings
        self.wall_ms = wall_ms
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = wall_ms()
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, float] = {}
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self.rebalance_deadline: float | None = None
        self.initial_delay_deadline: float | None = None
        self.initial_delay_remaining_ms = 0
        self.new_member_added = False
        self.changes = 0

    # ------------------------------------------------------------------ queries
    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def _set_state(self, state: GroupState) -> None:
        self.state = state
        self.state_timestamp_ms = self.wall_ms()

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name]) if votes else None

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only), None when unknowable."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or not self.members:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            topics |= subscribed_topics(m.metadata(self.protocol_name))
        return topics

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def _all_joined(self) -> bool:
        return not self.pending_members and all(m.join_waiter is not None for m in self.members.values())

    def _result_for(self, member: Member) -> JoinResult:
        is_leader = member.member_id == self.leader_id
        members = (
            [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]
            if is_leader
            else []
        )
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            members,
        )

    def _check_static(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        if instance_id is None:
            return None
        known = self.static_members.get(instance_id)
        if known is not None and known != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        return None

    # ------------------------------------------------------------------ JoinGroup
    def join(self, req: JoinRequest, now: float, waiter: JoinWaiter) -> JoinResult | None:
        """The immediate answer, or None when `waiter` will get it when the join phase ends."""
        if self.state is GroupState.DEAD:
            return _error_join(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if not self._supports(req.protocol_type, req.protocols):
            return _error_join(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        if req.member_id == "":
            return self._join_new(req, now, waiter)
        return self._join_known(req, now, waiter)

    def _join_new(self, req: JoinRequest, now: float, waiter: JoinWaiter) -> JoinResult | None:
        member_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None and req.group_instance_id in self.static_members:
            instance_id = req.group_instance_id
            return self._replace_static(instance_id, self.static_members[instance_id], member_id, req, now, waiter)
        if len(self.members) + len(self.pending_members) >= self.settings.max_size:
            return _error_join(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if req.group_instance_id is None and req.require_known_member_id:
            self.pending_members[member_id] = now + req.session_timeout_ms / 1000
            return _error_join(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        self._add_member(member_id, req, now, waiter)
        return None

    def _join_known(self, req: JoinRequest, now: float, waiter: JoinWaiter) -> JoinResult | None:
        member_id = req.member_id
        if member_id in self.pending_members:
            if len(self.members) >= self.settings.max_size:
                del self.pending_members[member_id]
                return _error_join(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
            del self.pending_members[member_id]
            self._add_member(member_id, req, now, waiter)
            return None
        fenced = self._check_static(member_id, req.group_instance_id)
        if fenced is not None:
            return _error_join(fenced, member_id)
        member = self.members.get(member_id)
        if member is None or self.state is GroupState.EMPTY:
            return _error_join(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, req, waiter)
            self._try_complete_join(now)
            return None
        unchanged = member.protocols == req.protocols
        if self.state is GroupState.COMPLETING_REBALANCE and unchanged:
            member.heartbeat(now)
            return self._result_for(member)
        if self.state is GroupState.STABLE and unchanged and member_id != self.leader_id:
            member.heartbeat(now)
            return self._result_for(member)
        self._update_member(member, req, waiter)
        self.prepare_rebalance(now)
        return None

    def _update_member(self, member: Member, req: JoinRequest, waiter: JoinWaiter) -> None:
        if member.join_waiter is not None and member.join_waiter is not waiter:
            member.answer_join(_error_join(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.join_waiter = waiter

    def _add_member(self, member_id: str, req: JoinRequest, now: float, waiter: JoinWaiter) -> None:
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            list(req.protocols),
            join_waiter=waiter,
        )
        member.heartbeat(now)
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = member
        if req.group_instance_id is not None:
            self.static_members[req.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        self.new_member_added = True
        self.changes += 1
        if self.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(now)
        else:
            self.prepare_rebalance(now)

    def _replace_static(
        self, instance_id: str, old_id: str, new_id: str, req: JoinRequest, now: float, waiter: JoinWaiter
    ) -> JoinResult | None:
        member = self.members.pop(old_id)
        member.answer_join(_error_join(ErrorCode.FENCED_INSTANCE_ID, old_id))
        member.answer_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        member.client_id, member.client_host = req.client_id, req.client_host
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.changes += 1
        if self.state is GroupState.STABLE:
            old_protocols = member.protocols
            member.protocols = list(req.protocols)
            if self.select_protocol() == self.protocol_name:
                member.session_timeout_ms = req.session_timeout_ms
                member.rebalance_timeout_ms = req.rebalance_timeout_ms
                member.heartbeat(now)
                result = self._result_for(member)
                result.skip_assignment = new_id == self.leader_id
                return result
            member.protocols = old_protocols
        self._update_member(member, req, waiter)
        if self.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(now)
        else:
            self.prepare_rebalance(now)
        return None

    # ------------------------------------------------------------------ rebalancing
    def prepare_rebalance(self, now: float) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                m.assignment = b""
                m.answer_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        timeout_ms = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        delay = self.settings.initial_rebalance_delay_ms
        if self.state is GroupState.EMPTY and delay > 0:
            self.initial_delay_deadline = now + delay / 1000
            self.initial_delay_remaining_ms = max(timeout_ms - delay, 0)
            self.new_member_added = False
            self.rebalance_deadline = None
        else:
            self.initial_delay_deadline = None
            self.rebalance_deadline = now + timeout_ms / 1000
        self._set_state(GroupState.PREPARING_REBALANCE)
        self._try_complete_join(now)

    def _try_complete_join(self, now: float) -> None:
        if self.state is GroupState.PREPARING_REBALANCE and self.initial_delay_deadline is None and self._all_joined():
            self._complete_join(now)

    def _complete_join(self, now: float) -> None:
        for m in [m for m in self.members.values() if m.join_waiter is None and m.group_instance_id is None]:
            self._remove(m)
        self.rebalance_deadline = self.initial_delay_deadline = None
        self.generation += 1
        self.changes += 1
        if not self.members:
            self.protocol_name = None
            self._set_state(GroupState.EMPTY)
            return
        self.protocol_name = self.select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._set_state(GroupState.COMPLETING_REBALANCE)
        for m in list(self.members.values()):
            m.heartbeat(now)
            m.answer_join(self._result_for(m))

    def _remove(self, member: Member) -> None:
        member.answer_join(_error_join(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        member.answer_sync(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        del self.members[member.member_id]
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)
        self.changes += 1

    def remove_member(self, member: Member, now: float) -> None:
        """A member left or its session expired: rebalance the rest."""
        self._remove(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(now)
        else:
            self._try_complete_join(now)

    # ------------------------------------------------------------------ SyncGroup, Heartbeat, LeaveGroup
    def _member_error(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode | None:
        fenced = self._check_static(member_id, instance_id)
        if fenced is not None:
            return fenced
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return None

    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        now: float,
        waiter: SyncWaiter,
    ) -> SyncResult | None:
        if self.state in (GroupState.DEAD, GroupState.EMPTY):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        error = self._member_error(member_id, instance_id, generation)
        if error is not None:
            return SyncResult(error)
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        member.heartbeat(now)
        if self.state is GroupState.STABLE:
            return self._sync_result(member)
        member.sync_waiter = waiter
        if member_id == self.leader_id:
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self.changes += 1
            self._set_state(GroupState.STABLE)
            for m in self.members.values():
                m.answer_sync(self._sync_result(m))
        return None

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.NONE, self.protocol_type, self.protocol_name, member.assignment)

    def heartbeat(self, member_id: str, instance_id: str | None, generation: int, now: float) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if member_id in self.pending_members and instance_id is None:
            return ErrorCode.NONE
        error = self._member_error(member_id, instance_id, generation)
        if error is not None:
            return error
        if self.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.members[member_id].heartbeat(now)
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, member_id: str, instance_id: str | None, now: float) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return ErrorCode.FENCED_INSTANCE_ID
            member_id = known
        elif member_id in self.pending_members:
            del self.pending_members[member_id]
            self._try_complete_join(now)
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.remove_member(member, now)
        return ErrorCode.NONE

    # ------------------------------------------------------------------ offsets
    def commit_error(self, member_id: str, instance_id: str | None, generation: int, now: float) -> ErrorCode | None:
        """Why this OffsetCommit is refused, or None (simple consumers commit to an Empty group)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        fenced = self._check_static(member_id, instance_id)
        if fenced is not None:
            return fenced
        if generation < 0 and self.state is GroupState.EMPTY:
            return None
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        self.members[member_id].heartbeat(now)
        return None

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Offsets past `offsets.retention.minutes` as Kafka decides: from when an Empty group
        emptied, from the commit for groups that never used the coordinator, never for topics a
        Stable consumer group subscribes to."""
        subscribed: set[str] = set()
        if self.protocol_type is None:
            base = None
        elif self.state is GroupState.EMPTY:
            base = self.state_timestamp_ms
        elif self.state is GroupState.STABLE and self.subscribed_topics() is not None:
            base, subscribed = None, self.subscribed_topics() or set()
        else:
            return []
        out = []
        for tp, committed in self.offsets.items():
            if tp[0] in subscribed:
                continue
            if committed.expire_timestamp >= 0:
                expired = now_ms >= committed.expire_timestamp
            else:
                start = base if base is not None and base >= 0 else committed.commit_timestamp
                expired = now_ms - start >= retention_ms
            if expired:
                out.append(tp)
        return out

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> float:
        times = [d for d in (self.rebalance_deadline, self.initial_delay_deadline) if d is not None]
        times += self.pending_members.values()
        times += [
            m.heartbeat_deadline
            for m in self.members.values()
            if m.heartbeat_deadline is not None and m.join_waiter is None and m.sync_waiter is None
        ]
        if any(m.heartbeat_deadline is None for m in self.members.values()):
            times.append(float("-inf"))
        return min(times, default=float("inf"))

    def expire(self, now: float) -> None:
        """Run every timer due at `now`: pending and session expiry, the end of the join phase."""
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now:
                del self.pending_members[member_id]
        for m in list(self.members.values()):
            if m.heartbeat_deadline is None:
                m.heartbeat(now)
            elif m.join_waiter is None and m.sync_waiter is None and m.heartbeat_deadline <= now:
                if m.member_id in self.members:
                    self.remove_member(m, now)
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if self.initial_delay_deadline is not None and self.initial_delay_deadline <= now:
            self._initial_delay_over(now)
        elif self.rebalance_deadline is not None and self.rebalance_deadline <= now:
            self._complete_join(now)
        else:
            self._try_complete_join(now)

    def _initial_delay_over(self, now: float) -> None:
        if self.new_member_added and self.initial_delay_remaining_ms > 0:
            delay = min(self.settings.initial_rebalance_delay_ms, self.initial_delay_remaining_ms)
            self.initial_delay_remaining_ms -= delay
            self.new_member_added = False
            self.initial_delay_deadline = now + delay / 1000
            return
        self._complete_join(now)

    # ------------------------------------------------------------------ persistence
    def to_record(self) -> GroupRecord:
        members = (
            []
            if self.state is GroupState.EMPTY
            else [
                MemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(self.protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ]
        )
        return GroupRecord(
            self.protocol_type or "",
            self.generation,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp_ms,
            members,
        )

    def load_record(self, record: GroupRecord) -> None:
        """Take the persisted state: Stable with its members, or Empty."""
        self.protocol_type = record.protocol_type or None
        self.generation = record.generation
        self.protocol_name = record.protocol
        self.members.clear()
        self.static_members.clear()
        for r in record.members:
            protocols = [(record.protocol, r.subscription)] if record.protocol is not None else []
            self.members[r.member_id] = Member(
                r.member_id,
                r.group_instance_id,
                r.client_id,
                r.client_host,
                r.session_timeout,
                r.rebalance_timeout,
                protocols,
                r.assignment,
            )
            if r.group_instance_id is not None:
                self.static_members[r.group_instance_id] = r.member_id
        self.leader_id = record.leader if record.leader in self.members else next(iter(self.members), None)
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.state_timestamp_ms = (
            record.current_state_timestamp if record.current_state_timestamp >= 0 else self.wall_ms()
        )

"""KIP-848 consumer groups (`group.protocol=consumer`): the broker assigns, members reconcile.

A member heartbeats (ConsumerGroupHeartbeat) with its subscription (topic names or a regular
expression) and the partitions it owns. The group has an epoch that goes up whenever what the
assignment depends on changes (a member joins, leaves or changes its subscription; a subscribed
topic appears or gains partitions). The broker then computes a *target assignment* with a
server-side assignor (`uniform`, sticky and balanced; or `range`, per topic) for that epoch.

Each member moves to the target on its own, revoke before assign, as Kafka's
CurrentAssignmentBuilder does:
- if it owns partitions the target takes away, it is told to keep only the rest (its member epoch
  unchanged, state UNREVOKED_PARTITIONS) until a heartbeat shows it no longer owns them; past its
  rebalance timeout it is fenced (removed);
- then it takes the target's epoch and the target partitions no other member still owns; the
  others follow (UNRELEASED_PARTITIONS) as their owners release them.

Members leave with epoch -1 (static members with -2: their instance id keeps its assignment for
a session timeout), or expire without a heartbeat for `group.consumer.session.timeout.ms`.
A member that sends an epoch other than its own (or its previous one, if a response was lost
and it still owns only what it was given) is fenced: FENCED_MEMBER_EPOCH, and it rejoins.
"""
from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.group.consumer")

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
JOIN_EPOCH = 0

Assignment = dict[bytes, set[int]]  # topic id -> partitions


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class GroupError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code, self.message = code, message


@dataclass
class TopicMeta:
    name: str
    topic_id: bytes
    partitions: int


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline: float = 0.0
    revocation_deadline: float | None = None
    left_static: bool = False  # a static member away (epoch -2) until its session expires

    def owns(self) -> Assignment:
        return _union(self.assigned, self.pending_revocation)


def _union(a: Mapping[bytes, set[int]], b: Mapping[bytes, set[int]]) -> Assignment:
    out = {t: set(p) for t, p in a.items() if p}
    for t, p in b.items():
        if p:
            out.setdefault(t, set()).update(p)
    return out


def _copy(a: Mapping[bytes, set[int]]) -> Assignment:
    return {t: set(p) for t, p in a.items() if p}


def _same(a: Mapping[bytes, set[int]], b: Mapping[bytes, set[int]]) -> bool:
    return _copy(a) == _copy(b)


# ----------------------------------------------------------------------------- assignors
def uniform_assign(members: Mapping[str, set[str]], topics: Mapping[str, TopicMeta],
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Balanced and sticky: each member keeps what it has while under its share; the rest goes,
    partition by partition, to the least loaded member subscribed to the topic."""
    out: dict[str, Assignment] = {m: {} for m in members}
    if not members:
        return out
    by_id = {t.topic_id: t for t in topics.values()}
    wanted = [(topics[name].topic_id, p) for name in sorted(topics) for p in range(topics[name].partitions)
              if any(name in subs for subs in members.values())]
    eligible = {tp: sorted(m for m, subs in members.items() if by_id[tp[0]].name in subs) for tp in wanted}
    quota = -(-len(wanted) // len(members))  # ceiling share; exact for one shared subscription
    load = {m: 0 for m in members}
    taken = set()
    for member in sorted(members):
        for topic_id, parts in sorted((current.get(member) or {}).items()):
            for p in sorted(parts):
                tp = (topic_id, p)
                if tp in eligible and member in eligible[tp] and tp not in taken and load[member] < quota:
                    out[member].setdefault(topic_id, set()).add(p)
                    load[member] += 1
                    taken.add(tp)
    for tp in wanted:
        if tp in taken:
            continue
        member = min(eligible[tp], key=lambda m: (load[m], m))
        out[member].setdefault(tp[0], set()).add(tp[1])
        load[member] += 1
    return out


def range_assign(members: Mapping[str, set[str]], topics: Mapping[str, TopicMeta],
                 current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """Per topic, consecutive ranges of partitions to the members subscribed to it, in member order."""
    out: dict[str, Assignment] = {m: {} for m in members}
    for name in sorted(topics):
        meta = topics[name]
        subscribers = sorted(m for m, subs in members.items() if name in subs)
        if not subscribers:
            continue
        per, extra = divmod(meta.partitions, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            count = per + (1 if i < extra else 0)
            if count:
                out[member][meta.topic_id] = set(range(start, start + count))
            start += count
    return out


ASSIGNORS: dict[str, Callable] = {"uniform": uniform_assign, "range": range_assign}
ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def parse_assignors(value: str) -> list[str]:
    """`group.consumer.assignors`: short names or Kafka's class names, in preference order."""
    names = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        name = ASSIGNOR_CLASSES.get(item, item)
        if name not in ASSIGNORS:
            raise ValueError(f"unknown assignor {item!r} (known: uniform, range)")
        names.append(name)
    if not names:
        raise ValueError("at least one assignor is needed")
    return names


# ----------------------------------------------------------------------------- the group
@dataclass
class ConsumerGroupSettings:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")


class ConsumerGroup:
    def __init__(self, group_id: str, settings: ConsumerGroupSettings):
        self.group_id = group_id
        self.settings = settings
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscribed_signature: tuple = ()
        self.assignor_name = settings.assignors[0]

    # ------------------------------------------------------------------ views
    @property
    def state(self) -> str:
        """Kafka's names: Empty, Assigning (target not computed), Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed_topics(self, topics: Mapping[str, TopicMeta]) -> dict[str, set[str]]:
        """Each member's subscribed topic names that exist, regexes resolved."""
        out = {}
        for m in self.members.values():
            names = {n for n in m.subscribed_topic_names if n in topics}
            if m.subscribed_topic_regex:
                pattern = re.compile(m.subscribed_topic_regex)
                names |= {n for n in topics if pattern.fullmatch(n) and not n.startswith("__")}
            out[m.member_id] = names
        return out

    def _signature(self, topics: Mapping[str, TopicMeta]) -> tuple:
        subs = self.subscribed_topics(topics)
        wanted = sorted(set().union(*subs.values())) if subs else []
        return tuple((n, topics[n].topic_id, topics[n].partitions) for n in wanted)

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self, req, now: float, topics: Mapping[str, TopicMeta], client_id: str = "",
                  client_host: str = "") -> tuple[ConsumerMember | None, bool]:
        """Apply one heartbeat; (the member, whether its answer must carry the assignment).

        Raises GroupError with Kafka's error for an invalid or fenced request."""
        member_id, epoch = req.member_id, req.member_epoch
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member = self.members.get(member_id)
            if member is None:
                if epoch == STATIC_LEAVE_EPOCH or not member_id:
                    raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            self.remove(member, "left the group", static_keep=epoch == STATIC_LEAVE_EPOCH)
            return member, False
        full = epoch == JOIN_EPOCH or (req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
                                       and req.topic_partitions is not None)
        if epoch == JOIN_EPOCH:
            member = self._join(req, now, client_id, client_host)
        else:
            member = self.members.get(member_id)
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}.")
            if epoch != member.member_epoch:
                owned = _owned(req)
                if not (epoch == member.previous_member_epoch and owned is not None
                        and _subset(owned, member.assigned)):
                    self.remove(member, f"fenced: epoch {epoch}, expected {member.member_epoch}")
                    raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                     f"The consumer group member has a smaller member epoch ({epoch}) than the "
                                     f"one known by the group coordinator ({member.member_epoch}). The member "
                                     "must abandon all its partitions and rejoin."
                                     if epoch < member.member_epoch else
                                     f"The consumer group member has a greater member epoch ({epoch}) than the "
                                     f"one known by the group coordinator ({member.member_epoch}). The member "
                                     "must abandon all its partitions and rejoin.")
            self._update_subscription(member, req)
        member.session_deadline = now + self.settings.session_timeout_ms / 1000
        before = _copy(member.assigned), member.member_epoch
        self.maybe_rebalance(topics)
        self._reconcile(member, _owned(req), now)
        changed = not _same(before[0], member.assigned) or before[1] != member.member_epoch
        return member, full or changed

    def _join(self, req, now: float, client_id: str, client_host: str) -> ConsumerMember:
        member_id = req.member_id
        if req.instance_id:
            old_id = self.static_members.get(req.instance_id)
            old = self.members.get(old_id) if old_id else None
            if old is not None and old_id != member_id and not old.left_static:
                raise GroupError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"Static member {old_id} with instance id {req.instance_id} is still active.")
            if old is not None and old_id != member_id:
                # a static member comes back: it takes over the old member's epoch and assignment
                del self.members[old_id]
                old.member_id = member_id
                old.left_static = False
                self.members[member_id] = old
                if old_id in self.target:
                    self.target[member_id] = self.target.pop(old_id)
                self.static_members[req.instance_id] = member_id
                old.client_id, old.client_host = client_id, client_host
                self._update_subscription(old, req)
                return old
        member = self.members.get(member_id)
        if member is not None:
            # a known member rejoining with epoch 0 gives up what it had
            self.remove(member, "rejoined with epoch 0")
        if len(self.members) >= self.settings.max_size:
            raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of {self.settings.max_size} members.")
        member = ConsumerMember(member_id, req.instance_id, req.rack_id, client_id, client_host)
        self._update_subscription(member, req)
        self.members[member_id] = member
        if req.instance_id:
            self.static_members[req.instance_id] = member_id
        self.group_epoch += 1
        log.info("member %s joined consumer group %s (group epoch %d)", member_id, self.group_id, self.group_epoch)
        return member

    def _update_subscription(self, member: ConsumerMember, req) -> None:
        changed = False
        if req.rebalance_timeout_ms not in (-1, None):
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None and sorted(req.subscribed_topic_names) != sorted(member.subscribed_topic_names):
            member.subscribed_topic_names = list(req.subscribed_topic_names)
            changed = True
        regex = getattr(req, "subscribed_topic_regex", None)
        if regex is not None and regex != (member.subscribed_topic_regex or ""):
            member.subscribed_topic_regex = regex or None
            changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor or None
            changed = True
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if changed and member.member_id in self.members:
            self.group_epoch += 1

    def remove(self, member: ConsumerMember, why: str, static_keep: bool = False) -> None:
        """Take a member out (its partitions become free); the group epoch goes up."""
        if static_keep and member.instance_id:
            # A static member leaving temporarily keeps its place until its session expires.
            member.left_static = True
            log.info("static member %s of consumer group %s left temporarily", member.member_id, self.group_id)
            return
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if member.instance_id and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]
        self.group_epoch += 1
        log.info("member %s of consumer group %s removed: %s (group epoch %d)", member.member_id, self.group_id,
                 why, self.group_epoch)

    # ------------------------------------------------------------------ assignment
    def _assignor(self) -> str:
        for m in self.members.values():
            if m.server_assignor:
                return m.server_assignor
        return self.settings.assignors[0]

    def maybe_rebalance(self, topics: Mapping[str, TopicMeta]) -> None:
        signature = self._signature(topics)
        if signature != self.subscribed_signature:
            self.subscribed_signature = signature
            if self.members and self.assignment_epoch >= self.group_epoch:
                self.group_epoch += 1  # the subscribed topics changed (no other change pending)
        if self.assignment_epoch >= self.group_epoch:
            return
        name = self._assignor()
        self.assignor_name = name
        subs = self.subscribed_topics(topics)
        wanted = {n: topics[n] for n in set().union(*subs.values())} if subs else {}
        current = {m.member_id: _copy(self.target.get(m.member_id) or m.assigned) for m in self.members.values()}
        self.target = ASSIGNORS[name](subs, wanted, current)
        self.assignment_epoch = self.group_epoch
        log.info("consumer group %s: target assignment for epoch %d by the %s assignor", self.group_id,
                 self.group_epoch, name)

    def _owned_by_others(self, member_id: str) -> set[tuple[bytes, int]]:
        out = set()
        for other in self.members.values():
            if other.member_id != member_id:
                for t, parts in other.owns().items():
                    out.update((t, p) for p in parts)
        return out

    def _reconcile(self, member: ConsumerMember, owned: Assignment | None, now: float) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or any(owned.get(t, set()) & parts for t, parts in member.pending_revocation.items()):
                return  # still owns what it must give up
            member.pending_revocation = {}
            member.revocation_deadline = None
            member.state = MemberState.STABLE
            member.previous_member_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
            # the revoked partitions are free now; compute what it gets next below
        if member.member_epoch == self.assignment_epoch and member.state is MemberState.STABLE:
            return
        target = self.target.get(member.member_id, {})
        keep: Assignment = {}
        revoke: Assignment = {}
        for t, parts in member.assigned.items():
            for p in parts:
                (keep if p in target.get(t, ()) else revoke).setdefault(t, set()).add(p)
        if revoke:
            member.assigned = keep
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
            return
        busy = self._owned_by_others(member.member_id)
        unreleased = False
        for t, parts in target.items():
            for p in parts:
                if (t, p) in busy:
                    unreleased = True
                else:
                    keep.setdefault(t, set()).add(p)
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
        member.assigned = keep
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> float:
        times = [m.session_deadline for m in self.members.values()]
        times += [m.revocation_deadline for m in self.members.values() if m.revocation_deadline is not None]
        return min(times, default=float("inf"))

    def expire(self, now: float) -> bool:
        """Remove members past their session or revocation deadline; True if any went."""
        gone = False
        for member in list(self.members.values()):
            if member.session_deadline <= now:
                self.remove(member, f"no heartbeat within {self.settings.session_timeout_ms} ms")
                gone = True
            elif member.revocation_deadline is not None and member.revocation_deadline <= now:
                self.remove(member, f"did not revoke its partitions within {member.rebalance_timeout_ms} ms")
                gone = True
        return gone


def _owned(req) -> Assignment | None:
    if req.topic_partitions is None:
        return None
    return {tp.topic_id: set(tp.partitions) for tp in req.topic_partitions if tp.partitions}


def _subset(a: Mapping[bytes, set[int]], b: Mapping[bytes, set[int]]) -> bool:
    return all(parts <= b.get(t, set()) for t, parts in a.items())


def assignment_list(assignment: Mapping[bytes, Iterable[int]]) -> list[dict]:
    return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(assignment.items()) if p]

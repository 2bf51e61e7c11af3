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
A heartbeat with an epoch other than the member's own (or its previous one, if a response was lost
and it still owns only what it was given) is refused with FENCED_MEMBER_EPOCH and changes nothing,
as in Kafka 4.0: the member stays in the group, keeping its assignment, until its session expires
(a refused heartbeat does not renew it). A rejoin with epoch 0 under a known member id is checked
the same way: accepted only from a member whose previous epoch is 0 (its first answer was lost),
else refused; a static member's instance id stays taken (UNRELEASED_INSTANCE_ID) until it leaves
with epoch -2 or expires.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from strom.broker.coordinator.group.assignors import ASSIGNORS, Assignment, TopicMeta
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.coordinator.group.migration import ClassicMeta, Subscription

log = logging.getLogger("strom.group.consumer")

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
JOIN_EPOCH = 0


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class OwnedPartitions(Protocol):
    """One ConsumerGroupHeartbeat `TopicPartitions` entry: partitions a member owns."""

    topic_id: bytes
    partitions: Sequence[int]


class HeartbeatRequest(Protocol):
    """What a ConsumerGroupHeartbeat request (the decoded body) tells a consumer group; v1+ adds
    `subscribed_topic_regex`, read with getattr."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: Sequence[str] | None
    topic_partitions: Sequence[OwnedPartitions] | None
    server_assignor: str | None


# The group's subscribed topics as they were assigned: (name, topic id, partition count) each
Signature = tuple[tuple[str, bytes, int], ...]


class GroupError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code, self.message = code, message


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
    # a member that joined with JoinGroup (the classic protocol): migration.ClassicMeta, else None
    classic: ClassicMeta | None = None
    join_deadline: float | None = None  # classic: told to rejoin, must JoinGroup by then
    sync_deadline: float | None = None  # classic: joined, must SyncGroup by then

    def owns(self) -> Assignment:
        return _union(self.assigned, self.pending_revocation)


@dataclass(frozen=True)
class ResolvedRegex:
    """What a subscribed regular expression matched when last resolved (Kafka's
    ResolvedRegularExpression, kept in a ConsumerGroupRegularExpression record): the topic names,
    the resolution's version and its wall-clock time. Kafka's version is the offset of the KRaft
    metadata image it resolved against; Strom has no metadata log, so it counts the group's
    resolutions (it only ever grows, which is all Kafka asks of it: an older version means the
    regex must be resolved again)."""

    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


def matching_topics(regex: str, topics: Iterable[str]) -> set[str]:
    """The topic names a subscribed regex matches: the whole name, as Kafka's RE2J matcher."""
    pattern = re.compile(regex)
    return {n for n in topics if pattern.fullmatch(n) and not n.startswith("__")}


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


# ----------------------------------------------------------------------------- the group
@dataclass
class ConsumerGroupSettings:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")
    downgrade_enabled: bool = True  # group.consumer.migration.policy allows consumer -> classic
    classic_max_size: int = 2**31 - 1  # group.max.size


class ConsumerGroup:
    def __init__(self, group_id: str, settings: ConsumerGroupSettings):
        self.group_id = group_id
        self.settings = settings
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscribed_signature: Signature = ()
        self.assignor_name = settings.assignors[0]
        # members whose leaving converts the group to a classic one (the coordinator does it)
        self.downgrade_pending: set[str] | None = None
        # Regexes no member used before, named in the heartbeat being answered. Kafka 4.0 resolves a
        # new regex asynchronously, after that answer: its assignment leaves the regex's topics out
        # and a later heartbeat brings them (librdkafka's 0045 expects exactly that order).
        self.pending_regexes: set[str] = set()
        # the regexes in use, each as last resolved (persisted as ConsumerGroupRegularExpression records)
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        self.regex_version = 0
        # what the members subscribe to changed since the last heartbeat's rebalance (a member went,
        # a regex got resolved, the subscribed topics changed): the coordinator refreshes the
        # subscriptions and regex resolutions before it persists (see `settle`)
        self.subscriptions_changed = False
        self.downgrade_rebalance = True  # False: a static replacement, the classic group stays Stable

    # ------------------------------------------------------------------ views
    @property
    def state(self) -> str:
        """Kafka's names: Empty, Assigning (target not computed), Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(
            m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def subscribed_topics(self, topics: Mapping[str, TopicMeta]) -> dict[str, set[str]]:
        """Each member's subscribed topic names that exist, regexes resolved."""
        out: dict[str, set[str]] = {}
        matched: dict[str, set[str]] = {}  # each regex matched once, however many members use it
        for m in self.members.values():
            names = {n for n in m.subscribed_topic_names if n in topics}
            regex = m.subscribed_topic_regex
            if regex and regex not in self.pending_regexes:
                if regex not in matched:
                    matched[regex] = matching_topics(regex, topics)
                names |= matched[regex]
            out[m.member_id] = names
        return out

    def resolve_regexes(self, topics: Iterable[str], now_ms: int) -> None:
        """Record what each regex the members use matches (Kafka writes a ConsumerGroupRegularExpression
        record when it resolves one, and a tombstone when no member uses it any more): a regex
        resolved for the first time or matching other topics now gets a new resolution; regexes
        no member uses are forgotten. A regex still pending (named in the heartbeat being answered)
        waits, as Kafka resolves a new regex after that answer."""
        used = {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}
        for regex in [r for r in self.resolved_regexes if r not in used]:
            del self.resolved_regexes[regex]
        names = list(topics)
        for regex in sorted(used - self.pending_regexes):
            matched = tuple(sorted(matching_topics(regex, names)))
            old = self.resolved_regexes.get(regex)
            if old is None or old.topics != matched:
                self.regex_version += 1
                self.resolved_regexes[regex] = ResolvedRegex(matched, self.regex_version, now_ms)
                log.info(
                    "consumer group %s: regular expression %r resolved to %d topics", self.group_id, regex, len(matched)
                )

    def _signature(self, topics: Mapping[str, TopicMeta]) -> Signature:
        subs = self.subscribed_topics(topics)
        wanted = sorted(set().union(*subs.values())) if subs else []
        return tuple((n, topics[n].topic_id, topics[n].partitions) for n in wanted)

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(
        self,
        req: HeartbeatRequest,
        now: float,
        topics: Mapping[str, TopicMeta],
        client_id: str = "",
        client_host: str = "",
    ) -> tuple[ConsumerMember, bool]:
        """Apply one heartbeat; (the member, whether its answer must carry the assignment).

        Raises GroupError with Kafka's error for an invalid or fenced request."""
        member_id, epoch = req.member_id, req.member_epoch
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            member = self.members.get(member_id)
            if member is None:
                if epoch == STATIC_LEAVE_EPOCH or not member_id:
                    raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
            if epoch == STATIC_LEAVE_EPOCH:
                self.remove(member, "left the group", static_keep=True)
            else:
                self.fence([member], "left the group")
            return member, False
        full = epoch == JOIN_EPOCH or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.topic_partitions is not None
        )
        if epoch == JOIN_EPOCH:
            member = self._join(req, now, client_id, client_host)
        else:
            member = self._known(req)
            self._check_epoch(member, req)
            self._update_subscription(member, req)
        member.classic = None  # it heartbeats with the consumer protocol now
        member.join_deadline = member.sync_deadline = None
        member.session_deadline = now + self.settings.session_timeout_ms / 1000
        before = _copy(member.assigned)
        self.maybe_rebalance(topics)
        self._reconcile(member, _owned(req), now)
        # resolved once answered: the next heartbeat sees the regex's topics (a new target epoch)
        if self.pending_regexes:
            self.pending_regexes.clear()
            self.subscriptions_changed = True
        # as Kafka: the assignment goes out in a full request's answer or when it changed (a new
        # epoch alone travels in member_epoch)
        return member, full or not _same(before, member.assigned)

    def _known(self, req: HeartbeatRequest) -> ConsumerMember:
        """The member a heartbeat with an epoch above 0 comes from (Kafka's checks: a static member
        by its instance id, which must still be held by this member id)."""
        member_id = req.member_id
        if req.instance_id:
            member = self.members.get(self.static_members.get(req.instance_id, ""))
            if member is None:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != member_id:
                raise GroupError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} was fenced by "
                    f"member {member.member_id}.",
                )
            return member
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}."
            )
        return member

    def _check_epoch(self, member: ConsumerMember, req: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: FENCED_MEMBER_EPOCH for an epoch other
        than the member's, unless it is the previous one and the member owns only what it was given
        (the answer that moved it on was lost). A refusal changes nothing: the member stays."""
        epoch = req.member_epoch
        current = STATIC_LEAVE_EPOCH if member.left_static else member.member_epoch
        if epoch == current:
            return
        owned = _owned(req)
        if (
            epoch < current
            and epoch == member.previous_member_epoch
            and owned is not None
            and _subset(owned, member.assigned)
        ):
            return
        log.info(
            "consumer group %s: heartbeat of member %s refused: epoch %d, its epoch is %d",
            self.group_id,
            member.member_id,
            epoch,
            current,
        )
        raise GroupError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a {'smaller' if epoch < current else 'greater'} member "
            f"epoch ({epoch}) than the one known by the group coordinator ({current}). The member "
            "must abandon all its partitions and rejoin.",
        )

    def _join(self, req: HeartbeatRequest, now: float, client_id: str, client_host: str) -> ConsumerMember:
        member_id = req.member_id
        if req.instance_id:
            old_id = self.static_members.get(req.instance_id)
            old = self.members.get(old_id) if old_id else None
            if old is not None and not old.left_static and old.classic is None:
                # Kafka: until it leaves with epoch -2 (or expires), also under the same member id
                raise GroupError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                    f"group because the instance id is owned by {old_id} member.",
                )
            if old_id is not None and old is not None:
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
            # a known member id with epoch 0: a heartbeat like any other, checked as Kafka checks it
            self._check_epoch(member, req)
            member.client_id, member.client_host = client_id, client_host
            self._update_subscription(member, req)
            return member
        if len(self.members) >= self.settings.max_size:
            raise GroupError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.settings.max_size} members.",
            )
        member = ConsumerMember(member_id, req.instance_id, req.rack_id, client_id, client_host)
        self._update_subscription(member, req)
        self.members[member_id] = member
        if req.instance_id:
            self.static_members[req.instance_id] = member_id
        self.group_epoch += 1
        log.info("member %s joined consumer group %s (group epoch %d)", member_id, self.group_id, self.group_epoch)
        return member

    def _update_subscription(self, member: ConsumerMember, req: HeartbeatRequest) -> None:
        changed = False
        if req.rebalance_timeout_ms not in (-1, None):
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None and sorted(req.subscribed_topic_names) != sorted(
            member.subscribed_topic_names
        ):
            member.subscribed_topic_names = list(req.subscribed_topic_names)
            changed = True
        regex = getattr(req, "subscribed_topic_regex", None)
        if regex is not None and regex != (member.subscribed_topic_regex or ""):
            member.subscribed_topic_regex = regex or None
            changed = True
            self.subscriptions_changed = True  # the regex it left may be used by no one now
            if regex and not any(m.subscribed_topic_regex == regex for m in self.members.values() if m is not member):
                self.pending_regexes.add(regex)
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor or None
            changed = True
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if changed and member.member_id in self.members:
            self.group_epoch += 1

    def fence(self, members: list[ConsumerMember], why: str) -> bool:
        """Members leave or are fenced. When only classic members would remain and the policy allows
        it, nothing is removed: `downgrade_pending` names the leavers and the coordinator turns the
        group into a classic group (True). Otherwise they are removed; the group epoch goes up once."""
        leaving = {m.member_id for m in members}
        remaining = [m for m in self.members.values() if m.member_id not in leaving]
        if (
            remaining
            and all(m.classic is not None for m in remaining)
            and self.settings.downgrade_enabled
            and len(remaining) <= self.settings.classic_max_size
        ):
            self.downgrade_pending, self.downgrade_rebalance = leaving, True
            log.info(
                "consumer group %s: %s (%s); only classic members remain, converting to a classic group",
                self.group_id,
                ", ".join(sorted(leaving)),
                why,
            )
            return True
        for i, member in enumerate(members):
            self.remove(member, why, bump=i == len(members) - 1)
        return False

    def remove(self, member: ConsumerMember, why: str, static_keep: bool = False, bump: bool = True) -> None:
        """Take a member out (its partitions become free); the group epoch goes up."""
        if static_keep and member.instance_id:
            # A static member leaving temporarily keeps its place until its session expires.
            member.left_static = True
            log.info("static member %s of consumer group %s left temporarily", member.member_id, self.group_id)
            return
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        self.subscriptions_changed = True
        if member.instance_id and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]
        if bump:
            self.group_epoch += 1
        log.info(
            "member %s of consumer group %s removed: %s (group epoch %d)",
            member.member_id,
            self.group_id,
            why,
            self.group_epoch,
        )

    # ------------------------------------------------------------------ assignment
    def _assignor(self) -> str:
        for m in self.members.values():
            if m.server_assignor:
                return m.server_assignor
        return self.settings.assignors[0]

    def refresh_subscriptions(self, topics: Mapping[str, TopicMeta]) -> None:
        """The subscribed topics (ConsumerGroupPartitionMetadata) follow the members, their resolved
        regexes and the topics; a change no other change already rebalances bumps the group epoch."""
        signature = self._signature(topics)
        if signature != self.subscribed_signature:
            self.subscribed_signature = signature
            self.subscriptions_changed = True  # a regex may match other topics now
            if self.members and self.assignment_epoch >= self.group_epoch:
                self.group_epoch += 1  # the subscribed topics changed (no other change pending)

    def settle(self, topics: Mapping[str, TopicMeta], now_ms: int) -> None:
        """After a request or a timer changed the group, before it is persisted: if what the members
        subscribe to changed, the regexes' resolutions and the subscribed topics follow at once, as
        Kafka updates them with a member's leave or a regex's resolution."""
        if not self.subscriptions_changed:
            return
        self.subscriptions_changed = False
        self.resolve_regexes(topics, now_ms)
        self.refresh_subscriptions(topics)
        self.subscriptions_changed = False

    def maybe_rebalance(self, topics: Mapping[str, TopicMeta]) -> None:
        self.refresh_subscriptions(topics)
        if self.assignment_epoch >= self.group_epoch:
            return
        name = self._assignor()
        self.assignor_name = name
        subs = self.subscribed_topics(topics)
        wanted = {n: topics[n] for n in set().union(*subs.values())} if subs else {}
        current = {m.member_id: _copy(self.target.get(m.member_id) or m.assigned) for m in self.members.values()}
        self.target = ASSIGNORS[name](subs, wanted, current)
        self.assignment_epoch = self.group_epoch
        log.info(
            "consumer group %s: target assignment for epoch %d by the %s assignor",
            self.group_id,
            self.group_epoch,
            name,
        )

    def _owned_by_others(self, member_id: str) -> set[tuple[bytes, int]]:
        out: set[tuple[bytes, int]] = set()
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
            # the revoked partitions are free now; what it gets next is computed below, in this same
            # answer (as Kafka's CurrentAssignmentBuilder), or a member that revoked some partitions
            # and gains others would never receive the new ones
        elif member.member_epoch == self.assignment_epoch and member.state is MemberState.STABLE:
            return
        target = self.target.get(member.member_id, {})
        keep: Assignment = {}
        revoke: Assignment = {}
        for t, parts in member.assigned.items():
            for p in parts:
                (keep if p in target.get(t, ()) else revoke).setdefault(t, set()).add(p)
        if revoke and (owned is None or any(owned.get(t, set()) & parts for t, parts in revoke.items())):
            # it must give them up first (a member that says it no longer owns them moves on at once)
            member.assigned = keep
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            if member.classic is None:  # classic members are timed by their join and sync deadlines
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
        for m in self.members.values():
            times += [d for d in (m.revocation_deadline, m.join_deadline, m.sync_deadline) if d is not None]
        return min(times, default=float("inf"))

    def expire(self, now: float) -> bool:
        """Fence members past their session, revocation, join or sync deadline; True if any went.
        Stops at a fencing that converts the group (`downgrade_pending`)."""
        gone = False
        for member in list(self.members.values()):
            if self.downgrade_pending is not None:
                break
            why = None
            if member.session_deadline <= now:
                timeout = member.classic.session_timeout_ms if member.classic else self.settings.session_timeout_ms
                why = f"no heartbeat within {timeout} ms"
            elif member.revocation_deadline is not None and member.revocation_deadline <= now:
                why = f"did not revoke its partitions within {member.rebalance_timeout_ms} ms"
            elif member.join_deadline is not None and member.join_deadline <= now:
                why = "the classic member failed to join within the rebalance timeout"
            elif member.sync_deadline is not None and member.sync_deadline <= now:
                why = "the member failed to sync within timeout"
            if why is not None:
                self.fence([member], why)
                gone = True
        return gone

    # ------------------------------------------------------------------ classic members (JoinGroup & co)
    def supports_classic(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's supportsClassicProtocols: the consumer protocol type and a protocol every
        classic member supports."""
        if protocol_type != "consumer":
            return False
        if not self.members:
            return bool(names)
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        return any(all(name in {n for n, _ in c.protocols} for c in classic) for name in names)

    def classic_member(self, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember for SyncGroup/Heartbeat."""
        if instance_id is None:
            member = self.members.get(member_id)
            if member is None:
                raise GroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}."
                )
        else:
            member = self.members.get(self.static_members.get(instance_id, ""))
            if member is None:
                raise GroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member with instance id {instance_id} is not a member of group {self.group_id}.",
                )
            if member.member_id != member_id:
                raise GroupError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} was fenced by member "
                    f"{member.member_id}.",
                )
        if member.classic is None:
            raise GroupError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol."
            )
        return member

    def _must_rejoin(self, member: ConsumerMember) -> bool:
        return (
            member.member_epoch < self.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS and not self._waiting_on_unreleased(member))
        )

    def _waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        busy = self._owned_by_others(member.member_id)
        return any(
            (t, p) in busy
            for t, parts in self.target.get(member.member_id, {}).items()
            for p in parts
            if p not in member.assigned.get(t, set())
        )

    def _schedule_join(self, member: ConsumerMember, now: float) -> None:
        if member.join_deadline is None:
            member.join_deadline = now + member.rebalance_timeout_ms / 1000

    def classic_join(
        self,
        member_id: str,
        instance_id: str | None,
        classic: ClassicMeta,
        subscription: Subscription,
        owned: Assignment,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        now: float,
        topics: Mapping[str, TopicMeta],
    ) -> ConsumerMember:
        """A JoinGroup into this consumer group (Kafka's classicGroupJoinToConsumerGroup after its
        checks): get or create the member, update it from its subscription, bump the group epoch if
        that changed, compute the target and reconcile with the partitions it says it owns."""
        created = replaced_consumer = False
        if instance_id is None:
            member = self.members.get(member_id)
        else:
            existing = self.members.get(self.static_members.get(instance_id, ""))
            if existing is not None and existing.member_id != member_id:
                replaced_consumer = existing.classic is None
                # a static member comes back under a new member id: it takes the old one's place
                del self.members[existing.member_id]
                if existing.member_id in self.target:
                    self.target[member_id] = self.target.pop(existing.member_id)
                log.info(
                    "static member %s of consumer group %s replaced by %s (classic protocol)",
                    existing.member_id,
                    self.group_id,
                    member_id,
                )
                existing.member_id = member_id
                existing.member_epoch = existing.previous_member_epoch = 0
                existing.left_static = False
                self.members[member_id] = existing
                self.static_members[instance_id] = member_id
            member = self.members.get(member_id)
        if member is None:
            if len(self.members) >= self.settings.max_size:
                raise GroupError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The consumer group has reached its maximum capacity of {self.settings.max_size} members.",
                )
            member = ConsumerMember(member_id, instance_id)
            self.members[member_id] = member
            if instance_id:
                self.static_members[instance_id] = member_id
            created = True
            log.info("member %s joins consumer group %s using the classic protocol", member_id, self.group_id)
        if subscription.rack_id:
            member.rack_id = subscription.rack_id
        if rebalance_timeout_ms not in (-1, None):
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        member.classic = classic
        member.left_static = False
        if created or sorted(subscription.topics) != sorted(member.subscribed_topic_names):
            member.subscribed_topic_names = list(subscription.topics)
            self.group_epoch += 1
        member.revocation_deadline = None
        self.maybe_rebalance(topics)
        self._reconcile(member, owned, now)
        member.revocation_deadline = None
        member.join_deadline = None
        member.sync_deadline = now + member.rebalance_timeout_ms / 1000
        member.session_deadline = now + classic.session_timeout_ms / 1000
        if (
            replaced_consumer
            and all(m.classic is not None for m in self.members.values())
            and self.settings.downgrade_enabled
            and len(self.members) <= self.settings.classic_max_size
        ):
            # the last consumer-protocol member was a static one, replaced by a classic member: the
            # group becomes classic at once, Stable, the newcomer holding what it took over
            self.downgrade_pending, self.downgrade_rebalance = set(), False
            log.info(
                "consumer group %s: static member %s took the place of the last consumer-protocol member; "
                "converting to a classic group",
                self.group_id,
                member_id,
            )
        return member

    def classic_sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        now: float,
    ) -> ConsumerMember:
        """SyncGroup from a classic member: its assigned partitions, unless it must rejoin first."""
        member = self.classic_member(member_id, instance_id)
        if generation != member.member_epoch:
            raise GroupError(
                ErrorCode.ILLEGAL_GENERATION,
                f"The request generation id {generation} is not equal to "
                f"the member epoch {member.member_epoch} of member {member.member_id}.",
            )
        assert member.classic is not None  # classic_member refuses members of the consumer protocol
        name = member.classic.protocol_name
        if protocol_type is not None and protocol_type != "consumer":
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if protocol_name is not None and protocol_name != name:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if self.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._schedule_join(member, now)
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
        member.sync_deadline = None
        member.session_deadline = now + member.classic.session_timeout_ms / 1000
        return member

    def classic_heartbeat(self, member_id: str, instance_id: str | None, generation: int, now: float) -> ErrorCode:
        member = self.classic_member(member_id, instance_id)
        if generation != member.member_epoch:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        assert member.classic is not None  # classic_member refuses members of the consumer protocol
        member.session_deadline = now + member.classic.session_timeout_ms / 1000
        if self._must_rejoin(member):
            self._schedule_join(member, now)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, identities: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup (by member id, or by instance id; any member, as Kafka 4.0 allows); one answer each."""
        results: list[ErrorCode] = []
        leaving: list[ConsumerMember] = []
        for member_id, instance_id in identities:
            if instance_id is None:
                member = self.members.get(member_id)
            else:
                member = self.members.get(self.static_members.get(instance_id, ""))
                if member is not None and member_id and member.member_id != member_id:
                    results.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
            if member is None:  # Kafka 4.0 lets LeaveGroup remove consumer-protocol members too
                results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            results.append(ErrorCode.NONE)
            if member not in leaving:
                leaving.append(member)
        if leaving:
            self.fence(leaving, "left with LeaveGroup")
        return results


def _owned(req: HeartbeatRequest) -> Assignment | None:
    if req.topic_partitions is None:
        return None
    return {tp.topic_id: set(tp.partitions) for tp in req.topic_partitions if tp.partitions}


def _subset(a: Mapping[bytes, set[int]], b: Mapping[bytes, set[int]]) -> bool:
    return all(parts <= b.get(t, set()) for t, parts in a.items())


def assignment_list(assignment: Mapping[bytes, Iterable[int]]) -> list[dict[str, object]]:
    return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(assignment.items()) if p]

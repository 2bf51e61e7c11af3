"""Share groups (KIP-932) in the group coordinator: ShareGroupHeartbeat's member lifecycle, the
group epoch, the server-side ``simple`` assignor, session timeouts, ShareGroupDescribe, listing
and deletion (Kafka's GroupMetadataManager for share groups).

A share group's members heartbeat with a member id they generate themselves (epoch 0 joins, -1
leaves). Every change of membership, of subscriptions or of the subscribed topics' partitions
raises the group epoch; the target assignment is then computed again by the ``simple`` assignor,
which spreads the subscribed partitions over the members and, when there are more members than
partitions, gives one partition to several members (records are shared, not partitions). Share
groups have no revocation phase: a member takes its target assignment with the group epoch at
its next heartbeat. A member that does not heartbeat within ``share.session.timeout.ms`` (the
group config, else ``group.share.session.timeout.ms``) is removed.

Members and assignments live in memory here: a restarted broker's share groups come back as
their members heartbeat again (members rejoin with epoch 0 after UNKNOWN_MEMBER_ID).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from strom.broker.coordinator.group.assignors import Assignment, TopicMeta
from strom.broker.coordinator.group.group_configs import GroupConfigs
from strom.broker.coordinator.group.store import GroupStore
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.group.share")

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
SIMPLE_ASSIGNOR = "simple"


class ShareGroupError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None = None
    subscribed: frozenset[str] = frozenset()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assignment: Assignment = field(default_factory=dict)
    deadline: float = float("inf")


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 1  # as Kafka 4.3: a new group's first change makes it epoch 2
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    topics_fingerprint: tuple[tuple[str, bytes, int], ...] = ()
    # the share partitions whose state the persister has initialized: only these are assigned
    # (Kafka's ShareGroupStatePartitionMetadata), and a deletion drops their state
    initialized: set[tuple[bytes, int]] = field(default_factory=set)
    initializing: set[tuple[bytes, int]] = field(default_factory=set)
    assigned_at: float | None = None  # trio time of the last target assignment

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed_topics(self) -> set[str]:
        out: set[str] = set()
        for member in self.members.values():
            out |= member.subscribed
        return out


def simple_assign(
    members: Mapping[str, frozenset[str]],
    topics: Mapping[str, TopicMeta],
    assignable: Callable[[bytes, int], bool] = lambda topic_id, partition: True,
    current: Mapping[str, Assignment] | None = None,
) -> dict[str, Assignment]:
    """Kafka's share ``simple`` assignor, for each topic on its own, balanced and sticky.

    ``members`` in the order they joined. With no more members than (assignable) partitions, each
    member gets ``n // m`` of them, the first members holding more taking the ``n % m`` left over;
    each keeps what it holds now up to that, and the rest go in partition order to the members
    below it. With more members than partitions, every member gets one partition (members share
    it), keeping its own while that partition is not over its share of members.
    """
    out: dict[str, Assignment] = {m: {} for m in members}
    current = current or {}
    for name in sorted(topics):
        meta = topics[name]
        topic_id = meta.topic_id
        subscribers = [m for m, subs in members.items() if name in subs]
        partitions = [p for p in range(meta.partitions) if assignable(topic_id, p)]
        if not subscribers or not partitions:
            continue
        held = {m: [p for p in sorted(current.get(m, {}).get(topic_id, ())) if p in partitions] for m in subscribers}
        if len(subscribers) <= len(partitions):
            base, extra = divmod(len(partitions), len(subscribers))
            quota = {m: base for m in subscribers}
            for m in sorted(subscribers, key=lambda m: -len(held[m])):  # stable: join order among equals
                if extra and len(held[m]) > base:
                    quota[m] += 1
                    extra -= 1
            for m in subscribers:  # those holding no more than their share may still take an extra
                if extra and quota[m] == base:
                    quota[m] += 1
                    extra -= 1
            taken: set[int] = set()
            for m in subscribers:
                keep = [p for p in held[m] if p not in taken][: quota[m]]
                out[m].setdefault(topic_id, set()).update(keep)
                taken.update(keep)
            free = [p for p in partitions if p not in taken]
            for m in subscribers:
                mine = out[m].setdefault(topic_id, set())
                while len(mine) < quota[m] and free:
                    mine.add(free.pop(0))
        else:
            limit = -(-len(subscribers) // len(partitions))  # members per partition, at most
            load = dict.fromkeys(partitions, 0)
            pending = []
            for m in subscribers:
                own = next((p for p in held[m] if load[p] < limit), None)
                if own is None:
                    pending.append(m)
                else:
                    load[own] += 1
                    out[m].setdefault(topic_id, set()).add(own)
            for m in pending:
                p = min(partitions, key=lambda q: (load[q], q))
                load[p] += 1
                out[m].setdefault(topic_id, set()).add(p)
    return out


def _listed(assignment: Assignment) -> list[dict[str, object]]:
    return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(assignment.items()) if p]


MemberGone = Callable[[str, str], None]  # (group id, member id): a member left or was removed
# initializes the share state of a group's partitions (the persister's initializeState, start -1)
InitializeState = Callable[[str, list[tuple[bytes, int]]], Awaitable[None]]


class ShareGroups:
    """The share groups a group coordinator keeps beside its classic and consumer groups."""

    def __init__(self, store: GroupStore, configs: GroupConfigs, max_size: int = 200) -> None:
        self.store = store
        self.configs = configs
        self.max_size = max_size
        self.groups: dict[str, ShareGroup] = store.share  # the store's: never rebound
        self.member_gone: list[MemberGone] = []  # the share-partition leader releases their records
        self.initialize_state: InitializeState | None = None  # None: partitions count as initialized
        self._changed = trio.Event()

    # ------------------------------------------------------------------ helpers
    def get(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def _other_kind(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic, consumer or streams group (Kafka refuses a share heartbeat)."""
        return self.store.kind_of(group_id) not in (None, "share")

    def _subscribed_metadata(self, group: ShareGroup) -> dict[str, TopicMeta]:
        wanted = group.subscribed_topics()
        return {name: meta for name, meta in self.store.topics().items() if name in wanted}

    def _session_timeout_s(self, group_id: str) -> float:
        return int(self.configs.get(group_id, "share.session.timeout.ms")) / 1000

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self.configs.get(group_id, "share.heartbeat.interval.ms"))

    # ------------------------------------------------------------------ ShareGroupHeartbeat
    def heartbeat(self, body: Any, client_id: str, client_host: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
        try:
            self._validate(body)
            error = self.store.group_error(body.group_id)
            if error is not None:
                raise ShareGroupError(error)
            if body.member_epoch == LEAVE_EPOCH:
                self._leave(body.group_id, body.member_id)
                out.update(member_id=body.member_id, member_epoch=LEAVE_EPOCH)
                return out
            member, send_assignment = self._join_or_beat(body, client_id, client_host)
        except ShareGroupError as exc:
            out.update(error_code=exc.code, error_message=exc.message)
            return out
        out.update(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(body.group_id),
        )
        if send_assignment:
            out["assignment"] = {"topic_partitions": _listed(member.assignment)}
        return out

    @staticmethod
    def _validate(body: Any) -> None:
        """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid."""
        if not body.group_id:
            raise ShareGroupError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if body.rack_id is not None and not body.rack_id.strip():
            raise ShareGroupError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        if not body.member_id or not body.member_id.strip():
            raise ShareGroupError(ErrorCode.INVALID_REQUEST)  # Kafka 4.3: no message
        if body.member_epoch < LEAVE_EPOCH:
            raise ShareGroupError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
        if body.member_epoch == JOIN_EPOCH and not body.subscribed_topic_names:
            raise ShareGroupError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")

    def _join_or_beat(self, body: Any, client_id: str, client_host: str) -> tuple[ShareMember, bool]:
        group_id, member_id, epoch = body.group_id, body.member_id, body.member_epoch
        group = self.groups.get(group_id)
        if group is None:
            if epoch != JOIN_EPOCH:
                raise ShareGroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
                )
            if self._other_kind(group_id):
                raise ShareGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        bump = False
        if member is None:
            if epoch != JOIN_EPOCH:
                raise ShareGroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
                )
            if len(group.members) >= self.max_size:
                raise ShareGroupError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The share group has reached its maximum capacity of {self.max_size} members.",
                )
            member = group.members[member_id] = ShareMember(member_id, client_id, client_host)
            bump = True
            log.info("share group=%s member=%s joined", group_id, member_id)
        elif epoch > member.member_epoch:
            raise ShareGroupError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a greater member epoch ({epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        elif JOIN_EPOCH < epoch < member.member_epoch and epoch != member.previous_member_epoch:
            raise ShareGroupError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a smaller member epoch ({epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}), and it does not match the previous member epoch "
                f"({member.previous_member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if body.subscribed_topic_names is not None:
            subscribed = frozenset(body.subscribed_topic_names)
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                bump = True
        if body.rack_id is not None:
            member.rack_id = body.rack_id
        member.client_id, member.client_host = client_id, client_host
        member.deadline = trio.current_time() + self._session_timeout_s(group_id)
        metadata = self._subscribed_metadata(group)
        fingerprint = tuple(sorted((n, m.topic_id, m.partitions) for n, m in metadata.items()))
        if fingerprint != group.topics_fingerprint:
            group.topics_fingerprint = fingerprint
            bump = True
        if bump:
            group.group_epoch += 1
        self._maybe_assign(group, metadata)
        before = (member.member_epoch, member.assignment)
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
        member.assignment = {t: set(p) for t, p in group.target.get(member_id, {}).items()}
        member.member_epoch = group.assignment_epoch
        self._changed.set()
        return member, epoch == JOIN_EPOCH or before != (member.member_epoch, member.assignment)

    def _maybe_assign(self, group: ShareGroup, metadata: Mapping[str, TopicMeta]) -> None:
        """As Kafka: a group epoch newer than the target assignment's gets a new target, at most
        once per ``share.assignment.interval.ms``; until then members keep the current one."""
        if group.group_epoch <= group.assignment_epoch:
            return
        now = trio.current_time()
        interval_s = int(self.configs.get(group.group_id, "share.assignment.interval.ms")) / 1000
        if group.assigned_at is not None and now - group.assigned_at < interval_s:
            return
        group.assigned_at = now
        self._assign(group, metadata)

    def _assign(self, group: ShareGroup, metadata: Mapping[str, TopicMeta] | None = None) -> None:
        """A new target assignment at the group epoch, of the initialized partitions; the others
        subscribed are initialized first (the timer task), and assigned once they are."""
        if metadata is None:
            metadata = self._subscribed_metadata(group)
        members = {m.member_id: m.subscribed for m in group.members.values()}
        if self.initialize_state is None:
            group.initialized.update((m.topic_id, p) for m in metadata.values() for p in range(m.partitions))
        else:
            wanted = {(m.topic_id, p) for m in metadata.values() for p in range(m.partitions)} if members else set()
            if wanted - group.initialized - group.initializing:
                group.initializing |= wanted - group.initialized
                self._changed.set()
        group.target = simple_assign(
            members,
            metadata,
            lambda t, p: (t, p) in group.initialized,
            {m.member_id: m.assignment for m in group.members.values()},
        )
        group.assignment_epoch = group.group_epoch

    async def _initialize_pending(self) -> None:
        """Initialize the share state of partitions groups wait for, then assign them."""
        for group in list(self.groups.values()):
            pending = sorted(group.initializing - group.initialized)
            if not pending or self.initialize_state is None:
                continue
            try:
                await self.initialize_state(group.group_id, pending)
            except Exception:
                log.exception("initializing share state of group %s failed", group.group_id)
                group.initializing.difference_update(pending)
                continue
            if self.groups.get(group.group_id) is not group:
                continue  # deleted meanwhile
            group.initialized.update(pending)
            group.initializing.difference_update(pending)
            group.group_epoch += 1  # assigned at the next heartbeat

    def _leave(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            raise ShareGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        if member_id not in group.members:
            raise ShareGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
            )
        self._remove(group, member_id, "left")

    def _remove(self, group: ShareGroup, member_id: str, why: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1  # assigned again at the next heartbeat
        log.info("share group=%s member=%s %s", group.group_id, member_id, why)
        for listener in self.member_gone:
            listener(group.group_id, member_id)

    # ------------------------------------------------------------------ timers
    async def run(self) -> None:
        """Remove members whose session expired, until cancelled."""
        while True:
            self._changed = trio.Event()
            await self._initialize_pending()
            deadline = min((m.deadline for g in self.groups.values() for m in g.members.values()), default=float("inf"))
            if any(g.initializing for g in self.groups.values()):
                deadline = trio.current_time()
            with trio.move_on_at(deadline):
                await self._changed.wait()
            self.expire(trio.current_time())

    def expire(self, now: float) -> int:
        removed = 0
        for group in list(self.groups.values()):
            for member in [m for m in group.members.values() if m.deadline <= now]:
                self._remove(group, member.member_id, "removed: session timed out")
                removed += 1
        return removed

    # ------------------------------------------------------------------ ShareGroupDescribe, listing, deletion
    def describe(self, group_id: str, operations: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": [],
            "authorized_operations": operations,
        }
        error = self.store.group_error(group_id)
        group = self.groups.get(group_id)
        if error is None and group is None:
            error = ErrorCode.GROUP_ID_NOT_FOUND
            out["error_message"] = (
                f"Group {group_id} is not a share group."
                if self._other_kind(group_id)
                else f"Group {group_id} not found."
            )
        if error is not None:
            out["error_code"] = error
            return out
        assert group is not None
        names = {meta.topic_id: name for name, meta in self.store.topics().items()}
        out.update(
            group_state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=SIMPLE_ASSIGNOR,
        )
        out["members"] = [
            {
                "member_id": m.member_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed),
                "assignment": {
                    "topic_partitions": [
                        {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(p)}
                        for t, p in sorted(m.assignment.items())
                        if p
                    ]
                },
            }
            for m in group.members.values()
        ]
        return out

    def listed(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group coordinated here (ListGroups)."""
        return [(g.group_id, g.state) for g in self.groups.values() if self.store.is_coordinator(g.group_id)]

    def delete(self, group_id: str) -> tuple[ErrorCode, set[tuple[bytes, int]]] | None:
        """DeleteGroups: None if ``group_id`` is no share group, else its answer and the share
        partitions whose state goes with it."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, set()
        del self.groups[group_id]
        log.info("deleted share group=%s", group_id)
        return ErrorCode.NONE, group.initialized

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def assigned(self, group_id: str, member_id: str) -> Assignment:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        return member.assignment if member is not None else {}

    def drop_unled(self, is_coordinated: Callable[[str], bool]) -> None:
        for group_id in [g for g in self.groups if not is_coordinated(g)]:
            del self.groups[group_id]

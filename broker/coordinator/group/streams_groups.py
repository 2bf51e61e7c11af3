"""Streams groups (KIP-1071, `group.protocol=streams`): the group coordinator assigns Kafka Streams
tasks itself, as Kafka 4.3 does.

A Kafka Streams application's members (one per stream thread; a process, one `KafkaStreams`
instance, has as many as it has threads) send StreamsGroupHeartbeat. The first member brings the
application's topology (its subtopologies with their source, repartition and changelog topics);
the coordinator configures it against the topics that exist (task counts from the source topics'
partitions, repartition and changelog topics' partition counts derived from them), reports missing
source topics and missing internal topics in the heartbeat's status (the API handler creates the
missing internal topics, as Kafka's KafkaApis does), and, once every topic is there, spreads the
tasks over the members with the sticky task assignor (`streams_assignor`). Members reconcile to
their target assignment as consumer-group members do: an active task moves only after its old
owner stopped reporting it (revocation, then release), and the member epoch moves to the target
assignment's epoch when the member holds nothing it must give up.

Group states as Kafka names them: Empty, NotReady (the topology cannot run yet: topics missing),
Assigning (the target assignment is behind the group epoch), Reconciling, Stable, Dead.
A streams group's committed offsets live with the other groups' offsets (the member-less classic
`Group` of the store holds them); OffsetCommit/OffsetFetch check the member and its epoch here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from strom.broker.coordinator.group.assignors import TopicMeta
from strom.broker.coordinator.group.config import StreamsGroupSettings
from strom.broker.coordinator.group.state import GroupState
from strom.broker.coordinator.group.store import GroupStore, Record
from strom.broker.coordinator.group.streams_assignor import (
    AssignorMember,
    Task,
    TaskAssignment,
    all_tasks,
    sticky_assign,
)
from strom.broker.coordinator.group.streams_records import (
    CURRENT_ASSIGNMENT,
    MEMBER,
    METADATA,
    TARGET_MEMBER,
    TARGET_METADATA,
    TOPOLOGY,
    StreamsGroupKey,
    decode_streams_value,
    encode_streams_key,
    encode_streams_value,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.internal_records import java_string_hashcode

log = logging.getLogger("strom.group.streams")

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2

# StreamsGroupHeartbeatResponse's status codes
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5

# a member's state in its StreamsGroupCurrentMemberAssignment record (Kafka's codes: a stable
# member is 1, as Kafka 4.3's kafka-dump-log shows)
STABLE_STATE, UNREVOKED_STATE, UNRELEASED_STATE = 1, 2, 3
UNSET = -1.0  # a loaded member's deadline: set from the trio clock when the timers start
# the order Kafka writes a change in, and removes one in
WRITE_ORDER = {MEMBER: 0, TOPOLOGY: 1, METADATA: 2, TARGET_MEMBER: 3, TARGET_METADATA: 4, CURRENT_ASSIGNMENT: 5}
REMOVE_ORDER = {CURRENT_ASSIGNMENT: 0, TARGET_MEMBER: 1, MEMBER: 2, TARGET_METADATA: 3, METADATA: 4, TOPOLOGY: 5}


class StreamsGroupError(Exception):
    """A heartbeat refused with Kafka's error code and message."""

    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code = code
        self.message = message


# ---------------------------------------------------------------------- topology
@dataclass(frozen=True)
class TopicInfo:
    """An internal topic a subtopology needs: 0 partitions means "derive it", replication factor
    0 or -1 the broker's default."""

    name: str
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    source_topic_regex: tuple[str, ...]
    changelog_topics: tuple[TopicInfo, ...]
    repartition_sink_topics: tuple[str, ...]
    repartition_source_topics: tuple[TopicInfo, ...]
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]


def _topic_info(raw: Any) -> TopicInfo:
    return TopicInfo(
        raw.name,
        raw.partitions,
        raw.replication_factor,
        tuple((kv.key, kv.value) for kv in raw.topic_configs or ()),
    )


def topology_from_request(raw: Any) -> Topology:
    """The topology a joining member sent (StreamsGroupHeartbeatRequest's Topology)."""
    return Topology(
        raw.epoch,
        tuple(
            Subtopology(
                s.subtopology_id,
                tuple(s.source_topics or ()),
                tuple(s.source_topic_regex or ()),
                tuple(_topic_info(t) for t in s.state_changelog_topics or ()),
                tuple(s.repartition_sink_topics or ()),
                tuple(_topic_info(t) for t in s.repartition_source_topics or ()),
                tuple(
                    (
                        tuple(g.source_topics or ()),
                        tuple(g.source_topic_regex or ()),
                        tuple(g.repartition_source_topics or ()),
                    )
                    for g in s.copartition_groups or ()
                ),
            )
            for s in raw.subtopologies or ()
        ),
    )


@dataclass
class ConfiguredTopology:
    """A topology set against the topics that exist: the task count of each subtopology (None
    while it cannot run), the internal topics with their partition counts, what to create, and the
    statuses to report."""

    partitions: dict[str, int] | None
    internal_topics: dict[str, TopicInfo]
    missing_internal: list[TopicInfo]
    statuses: list[tuple[int, str]]


def configure(topology: Topology, topics: Mapping[str, TopicMeta]) -> ConfiguredTopology:
    """Kafka's InternalTopicManager.configureTopics, as far as a streams group needs it."""
    import re

    statuses: list[tuple[int, str]] = []
    sources: dict[str, list[str]] = {}
    missing_sources: list[str] = []
    for sub in topology.subtopologies:
        names = list(sub.source_topics)
        for regex in sub.source_topic_regex:
            try:
                pattern = re.compile(regex)
            except re.error:
                continue
            names += sorted(t for t in topics if pattern.fullmatch(t) and t not in names)
        missing_sources += [t for t in sub.source_topics if t not in topics]
        sources[sub.subtopology_id] = names
    if missing_sources:
        statuses.append(
            (MISSING_SOURCE_TOPICS, f"Source topics {', '.join(sorted(set(missing_sources)))} are missing.")
        )
        return ConfiguredTopology(None, {}, [], statuses)
    # repartition topics without a partition count take the largest of the subtopologies writing to
    # them (their sources' counts), until nothing changes (a repartition topic may feed another)
    repartition: dict[str, int] = {}
    for sub in topology.subtopologies:
        for info in sub.repartition_source_topics:
            if info.partitions > 0:
                repartition[info.name] = info.partitions
    changed = True
    while changed:
        changed = False
        for sub in topology.subtopologies:
            counts = [topics[t].partitions for t in sources[sub.subtopology_id] if t in topics]
            counts += [repartition[i.name] for i in sub.repartition_source_topics if i.name in repartition]
            if not counts:
                continue
            for sink in sub.repartition_sink_topics:
                if sink not in repartition and any(
                    sink == i.name for s in topology.subtopologies for i in s.repartition_source_topics
                ):
                    repartition[sink] = max(counts)
                    changed = True
    partitions: dict[str, int] = {}
    internal: dict[str, TopicInfo] = {}
    for sub in topology.subtopologies:
        counts = [topics[t].partitions for t in sources[sub.subtopology_id] if t in topics]
        counts += [repartition.get(i.name, 0) for i in sub.repartition_source_topics]
        tasks = max(counts, default=0)
        partitions[sub.subtopology_id] = tasks
        for info in sub.repartition_source_topics:
            internal[info.name] = TopicInfo(
                info.name, repartition.get(info.name, 0), info.replication_factor, info.configs
            )
        for info in sub.changelog_topics:
            internal[info.name] = TopicInfo(info.name, tasks, info.replication_factor, info.configs)
    missing = [info for name, info in sorted(internal.items()) if name not in topics and info.partitions > 0]
    wrong = [
        name for name, info in sorted(internal.items()) if name in topics and topics[name].partitions != info.partitions
    ]
    if wrong:
        statuses.append(
            (INCORRECTLY_PARTITIONED_TOPICS, f"Internal topics {', '.join(wrong)} have the wrong number of partitions.")
        )
    if missing:
        names = java_hash_order([i.name for i in missing])
        statuses.append((MISSING_INTERNAL_TOPICS, f"Internal topics are missing: {', '.join(names)}"))
    ready = not missing and not wrong
    return ConfiguredTopology(partitions if ready else None, internal, missing, statuses)


def java_hash_order(names: list[str]) -> list[str]:
    """``names`` in the order a Java HashMap of them iterates (Kafka lists missing topics so)."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = java_string_hashcode(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)  # stable: a bucket keeps insertion order


# ---------------------------------------------------------------------- members and the group
class StreamsHeartbeat(Protocol):
    """The fields of StreamsGroupHeartbeatRequest the coordinator reads."""

    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    topology: Any
    active_tasks: Sequence[Any] | None
    standby_tasks: Sequence[Any] | None
    warmup_tasks: Sequence[Any] | None
    process_id: str | None
    user_endpoint: Any
    client_tags: Sequence[Any] | None
    task_offsets: Sequence[Any] | None
    task_end_offsets: Sequence[Any] | None
    shutdown_application: bool


def tasks_of(raw: Sequence[Any] | None) -> set[Task] | None:
    """TaskIds entries as a set of tasks (None stays None: unchanged)."""
    if raw is None:
        return None
    return {(entry.subtopology_id, p) for entry in raw for p in entry.partitions}


def task_list(tasks: set[Task] | frozenset[Task]) -> list[dict[str, Any]]:
    """Tasks as TaskIds entries (by subtopology, partitions sorted)."""
    by_sub: dict[str, list[int]] = {}
    for sub, p in tasks:
        by_sub.setdefault(sub, []).append(p)
    return [{"subtopology_id": sub, "partitions": sorted(ps)} for sub, ps in sorted(by_sub.items())]


@dataclass
class StreamsMember:
    member_id: str
    process_id: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = 0
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    task_offsets: list[tuple[str, int, int]] = field(default_factory=list)
    task_end_offsets: list[tuple[str, int, int]] = field(default_factory=list)
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: TaskAssignment = field(default_factory=TaskAssignment)
    pending_revocation: set[Task] = field(default_factory=set)  # active tasks it must give up
    deadline: float = 0.0  # trio clock: removed without a heartbeat by then
    revoke_deadline: float | None = None  # trio clock: fenced if still revoking by then (rebalance timeout)

    def stable(self, assignment_epoch: int) -> bool:
        return self.member_epoch == assignment_epoch and not self.pending_revocation


class StreamsGroup:
    """One streams group: its epochs, topology, members and target assignment."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        self.topology: Topology | None = None
        self.members: dict[str, StreamsMember] = {}
        self.target: dict[str, TaskAssignment] = {}
        self.partitions: dict[str, int] | None = None  # the configured topology's task counts
        self.metadata_hash = 0  # of the topics the topology reads (Strom's own hash of their partition counts)
        self.assigned_at_ms = 0  # wall clock of the last target assignment
        self.shutdown_requested_by: str | None = None  # a member asking the whole application to stop
        # moves whenever an assignment of a member with an interactive-query endpoint changes
        self.endpoint_epoch = 0
        # trio clock: no new target assignment before then (the initial delay, the assignment interval)
        self.assign_not_before = 0.0
        self.initial_delay = False  # the wait is the initial rebalance delay (else the interval)

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.partitions is None:
            return "NotReady"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(
            not m.stable(self.assignment_epoch)
            or m.assigned.active != self.target.get(m.member_id, TaskAssignment()).active
            for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def endpoint_assignments(self) -> dict[str, tuple[TaskAssignment, TaskAssignment]]:
        """The current and target tasks of each member with an interactive-query endpoint."""
        return {
            m.member_id: (m.assigned, self.target.get(m.member_id, TaskAssignment()))
            for m in self.members.values()
            if m.user_endpoint is not None
        }

    def partitions_by_endpoint(self) -> list[dict[str, Any]]:
        """Which input partitions each endpoint's member processes, active and standby (the
        heartbeat's PartitionsByUserEndpoint, for interactive queries)."""

        def partitions(tasks: set[Task]) -> list[dict[str, Any]]:
            out: dict[str, set[int]] = {}
            for sub in self.topology.subtopologies if self.topology is not None else ():
                ps = {p for s, p in tasks if s == sub.subtopology_id}
                if ps:
                    for topic in (*sub.source_topics, *(t.name for t in sub.repartition_source_topics)):
                        out.setdefault(topic, set()).update(ps)
            return [{"topic": t, "partitions": sorted(ps)} for t, ps in out.items()]

        return [
            {
                "user_endpoint": {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                "active_partitions": partitions(m.assigned.active),
                "standby_partitions": partitions(m.assigned.standby),
            }
            for m in self.members.values()
            if m.user_endpoint is not None
        ]

    def subscribed_topics(self) -> set[str]:
        """The topics the members read (source and repartition source topics), none while empty."""
        if not self.members or self.topology is None:
            return set()
        names: set[str] = set()
        for sub in self.topology.subtopologies:
            names.update(sub.source_topics)
            names.update(t.name for t in sub.repartition_source_topics)
        return names

    def owner_of(self, task: Task, other_than: str) -> StreamsMember | None:
        """A member other than ``other_than`` that still holds ``task`` as active (or revokes it)."""
        for member in self.members.values():
            if member.member_id != other_than and (task in member.assigned.active or task in member.pending_revocation):
                return member
        return None

    def compute_target(self, num_standby_replicas: int) -> None:
        """The target assignment for the current group epoch."""
        tasks = all_tasks(self.partitions) if self.partitions is not None else []
        specs = {
            m.member_id: AssignorMember(
                m.process_id,
                frozenset(m.assigned.active),
                frozenset(m.assigned.standby),
                frozenset(m.assigned.warmup),
            )
            for m in self.members.values()
        }
        self.target = sticky_assign(specs, tasks, num_standby_replicas)
        self.assignment_epoch = self.epoch

    def reconcile(self, member: StreamsMember, owned_active: set[Task] | None) -> None:
        """Move ``member`` toward its target (Kafka's CurrentAssignmentBuilder for streams)."""
        target = self.target.get(member.member_id, TaskAssignment())
        if member.pending_revocation:
            if owned_active is None or owned_active & member.pending_revocation:
                return  # still revoking
            member.pending_revocation = set()
        revoke = member.assigned.active - target.active
        # a revocation waits for the member only while it may still hold those tasks (it reported
        # nothing, or some of them), as Kafka's CurrentAssignmentBuilder
        holds = owned_active is None or bool(owned_active & revoke)
        if revoke and holds and member.member_epoch != self.assignment_epoch:
            member.pending_revocation = revoke
            member.assigned = TaskAssignment(
                member.assigned.active & target.active,
                member.assigned.standby & target.standby,
                member.assigned.warmup & target.warmup,
            )
            return
        if member.member_epoch != self.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        # an active task moves once its previous owner no longer holds it (released)
        active = {t for t in target.active if t in member.assigned.active or self.owner_of(t, member.member_id) is None}
        standby = set(target.standby) - active
        member.assigned = TaskAssignment(active, standby, set(target.warmup) - active - standby)


def _validate(body: StreamsHeartbeat) -> None:
    """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid (INVALID_REQUEST, Kafka's messages)."""

    def bad(message: str) -> StreamsGroupError:
        return StreamsGroupError(ErrorCode.INVALID_REQUEST, message)

    if not body.member_id:
        raise bad("MemberId can't be empty.")
    if not body.group_id:
        raise bad("GroupId can't be empty.")
    if body.instance_id is not None:  # Kafka 4.3 refuses static members of streams groups
        raise bad("Static membership is not yet supported.")
    if body.rack_id is not None and not body.rack_id:
        raise bad("RackId can't be empty.")
    if body.member_epoch == JOIN_EPOCH:
        if body.rebalance_timeout_ms == -1:
            raise bad("RebalanceTimeoutMs must be provided in first request.")
        for name, tasks in (
            ("ActiveTasks", body.active_tasks),
            ("StandbyTasks", body.standby_tasks),
            ("WarmupTasks", body.warmup_tasks),
        ):
            if tasks is None or len(tasks) > 0:
                raise bad(f"{name} must be empty when (re-)joining.")
        if body.topology is None:
            raise bad("Topology must be non-null when (re-)joining.")
    elif len({body.active_tasks is None, body.standby_tasks is None, body.warmup_tasks is None}) > 1:
        raise bad("If one task-type is non-null, all must be non-null.")
    elif body.member_epoch == STATIC_LEAVE_EPOCH and body.instance_id is None:
        raise bad("InstanceId can't be null.")
    elif body.member_epoch < STATIC_LEAVE_EPOCH:
        raise bad(f"MemberEpoch is {body.member_epoch}, but must be greater than or equal to -2.")


class StreamsGroups:
    """The streams groups of a group store: heartbeats, describe, offsets checks, timers."""

    def __init__(self, store: GroupStore, settings: StreamsGroupSettings | None = None) -> None:
        self.store = store
        self.settings = settings or StreamsGroupSettings()
        self.groups: dict[str, StreamsGroup] = store.streams  # the store's: never rebound
        self.persisted: dict[str, dict[StreamsGroupKey, bytes]] = {}  # what __consumer_offsets holds
        self._changed = trio.Event()

    def get(self, group_id: str) -> StreamsGroup | None:
        return self.groups.get(group_id)

    # ------------------------------------------------------------------ the heartbeat
    def heartbeat(
        self, body: StreamsHeartbeat, client_id: str, client_host: str, now: float
    ) -> tuple[dict[str, Any], list[TopicInfo]]:
        """The answer to one StreamsGroupHeartbeat, and the internal topics to create for it."""
        try:
            _validate(body)
            error = self.store.group_error(body.group_id)
            if error is not None:
                raise StreamsGroupError(error)
            if body.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                answer = self._leave(body)
                self.persist(body.group_id)
                return answer, []
            answer, missing = self._heartbeat(body, client_id, client_host, now)
            self.persist(body.group_id)
            return answer, missing
        except StreamsGroupError as exc:
            return refused(exc.code, exc.message), []
        finally:
            self._changed.set()

    def _group(self, body: StreamsHeartbeat) -> StreamsGroup:
        group_id = body.group_id
        group = self.groups.get(group_id)
        if group is not None:
            return group
        kind = self.store.kind_of(group_id)
        classic = self.store.classic_group(group_id)
        if kind in ("consumer", "share") or (classic is not None and classic.state is not GroupState.EMPTY):
            raise StreamsGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        if body.member_epoch != JOIN_EPOCH:
            raise StreamsGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        group = self.groups[group_id] = StreamsGroup(group_id)
        log.info("streams group %s created", group_id)
        return group

    def _heartbeat(
        self, body: StreamsHeartbeat, client_id: str, client_host: str, now: float
    ) -> tuple[dict[str, Any], list[TopicInfo]]:
        group = self._group(body)
        member_id = body.member_id
        member = group.members.get(member_id)
        bump = False
        if body.member_epoch == JOIN_EPOCH:
            topology = topology_from_request(body.topology)
            if group.topology is not None and topology != group.topology:
                raise StreamsGroupError(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
            if member is None and len(group.members) >= self.settings.max_size:
                raise StreamsGroupError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The streams group has reached its maximum capacity of {self.settings.max_size} members.",
                )
            if group.topology is None:
                group.topology = topology
                bump = True
            if member is None:
                member = group.members[member_id] = StreamsMember(member_id)
                bump = True
                log.info("member %s joined streams group %s", member_id, group.group_id)
            member.topology_epoch = topology.epoch
        else:
            if member is None:
                raise StreamsGroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}."
                )
            self._check_epoch(member, body)
        bump |= self._update_member(member, body, client_id, client_host)
        member.deadline = now + self.settings.session_timeout_ms / 1000
        if body.shutdown_application and group.shutdown_requested_by is None:
            group.shutdown_requested_by = member_id
        before = member.assigned
        endpoints_before = group.endpoint_assignments()
        configured = self._configure(group)
        group.partitions = configured.partitions
        # as Kafka 4.3: a change of the configured topology (its first validation too) is an epoch of
        # its own, beside the one a member change bumps (a fresh group's first member gets epoch 2)
        metadata_hash = _metadata_hash(group.topology, self.store.topics())
        if bump:
            group.epoch += 1
        if group.assignment_epoch == 0 and metadata_hash != group.metadata_hash:
            # a new group, as Kafka 4.3 starts one: its first member is assigned (nothing) at once,
            # at the epoch of its joining; the assignment of the topology's tasks waits for the
            # initial rebalance delay, for more members to join
            self._assign(group, now, initial=True, tasks=False)
        if metadata_hash != group.metadata_hash:
            group.metadata_hash = metadata_hash
            group.epoch += 1
        delayed = None
        if group.assignment_epoch < group.epoch:
            if now >= group.assign_not_before:
                self._assign(group, now)
            else:
                delayed = "initial rebalance delay" if group.initial_delay else "assignment interval"
        group.reconcile(member, tasks_of(body.active_tasks))
        if not member.pending_revocation:
            member.revoke_deadline = None
        elif member.revoke_deadline is None:  # as Kafka: the rebalance timeout bounds a revocation
            member.revoke_deadline = now + max(member.rebalance_timeout_ms, 0) / 1000
        statuses = list(configured.statuses)
        if delayed is not None:
            statuses.insert(0, (ASSIGNMENT_DELAYED, f"Assignment delayed due to the configured {delayed}."))
        if group.topology is not None and member.topology_epoch < group.topology.epoch:
            statuses.insert(0, (STALE_TOPOLOGY, "The member's topology epoch is behind the group's."))
        if group.shutdown_requested_by is not None:
            detail = (
                f"Streams group member {group.shutdown_requested_by} encountered a fatal error and requested "
                "a shutdown for the entire application."
            )
            statuses.append((SHUTDOWN_APPLICATION, detail))
        if group.endpoint_assignments() != endpoints_before:
            group.endpoint_epoch += 1
        send = member.assigned != before  # as Kafka: the tasks only when they changed (or on joining)
        answer = {
            **refused(ErrorCode.NONE, None),
            "member_id": member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.settings.heartbeat_interval_ms,
            "status": [{"status_code": code, "status_detail": detail} for code, detail in statuses],
        }
        answer["endpoint_information_epoch"] = group.endpoint_epoch
        if any(m.user_endpoint for m in group.members.values()) and (
            body.member_epoch == JOIN_EPOCH or body.endpoint_information_epoch < group.endpoint_epoch
        ):
            answer["partitions_by_user_endpoint"] = group.partitions_by_endpoint()
        if send or body.member_epoch == JOIN_EPOCH:
            answer["active_tasks"] = task_list(member.assigned.active)
            answer["standby_tasks"] = task_list(member.assigned.standby)
            answer["warmup_tasks"] = task_list(member.assigned.warmup)
        return answer, configured.missing_internal

    def _assign(self, group: StreamsGroup, now: float, initial: bool = False, tasks: bool = True) -> None:
        """A new target assignment at the group epoch (with ``tasks`` False: of no task), and when
        the next may be computed: after the assignment interval, or the initial rebalance delay."""
        partitions = group.partitions
        if not tasks:
            group.partitions = None
        group.compute_target(self.settings.num_standby_replicas)
        group.partitions = partitions
        group.assigned_at_ms = self.store.wall_ms()
        delay_ms = self.settings.initial_rebalance_delay_ms if initial else self.settings.assignment_interval_ms
        group.assign_not_before = now + delay_ms / 1000
        group.initial_delay = initial

    def _check_epoch(self, member: StreamsMember, body: StreamsHeartbeat) -> None:
        epoch = body.member_epoch
        if epoch > member.member_epoch:
            raise StreamsGroupError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The streams group member has a greater member epoch ({epoch}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if epoch < member.member_epoch:
            owned = tasks_of(body.active_tasks)
            if epoch != member.previous_epoch or (owned is not None and not owned <= member.assigned.active):
                raise StreamsGroupError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The streams group member has a smaller member epoch ({epoch}) than the one known by the group "
                    f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
                )

    @staticmethod
    def _update_member(member: StreamsMember, body: StreamsHeartbeat, client_id: str, client_host: str) -> bool:
        """Take what the heartbeat changed; True if the assignment must be computed again."""
        bump = False
        member.client_id, member.client_host = client_id, client_host
        if body.instance_id is not None:
            member.instance_id = body.instance_id
        if body.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = body.rebalance_timeout_ms
        if body.process_id is not None and body.process_id != member.process_id:
            member.process_id = body.process_id
            bump = True
        if body.rack_id is not None and body.rack_id != member.rack_id:
            member.rack_id = body.rack_id
            bump = True
        if body.client_tags is not None:
            tags = tuple((kv.key, kv.value) for kv in body.client_tags)
            bump |= tags != member.client_tags
            member.client_tags = tags
        if body.user_endpoint is not None:
            member.user_endpoint = (body.user_endpoint.host, body.user_endpoint.port)
        if body.task_offsets is not None:
            member.task_offsets = [(t.subtopology_id, t.partition, t.offset) for t in body.task_offsets]
        if body.task_end_offsets is not None:
            member.task_end_offsets = [(t.subtopology_id, t.partition, t.offset) for t in body.task_end_offsets]
        return bump

    def _configure(self, group: StreamsGroup) -> ConfiguredTopology:
        if group.topology is None:
            return ConfiguredTopology(None, {}, [], [])
        return configure(group.topology, self.store.topics())

    def _leave(self, body: StreamsHeartbeat) -> dict[str, Any]:
        group = self.groups.get(body.group_id)
        if group is None:
            raise StreamsGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {body.group_id} not found.")
        member = group.members.get(body.member_id)
        if member is None:
            raise StreamsGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {body.member_id} is not a member of group {group.group_id}."
            )
        self.remove(group, member, "left the group")
        return {**refused(ErrorCode.NONE, None), "member_id": body.member_id, "member_epoch": body.member_epoch}

    def remove(self, group: StreamsGroup, member: StreamsMember, why: str) -> None:
        """Drop ``member``: the group epoch moves and the target assignment follows."""
        removed = group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        group.epoch += 1
        if removed is not None and removed.user_endpoint is not None:
            group.endpoint_epoch += 1
        if not group.members:
            group.shutdown_requested_by = None
        log.info("member %s of streams group %s removed: %s", member.member_id, group.group_id, why)

    # ------------------------------------------------------------------ describe, list, delete
    def describe(self, group_id: str, operations: int) -> dict[str, Any]:
        """StreamsGroupDescribe's entry for ``group_id``."""
        out: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "topology": None,
            "members": [],
            "authorized_operations": -2147483648,
        }
        error = self.store.group_error(group_id)
        if error is not None:
            return {**out, "error_code": error}
        group = self.groups.get(group_id)
        if group is None:
            other = self.store.kind_of(group_id) is not None
            message = f"Group {group_id} is not a streams group." if other else f"Group {group_id} not found."
            return {**out, "error_code": ErrorCode.GROUP_ID_NOT_FOUND, "error_message": message}
        configured = self._configure(group)
        return {
            **out,
            "group_state": group.state(),
            "group_epoch": group.epoch,
            "assignment_epoch": group.assignment_epoch,
            "topology": _described_topology(group.topology, configured) if group.topology is not None else None,
            "members": [self._described_member(group, m) for m in group.members.values()],
            "authorized_operations": operations,
        }

    @staticmethod
    def _described_member(group: StreamsGroup, m: StreamsMember) -> dict[str, Any]:
        target = group.target.get(m.member_id, TaskAssignment())

        def assignment(a: TaskAssignment) -> dict[str, Any]:
            return {
                "active_tasks": task_list(a.active),
                "standby_tasks": task_list(a.standby),
                "warmup_tasks": task_list(a.warmup),
            }

        return {
            "member_id": m.member_id,
            "member_epoch": m.member_epoch,
            "instance_id": m.instance_id,
            "rack_id": m.rack_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "topology_epoch": m.topology_epoch,
            "process_id": m.process_id,
            "user_endpoint": {"host": m.user_endpoint[0], "port": m.user_endpoint[1]} if m.user_endpoint else None,
            "client_tags": [{"key": k, "value": v} for k, v in m.client_tags],
            "task_offsets": [{"subtopology_id": s, "partition": p, "offset": o} for s, p, o in m.task_offsets],
            "task_end_offsets": [{"subtopology_id": s, "partition": p, "offset": o} for s, p, o in m.task_end_offsets],
            "assignment": assignment(m.assigned),
            "target_assignment": assignment(target),
            "is_classic": False,
        }

    def listed(self) -> list[tuple[str, str]]:
        """(group id, state) of every streams group, for ListGroups."""
        return [(g.group_id, g.state()) for g in self.groups.values()]

    def delete(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups: None if ``group_id`` is no streams group, else its answer."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        self.persist(group_id)
        log.info("deleted streams group=%s", group_id)
        return ErrorCode.NONE

    def drop_unled(self, is_coordinated: Any) -> None:
        for group_id in [g for g in self.groups if not is_coordinated(g)]:
            del self.groups[group_id]
            self.persisted.pop(group_id, None)

    # ------------------------------------------------------------------ records
    def _records(self, group: StreamsGroup) -> dict[StreamsGroupKey, bytes]:
        """Every record that describes ``group`` now, as Kafka 4.3 writes them."""
        gid = group.group_id
        out: dict[StreamsGroupKey, bytes] = {}

        def put(version: int, body: dict[str, Any], member: str = "") -> None:
            key = StreamsGroupKey(version, gid, member)
            out[key] = encode_streams_value(key, body)

        validated = group.topology.epoch if group.topology is not None and group.partitions is not None else -1
        put(
            METADATA,
            {
                "epoch": group.epoch,
                "metadata_hash": group.metadata_hash,
                "validated_topology_epoch": validated,
                "last_assignment_configs": [
                    {"key": "num.standby.replicas", "value": str(self.settings.num_standby_replicas)}
                ]
                if group.assignment_epoch > 0
                else None,
            },
        )
        if group.topology is not None:
            put(TOPOLOGY, _topology_record(group.topology))
        put(TARGET_METADATA, {"assignment_epoch": group.assignment_epoch, "assignment_timestamp": group.assigned_at_ms})
        for m in group.members.values():
            put(
                MEMBER,
                {
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "topology_epoch": m.topology_epoch,
                    "process_id": m.process_id,
                    "user_endpoint": {"host": m.user_endpoint[0], "port": m.user_endpoint[1]}
                    if m.user_endpoint
                    else None,
                    "client_tags": [{"key": k, "value": v} for k, v in m.client_tags],
                },
                m.member_id,
            )
            target = group.target.get(m.member_id)
            if target is not None:
                put(TARGET_MEMBER, _assignment_record(target), m.member_id)
            if m.pending_revocation:
                state = UNREVOKED_STATE
            elif m.assigned.active != group.target.get(m.member_id, TaskAssignment()).active:
                state = UNRELEASED_STATE
            else:
                state = STABLE_STATE
            put(
                CURRENT_ASSIGNMENT,
                {
                    "member_epoch": m.member_epoch,
                    "previous_member_epoch": m.previous_epoch,
                    "state": state,
                    **_assignment_record(m.assigned),
                    "active_tasks_pending_revocation": task_list(m.pending_revocation),
                    "standby_tasks_pending_revocation": [],
                    "warmup_tasks_pending_revocation": [],
                },
                m.member_id,
            )
        return out

    def persist(self, group_id: str) -> bool:
        """Append what changed in a group since the last write (tombstones for what went) in one
        batch; False if that could not be written (logged)."""
        group = self.groups.get(group_id)
        current = self._records(group) if group is not None else {}
        before = self.persisted.get(group_id, {})
        gone = sorted((k for k in before if k not in current), key=lambda k: (REMOVE_ORDER[k.version], k.member))
        changed = sorted(
            (k for k, v in current.items() if before.get(k) != v), key=lambda k: (WRITE_ORDER[k.version], k.member)
        )
        if not gone and not changed:
            return True
        records: list[Record] = [(encode_streams_key(k), None) for k in gone]
        records += [(encode_streams_key(k), current[k]) for k in changed]
        return self.store.append_changes("streams", group_id, records, self.persisted, current)

    def replay(self, key: StreamsGroupKey, value: bytes | None) -> None:
        """Loading `__consumer_offsets`: one streams group record (None: a tombstone)."""
        gid = key.group
        if value is None:
            self.persisted.get(gid, {}).pop(key, None)
            group = self.groups.get(gid)
            if key.version == METADATA:
                self.groups.pop(gid, None)
                self.persisted.pop(gid, None)
            elif group is not None and key.version == MEMBER:
                group.members.pop(key.member, None)
            elif group is not None and key.version == TARGET_MEMBER:
                group.target.pop(key.member, None)
            return
        self.persisted.setdefault(gid, {})[key] = value
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = StreamsGroup(gid)
        body = decode_streams_value(key, value)
        if key.version == METADATA:
            group.epoch, group.metadata_hash = body.epoch, body.metadata_hash
        elif key.version == TOPOLOGY:
            group.topology = _topology_from_record(body)
        elif key.version == TARGET_METADATA:
            group.assignment_epoch, group.assigned_at_ms = body.assignment_epoch, body.assignment_timestamp
        elif key.version == TARGET_MEMBER:
            group.target[key.member] = _assignment_from_record(body)
        else:
            member = group.members.get(key.member)
            if member is None:
                member = group.members[key.member] = StreamsMember(key.member, deadline=UNSET)
            if key.version == MEMBER:
                member.instance_id, member.rack_id = body.instance_id, body.rack_id
                member.client_id, member.client_host = body.client_id, body.client_host
                member.rebalance_timeout_ms, member.topology_epoch = body.rebalance_timeout_ms, body.topology_epoch
                member.process_id = body.process_id
                endpoint = body.user_endpoint
                member.user_endpoint = (endpoint.host, endpoint.port) if endpoint is not None else None
                member.client_tags = tuple((kv.key, kv.value) for kv in body.client_tags)
            elif key.version == CURRENT_ASSIGNMENT:
                member.member_epoch, member.previous_epoch = body.member_epoch, body.previous_member_epoch
                member.assigned = _assignment_from_record(body)
                member.pending_revocation = _tasks_from_record(body.active_tasks_pending_revocation)

    # ------------------------------------------------------------------ offsets
    def commit_error(self, group_id: str, member_id: str, epoch: int) -> ErrorCode | None:
        """OffsetCommit (and TxnOffsetCommit) to a streams group, as Kafka's StreamsGroup checks it:
        anyone while it has no members (epoch -1), else a member with its current epoch."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def fetch_error(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode | None:
        group = self.groups.get(group_id)
        if group is None or (epoch < 0 and not member_id):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    # ------------------------------------------------------------------ timers
    def expire(self, now: float) -> None:
        """Remove members whose session timed out."""
        for group in list(self.groups.values()):
            expired = [m for m in group.members.values() if m.deadline != UNSET and m.deadline <= now]
            for member in expired:
                self.remove(group, member, "session timed out")
            stuck = [m for m in group.members.values() if m.revoke_deadline is not None and m.revoke_deadline <= now]
            for member in stuck:
                self.remove(group, member, "did not revoke its tasks within its rebalance timeout")
            expired += stuck
            if expired:
                self.persist(group.group_id)

    async def run(self) -> None:
        while True:
            self._changed = trio.Event()
            now = trio.current_time()
            for group in self.groups.values():  # loaded members: their sessions start now
                for member in group.members.values():
                    if member.deadline == UNSET:
                        member.deadline = now + self.settings.session_timeout_ms / 1000
            members = [m for g in self.groups.values() for m in g.members.values()]
            deadline = min(
                [m.deadline for m in members] + [m.revoke_deadline for m in members if m.revoke_deadline is not None],
                default=float("inf"),
            )
            with trio.move_on_at(deadline):
                await self._changed.wait()
            try:
                self.expire(trio.current_time())
            except Exception:
                log.exception("expiring streams group members failed")


def refused(code: ErrorCode, message: str | None) -> dict[str, Any]:
    """A StreamsGroupHeartbeat answer with ``code`` and nothing else (as Kafka's error answer)."""
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "member_id": "",
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "acceptable_recovery_lag": 0,
        "task_offset_interval_ms": 0,
        "status": [],
        "active_tasks": None,
        "standby_tasks": None,
        "warmup_tasks": None,
        "endpoint_information_epoch": 0,
        "partitions_by_user_endpoint": None,
    }


def _described_topology(topology: Topology, configured: ConfiguredTopology) -> dict[str, Any]:
    def info(t: TopicInfo) -> dict[str, Any]:
        known = configured.internal_topics.get(t.name, t)
        return {
            "name": t.name,
            "partitions": known.partitions,
            "replication_factor": t.replication_factor,
            "topic_configs": [{"key": k, "value": v} for k, v in t.configs],
        }

    return {
        "epoch": topology.epoch,
        "subtopologies": [
            {
                "subtopology_id": s.subtopology_id,
                "source_topics": list(s.source_topics),
                "repartition_sink_topics": list(s.repartition_sink_topics),
                "state_changelog_topics": [info(t) for t in s.changelog_topics],
                "repartition_source_topics": [info(t) for t in s.repartition_source_topics],
            }
            for s in topology.subtopologies
        ],
    }


def _topology_record(topology: Topology) -> dict[str, Any]:
    def infos(topics: tuple[TopicInfo, ...]) -> list[dict[str, Any]]:
        return [
            {
                "name": t.name,
                "partitions": t.partitions,
                "replication_factor": t.replication_factor,
                "topic_configs": [{"key": k, "value": v} for k, v in t.configs],
            }
            for t in topics
        ]

    return {
        "epoch": topology.epoch,
        "subtopologies": [
            {
                "subtopology_id": s.subtopology_id,
                "source_topics": list(s.source_topics),
                "source_topic_regex": list(s.source_topic_regex),
                "state_changelog_topics": infos(s.changelog_topics),
                "repartition_sink_topics": list(s.repartition_sink_topics),
                "repartition_source_topics": infos(s.repartition_source_topics),
                "copartition_groups": [
                    {"source_topics": list(a), "source_topic_regex": list(b), "repartition_source_topics": list(c)}
                    for a, b, c in s.copartition_groups
                ],
            }
            for s in topology.subtopologies
        ],
    }


def _topology_from_record(body: Any) -> Topology:
    """The topology of a StreamsGroupTopology record (its shape is the request's)."""
    return topology_from_request(body)


def _assignment_record(a: TaskAssignment) -> dict[str, Any]:
    return {
        "active_tasks": task_list(a.active),
        "standby_tasks": task_list(a.standby),
        "warmup_tasks": task_list(a.warmup),
    }


def _tasks_from_record(entries: Any) -> set[Task]:
    return {(e.subtopology_id, p) for e in entries or () for p in e.partitions}


def _assignment_from_record(body: Any) -> TaskAssignment:
    return TaskAssignment(
        _tasks_from_record(body.active_tasks),
        _tasks_from_record(body.standby_tasks),
        _tasks_from_record(body.warmup_tasks),
    )


def _metadata_hash(topology: Topology | None, topics: Mapping[str, TopicMeta]) -> int:
    """A signed 64-bit hash of the partition counts of the topology's topics that exist, 0 without
    a topology (Kafka hashes their metadata with its own function; it only has to change when they
    do, and a group's first topology changes it even when none of its topics exists yet)."""
    import hashlib

    if topology is None:
        return 0
    names: set[str] = set()
    for sub in topology.subtopologies:
        names.update(sub.source_topics)
        names.update(t.name for t in sub.changelog_topics)
        names.update(t.name for t in sub.repartition_source_topics)
    existing = sorted((name, topics[name].partitions) for name in names if name in topics)
    digest = hashlib.sha256(repr(existing).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)

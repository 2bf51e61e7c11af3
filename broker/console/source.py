"""The console's one door into the broker: what it reads and the few actions it may take.

Everything the pages, the JSON API, the history sampler and /metrics know comes through
`BrokerSource`, so the rest of `strom.broker.console` never touches broker internals and can be
tested against a fake. Reads are in-memory only (offsets, segment sizes and indexes the log
already keeps); the two that touch a segment file (a batch position for lag in bytes, the record
browser) are bounded and cached or run off the event loop by their callers.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol

from strom.protocol.errors import ErrorCode

from ..config import TOPIC_CONFIGS

if TYPE_CHECKING:
    from strom.broker.config import BrokerConfig
    from strom.broker.connection_quota import ConnectionQuotas
    from strom.broker.coordinator.group.coordinator import GroupCoordinator
    from strom.broker.metadata.admin import AdminManager
    from strom.broker.metadata.cache import MetadataCache
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.replication_quota import ReplicationQuota
    from strom.broker.stats import BrokerStats
    from strom.broker.topics import TopicInfo

OFFSETS_TOPIC = "__consumer_offsets"
_POSITION_CACHE = 20_000


def strom_version() -> str:
    try:
        return metadata.version("strom")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    local: bool  # this broker hosts a replica (offsets and sizes are known)
    log_start_offset: int = -1
    log_end_offset: int = -1
    high_watermark: int = -1
    segments: int = 0
    size: int = 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas) or bool(self.offline_replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0 or self.leader in self.offline_replicas


class ConsoleError(Exception):
    """An action refused, with Kafka's error name where Kafka would refuse it."""

    def __init__(self, code: str, message: str, status: int = 409):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


class TopicsView(Protocol):
    """The topic metadata as this broker knows it (standalone: the topic store; in a cluster: the
    ZooKeeper cache)."""

    topics: Mapping[str, TopicInfo]


class ClusterView(Protocol):
    """A cluster member's view of the cluster: registered brokers and partition assignments."""

    brokers: Mapping[int, Any]  # broker id -> its registration (endpoints, timestamp_ms)
    assignments: Mapping[str, Any]  # topic -> its assignment (partitions: index -> replicas)


class ClusterMembership(Protocol):
    @property
    def view(self) -> ClusterView: ...


class ConsoleBroker(Protocol):
    """What the console reads of the broker, and the one action (delete a topic) it asks of it."""

    node_id: int
    config: BrokerConfig
    stats: BrokerStats
    started: float  # time.monotonic() at the start
    bound: Sequence[Any]  # the bound listeners, each with its ``advertised`` address
    topics: TopicsView | None  # None until the metadata is open
    cluster: ClusterMembership | None  # None standalone
    replicas: ReplicaManager
    groups: GroupCoordinator | None
    connection_quotas: ConnectionQuotas
    leader_quota: ReplicationQuota
    follower_quota: ReplicationQuota
    metadata: MetadataCache  # brokers, controller, partitions and topic configs as this broker knows them
    admin: AdminManager  # the one action: deleting a topic


class BrokerSource:
    def __init__(self, broker: ConsoleBroker):
        self._broker = broker
        self._positions: OrderedDict = OrderedDict()
        self.version = strom_version()

    # ------------------------------------------------------------------ identity
    @property
    def node_id(self) -> int:
        return self._broker.node_id

    @property
    def config(self):
        return self._broker.config

    @property
    def stats(self):
        return self._broker.stats

    @property
    def clustered(self) -> bool:
        return self._broker.cluster is not None

    def cluster_id(self) -> str:
        return self._broker.metadata.cluster_id() if self._broker.topics is not None else ""

    def controller_id(self) -> int:
        return self._broker.metadata.controller_id()

    def uptime_s(self) -> float:
        return time.monotonic() - self._broker.started

    def listeners(self) -> list[str]:
        return [str(b.advertised) for b in self._broker.bound]

    def listener_names(self) -> list[str]:
        return [listener.name for listener in self._broker.config.listeners]

    def connection_quota_metrics(self) -> dict[str, dict[str, float]]:
        """Per listener: accept rate, throttle and blocked times, refused and closed connections."""
        return self._broker.connection_quotas.listener_metrics()

    def replication_byte_rates(self) -> dict[str, float]:
        """Bytes per second of throttled replication traffic, as leader and as follower."""
        import trio

        now = trio.current_time()
        broker = self._broker
        return {"leader": broker.leader_quota.sensor.rate(now), "follower": broker.follower_quota.sensor.rate(now)}

    def live_brokers(self) -> list[tuple[int, str, int, str | None]]:
        return self._broker.metadata.live_brokers()

    def registrations(self) -> dict[int, tuple[list[str], int]]:
        """Cluster members' registrations: (advertised listeners, registered at, epoch ms)."""
        cluster = self._broker.cluster
        if cluster is None:
            return {}
        out = {}
        for broker_id, info in cluster.view.brokers.items():
            out[broker_id] = ([f"{e.listener}://{e.host}:{e.port}" for e in info.endpoints], info.timestamp_ms)
        return out

    def known_broker_ids(self) -> set[int]:
        """Every broker named as a replica anywhere, live or not."""
        ids = {b[0] for b in self.live_brokers()}
        cluster = self._broker.cluster
        if cluster is not None:
            for assignment in cluster.view.assignments.values():
                for replicas in assignment.partitions.values():
                    ids.update(replicas)
        return ids

    # ------------------------------------------------------------------ topics and partitions
    def topic_names(self) -> list[str]:
        topics = self._broker.topics
        return sorted(topics.topics) if topics is not None else []

    def topic(self, name: str):
        topics = self._broker.topics
        return topics.topics.get(name) if topics is not None else None

    def partitions(self, name: str) -> Iterator[PartitionInfo]:
        info = self.topic(name)
        if info is None:
            return
        for index in range(info.partitions):
            found = self.partition(name, index)
            if found is not None:
                yield found

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        broker = self._broker
        view = broker.metadata.partition_view(topic, index)
        local = broker.replicas.partition(topic, index)
        if view is None and local is None:
            return None
        if view is None:
            view = (local.leader_id, local.leader_epoch, local.replicas, local.isr, [])
        leader, epoch, replicas, isr, offline = view
        info = PartitionInfo(topic, index, leader, epoch, list(replicas), list(isr), list(offline), local is not None)
        if local is not None:
            plog = local.log
            info.log_start_offset = plog.log_start_offset
            info.log_end_offset = plog.log_end_offset
            info.high_watermark = plog.high_watermark
            segments = plog.segments
            info.segments = len(segments)
            info.size = sum(s.size for s in segments)
        return info

    def offline_partition_count(self) -> int:
        """Partitions with no live leader, from the cluster's partition states (no log reads)."""
        broker = self._broker
        if broker.cluster is None:
            return 0
        live = broker.cluster.view.brokers
        count = 0
        for name in self.topic_names():
            info = self.topic(name)
            for index in range(info.partitions):
                view = broker.metadata.partition_view(name, index)
                if view is None or view[0] < 0 or view[0] not in live:
                    count += 1
        return count

    def local_partition(self, topic: str, index: int):
        return self._broker.replicas.partition(topic, index)

    def local_partitions(self):
        return list(self._broker.replicas.partitions.values())

    def topic_configs(self, name: str) -> list[dict]:
        info = self.topic(name)
        out = []
        for key in TOPIC_CONFIGS:
            value, is_default = self._broker.metadata.topic_config_value(info, key)
            out.append({"name": key, "value": value, "default": is_default})
        return out

    def topic_setting(self, name: str, key: str):
        return self._broker.metadata.topic_setting(name, key)

    def bytes_between(self, partition, start: int, end: int) -> int:
        """Bytes of the batches from the one holding ``start`` up to the one holding ``end``
        (``end`` = the log end: to the end of the log), from segment positions."""
        plog = partition.log
        start = max(start, plog.log_start_offset)
        if start >= end:
            return 0
        return max(0, self._position(plog, end) - self._position(plog, start))

    def _position(self, plog, offset: int) -> int:
        """Byte position of ``offset``'s batch counted from the start of the first segment.

        Uses the in-memory segment sizes and offset index; the header scan from the nearest
        index entry (bounded by index.interval.bytes) is cached per segment and offset."""
        segments = plog.segments
        before = 0
        for segment in segments:
            if offset < segment.next_offset or segment is segments[-1]:
                if offset >= segment.next_offset:
                    return before + segment.size
                key = (id(segment), segment.base_offset, offset)
                cached = self._positions.get(key)
                if cached is None:
                    try:
                        found = segment.translate_offset(offset)
                    except Exception:
                        found = None
                    cached = found[0] if found is not None else segment.size
                    self._positions[key] = cached
                    if len(self._positions) > _POSITION_CACHE:
                        self._positions.popitem(last=False)
                return before + cached
            before += segment.size
        return before

    # ------------------------------------------------------------------ groups
    def groups(self) -> list:
        coordinator = self._broker.groups
        if coordinator is None:
            return []
        return [g for g in coordinator.groups.values() if g.state.value != "Dead"]

    def group(self, group_id: str):
        coordinator = self._broker.groups
        return coordinator.get(group_id) if coordinator is not None else None

    def consumer_groups(self) -> list:
        """KIP-848 (consumer protocol) groups coordinated here, beside the classic ones."""
        kip848 = getattr(self._broker.groups, "consumer", None)
        return list(kip848.groups.values()) if kip848 is not None else []

    def consumer_group(self, group_id: str):
        kip848 = getattr(self._broker.groups, "consumer", None)
        return kip848.get(group_id) if kip848 is not None else None

    def share_groups(self) -> list:
        """Share groups (KIP-932) coordinated here."""
        share = getattr(self._broker.groups, "share", None)
        return sorted(share.groups.values(), key=lambda g: g.group_id) if share is not None else []

    def share_partitions(self) -> list[tuple[str, str, int, Any]]:
        """(group, topic, partition, SharePartition) of the share partitions this broker leads."""
        manager = getattr(self._broker, "share", None)
        if manager is None:
            return []
        return [(g, t, i, sp) for (g, t, i), sp in sorted(manager.partitions.items()) if sp.initialized]

    def share_metrics(self) -> Any:
        """The share-partition manager's counters (ShareMetrics), or None."""
        manager = getattr(self._broker, "share", None)
        return manager.metrics if manager is not None else None

    def consumer_session_timeout_ms(self) -> int:
        return self._broker.groups.consumer.settings.session_timeout_ms

    def topic_name_by_id(self, topic_id: bytes) -> str | None:
        return self._broker.metadata.topic_name_by_id(topic_id)

    def group_coordinator_id(self, group_id: str) -> int | None:
        coordinator = self._broker.groups
        return coordinator.coordinator_of(group_id) if coordinator is not None else None

    def now(self) -> float:
        """The group coordinator's clock (trio's), in which heartbeat deadlines are kept."""
        import trio

        return trio.current_time()

    # ------------------------------------------------------------------ actions
    def group_state(self, group_id: str, group=None) -> tuple[str, int]:
        """(state, member count) of a group of either protocol."""
        kip848 = self.consumer_group(group_id)
        group = group if group is not None else self.group(group_id)
        if kip848 is not None and (kip848.members or group is None or not group.members):
            return kip848.state, len(kip848.members)
        if group is None:
            return "Dead", 0
        return group.state.value, len(group.members)

    def _coordinated_group(self, group_id: str, must_exist: bool = True):
        coordinator = self._broker.groups
        error = coordinator.group_error(group_id)
        if error is ErrorCode.NOT_COORDINATOR:
            other = self.group_coordinator_id(group_id)
            raise ConsoleError(
                "NOT_COORDINATOR", f"Group {group_id} is coordinated by broker {other}; use that broker's console."
            )
        if error is not None:
            raise ConsoleError(error.name, f"The coordinator cannot act on group {group_id} now ({error.name}).", 503)
        group = coordinator.get(group_id)
        if group is None and self.consumer_group(group_id) is None and must_exist:
            raise ConsoleError("GROUP_ID_NOT_FOUND", f"Group {group_id} does not exist.", 404)
        return coordinator, group

    def delete_group(self, group_id: str) -> None:
        coordinator, group = self._coordinated_group(group_id)
        state, members = self.group_state(group_id, group)
        code = coordinator.delete_group(group_id)
        if code is ErrorCode.NON_EMPTY_GROUP:
            raise ConsoleError(
                code.name,
                f"Group {group_id} is {state} with {members} member(s); only an empty "
                f"group can be deleted (as Kafka's DeleteGroups).",
            )
        if code is not ErrorCode.NONE:
            raise ConsoleError(code.name, f"Deleting group {group_id} failed: {code.name}.")

    def reset_offsets(self, group_id: str, targets: dict[tuple[str, int], int]) -> None:
        coordinator, group = self._coordinated_group(group_id, must_exist=False)
        state, _ = self.group_state(group_id, group)
        if state != "Empty":
            raise ConsoleError(
                "NON_EMPTY_GROUP",
                f"Group {group_id} is {state}; offsets can only be "
                f"reset while it is empty (stop its consumers first), as kafka-consumer-groups "
                f"--reset-offsets requires.",
            )
        from strom.broker.coordinator.group.records import CommittedOffset

        offsets = [(t, p, CommittedOffset(o, -1, "", -1, -1)) for (t, p), o in targets.items()]
        results = coordinator.commit_offsets(group_id, "", None, -1, -1, offsets)
        failed = [r for r in results if r.error is not ErrorCode.NONE]
        if failed:
            raise ConsoleError(
                failed[0].error.name,
                f"Resetting {failed[0].topic}-{failed[0].partition} failed: {failed[0].error.name}.",
            )

    def remove_static_member(self, group_id: str, instance_id: str) -> None:
        coordinator, group = self._coordinated_group(group_id)
        if self.consumer_group(group_id) is not None:
            raise ConsoleError(
                "UNSUPPORTED_VERSION",
                f"Group {group_id} uses the consumer protocol (KIP-848); its "
                f"static members leave through their own heartbeat and are not removed from the "
                f"console.",
                409,
            )
        _, results = coordinator.leave_group(group_id, [("", instance_id)])
        code = results[0] if results else ErrorCode.UNKNOWN_MEMBER_ID
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            raise ConsoleError(code.name, f"Group {group_id} has no static member with instance id {instance_id}.", 404)
        if code is not ErrorCode.NONE:
            raise ConsoleError(code.name, f"Removing {instance_id} from {group_id} failed: {code.name}.")

    def delete_records(self, topic: str, index: int, offset: int) -> int:
        """Move the log start of a partition led here to ``offset`` (-1: the high watermark)."""
        info = self.topic(topic)
        if info is None:
            raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {topic} does not exist.", 404)
        partition = self._broker.replicas.partition(topic, index)
        if partition is None or not partition.is_leader:
            view = self._broker.metadata.partition_view(topic, index)
            if view is None:
                raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{index} does not exist.", 404)
            raise ConsoleError(
                "NOT_LEADER_OR_FOLLOWER", f"{topic}-{index} is led by broker {view[0]}; use that broker's console."
            )
        if "delete" not in self._broker.metadata.topic_setting(topic, "cleanup.policy"):
            raise ConsoleError(
                "POLICY_VIOLATION",
                f"Records of partitions of topic {topic} with cleanup.policy=compact cannot be deleted.",
            )
        hw = partition.high_watermark
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise ConsoleError(
                "OFFSET_OUT_OF_RANGE",
                f"Offset {offset} is outside [0, {hw}] (the high watermark "
                f"of {topic}-{index}); records can be deleted only below it.",
            )
        partition.log.maybe_increment_log_start_offset(offset)
        self._broker.replicas.notify_data()
        return partition.log.log_start_offset

    async def delete_topic(self, name: str) -> None:
        from ..errors import TopicError

        info = self.topic(name)
        if info is not None and info.internal:
            raise ConsoleError(
                "INVALID_TOPIC_EXCEPTION", f"{name} is an internal topic; it is not deleted from the console."
            )
        try:
            await self._broker.admin.delete_topic(name)
        except TopicError as exc:
            raise ConsoleError(
                exc.code.name, exc.message, 404 if exc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else 409
            ) from None

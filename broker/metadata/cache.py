"""The metadata cache: topics, partitions, leaders and brokers as this broker knows them (Kafka's
MetadataCache). A standalone broker knows them from its own metadata file and replicas; a
ZooKeeper cluster member from its last read of the znodes (`ClusterView`), refreshed by the
member's reconcile loop. API handlers read only this port, so they never ask which one it is."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from strom.broker import context
from strom.broker.config import BrokerConfig, Listener, format_value, parse_topic_config
from strom.broker.topics import TopicInfo, TopicStore
from strom.broker.zk.zkdata import BrokerInfo, TopicAssignment, topic_id_from_text

if TYPE_CHECKING:
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.zk.zkclient import VersionedPartitionState
    from strom.broker.zk.zkdata import PartitionState
    from strom.storage.log_manager import LogManager

# (leader, leader epoch, replicas, isr, offline replicas)
PartitionView = tuple[int, int, list[int], list[int], list[int]]
# (id, host, port, rack)
BrokerEndpoint = tuple[int, str, int, "str | None"]


class MetadataCache(Protocol):
    """What the API handlers and services read of the cluster's metadata."""

    @property
    def is_cluster(self) -> bool: ...

    def cluster_id(self) -> str: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_names(self) -> list[str]: ...

    def all_topics(self) -> list[TopicInfo]: ...

    def topic_by_id(self, topic_id: bytes) -> TopicInfo | None: ...

    def topic_name_by_id(self, topic_id: bytes) -> str | None: ...

    def partition_count(self, topic: str) -> int | None: ...

    def listed_partitions(self, info: TopicInfo) -> int: ...

    def topic_setting(self, topic: str, key: str) -> object: ...

    def topic_config_value(self, info: TopicInfo, key: str) -> tuple[str | None, bool]: ...

    def partition_view(self, topic: str, index: int) -> PartitionView | None: ...

    def leader_of(self, topic: str, index: int) -> int | None: ...

    def live_brokers(self, listener_name: str | None = None) -> list[BrokerEndpoint]: ...

    def broker_endpoint(self, broker_id: int, listener_name: str | None = None) -> tuple[str, int] | None: ...

    def controller_id(self) -> int: ...

    def hosted_replica_offline(self, topic: str, index: int) -> bool: ...

    def client_quotas(self) -> dict[tuple, dict[str, float]]: ...

    def broker_configs(self) -> dict[str, dict[str, str]]: ...


class TopicsSource(Protocol):
    """The shape both topic tables share: the standalone `TopicStore` and the cluster's `TopicCache`."""

    cluster_id: str
    topics: dict[str, TopicInfo]
    by_id: dict[bytes, TopicInfo]
    quotas: dict[tuple, dict[str, float]]
    broker_configs: dict[str, dict[str, str]]
    group_configs: dict[str, dict[str, str]]


class _TopicTable(ABC):
    """What both caches answer the same way from their topic table and the broker's config."""

    def __init__(self, config: BrokerConfig, topics: TopicsSource) -> None:
        self.config = config
        self.topics = topics
        self._settings: dict[tuple[str, str], tuple[dict[str, str], object]] = {}

    def cluster_id(self) -> str:
        return self.topics.cluster_id

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.topics.get(name)

    def topic_names(self) -> list[str]:
        return list(self.topics.topics)

    def all_topics(self) -> list[TopicInfo]:
        return list(self.topics.topics.values())

    def topic_by_id(self, topic_id: bytes) -> TopicInfo | None:
        return self.topics.by_id.get(topic_id)

    def topic_name_by_id(self, topic_id: bytes) -> str | None:
        info = self.topics.by_id.get(topic_id)
        return info.name if info is not None else None

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.topics.get(topic)
        return None if info is None else info.partitions

    def listed_partitions(self, info: TopicInfo) -> int:
        """How many of the topic's partitions Metadata lists: all of them here."""
        return info.partitions

    def topic_config_value(self, info: TopicInfo, key: str) -> tuple[str | None, bool]:
        """(value as Kafka shows it, whether it is the broker default)."""
        if key in info.configs:
            return info.configs[key], False
        return format_value(self.config.topic_default(key)), True

    def topic_setting(self, topic: str, key: str) -> object:
        """A topic config's effective, parsed value (override or broker default); cached per
        topic until its configs change, since Produce asks on every acks=all request."""
        info = self.topics.topics[topic]
        cached = self._settings.get((topic, key))
        if cached is not None and cached[0] is info.configs:
            return cached[1]
        raw = info.configs.get(key)
        value = parse_topic_config(key, raw) if raw is not None else self.config.topic_default(key)
        self._settings[(topic, key)] = (info.configs, value)
        return value

    def client_quotas(self) -> dict[tuple, dict[str, float]]:
        return self.topics.quotas

    def broker_configs(self) -> dict[str, dict[str, str]]:
        return self.topics.broker_configs

    def _listener(self, listener_name: str | None) -> str:
        return listener_name or context.listener_name.get() or self.config.listeners[0].name

    @abstractmethod
    def live_brokers(self, listener_name: str | None = None) -> list[BrokerEndpoint]: ...

    @abstractmethod
    def partition_view(self, topic: str, index: int) -> PartitionView | None: ...

    @abstractmethod
    def controller_id(self) -> int: ...

    def leader_of(self, topic: str, index: int) -> int | None:
        view = self.partition_view(topic, index)
        return None if view is None or view[0] < 0 else view[0]

    def broker_endpoint(self, broker_id: int, listener_name: str | None = None) -> tuple[str, int] | None:
        for node, host, port, _ in self.live_brokers(listener_name):
            if node == broker_id:
                return host, port
        return None


class StandaloneMetadataCache(_TopicTable):
    """A single broker: its metadata file's topics, every partition led here."""

    is_cluster = False

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicStore,
        replicas: ReplicaManager,
        logs: LogManager,
        advertised_for: Callable[[str], Listener],
    ) -> None:
        super().__init__(config, topics)
        self.store = topics
        self.replicas = replicas
        self.logs = logs
        self._advertised_for = advertised_for

    def partition_view(self, topic: str, index: int) -> PartitionView | None:
        partition = self.replicas.partition(topic, index)
        if partition is None:
            return None
        offline = [self.config.node_id] if partition.log.offline is not None else []
        return partition.leader_id, partition.leader_epoch, partition.replicas, partition.isr, offline

    def live_brokers(self, listener_name: str | None = None) -> list[BrokerEndpoint]:
        """This broker at its advertised address on ``listener_name`` (default: the current
        connection's listener, outside of one the first)."""
        endpoint = self._advertised_for(self._listener(listener_name))
        return [(self.config.node_id, endpoint.host, endpoint.port, self.config["broker.rack"])]

    def controller_id(self) -> int:
        return self.config.node_id

    def hosted_replica_offline(self, topic: str, index: int) -> bool:
        """Every partition is hosted here: one without a replica is in a log dir that was offline
        at start (KAFKA_STORAGE_ERROR)."""
        return self.replicas.partition(topic, index) is None and bool(self.logs.offline_dirs)


@dataclass
class ClusterView:
    """One consistent-enough read of the cluster's znodes."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    # each live broker's epoch (the czxid of its registration znode): a new one is a new registration
    broker_epochs: dict[int, int] = field(default_factory=dict)
    # live brokers whose registration is the first after an unclean shutdown (BrokerInfo.unclean_shutdown)
    unclean_starts: set[int] = field(default_factory=set)
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    states: dict[tuple[str, int], VersionedPartitionState] = field(default_factory=dict)
    to_delete: list[str] = field(default_factory=list)
    controller_id: int = -1
    # replicas in failed log dirs (from /log_dir_event_notification): (topic, partition) -> brokers
    offline_replicas: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    quotas: dict[tuple, dict[str, float]] = field(default_factory=dict)  # client quotas (/config/users, /clients)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # /config/brokers ("" = <default>)
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # /config/groups: group id -> configs

    def unclean_allowed(self, topic: str, default: bool = False) -> bool:
        value = self.configs.get(topic, {}).get("unclean.leader.election.enable")
        return default if value is None else value.lower() == "true"


class TopicCache:
    """The cluster's topics as the handlers see them (the same shape as the standalone store)."""

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.topics: dict[str, TopicInfo] = {}
        self.by_id: dict[bytes, TopicInfo] = {}
        self.quotas: dict[tuple, dict[str, float]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.group_configs: dict[str, dict[str, str]] = {}

    def replace(self, view: ClusterView) -> None:
        self.quotas = view.quotas
        self.broker_configs = view.broker_configs
        self.group_configs = view.group_configs
        topics = {}
        for name, assignment in view.assignments.items():
            if name in view.to_delete:
                continue
            topic_id = topic_id_from_text(assignment.topic_id) if assignment.topic_id else bytes(16)
            topics[name] = TopicInfo(name, topic_id, len(assignment.partitions), dict(view.configs.get(name, {})))
        self.topics = topics
        self.by_id = {t.topic_id: t for t in topics.values()}


class ZkMetadataCache(_TopicTable):
    """A ZooKeeper cluster member: the last `ClusterView` its reconcile loop read."""

    is_cluster = True

    def __init__(self, config: BrokerConfig, cluster_id: str) -> None:
        super().__init__(config, TopicCache(cluster_id))
        self.cache: TopicCache = self.topics  # type: ignore[assignment]
        self.view = ClusterView()

    def update(self, view: ClusterView) -> None:
        """The reconcile loop read the cluster again."""
        self.view = view
        self.cache.replace(view)

    def partition_state(self, topic: str, index: int) -> PartitionState | None:
        versioned = self.view.states.get((topic, index))
        return versioned.state if versioned else None

    def listed_partitions(self, info: TopicInfo) -> int:
        """The partitions 0..n-1 whose state the controller has written: Metadata lists those
        only, as a ZooKeeper-mode Kafka broker's cache holds a partition once the controller sent
        its state (a topic being created has none yet; one being grown lists its old count)."""
        states = self.view.states
        count = 0
        while count < info.partitions and (info.name, count) in states:
            count += 1
        return count

    def partition_view(self, topic: str, index: int) -> PartitionView | None:
        state = self.partition_state(topic, index)
        assignment = self.view.assignments.get(topic)
        if state is None or assignment is None or index not in assignment.partitions:
            return None
        replicas = list(assignment.partitions[index])
        live = self.view.brokers
        return state.leader, state.leader_epoch, replicas, list(state.isr), [r for r in replicas if r not in live]

    def live_brokers(self, listener_name: str | None = None) -> list[BrokerEndpoint]:
        """Live brokers at their endpoint on ``listener_name`` (default as standalone); brokers
        without that listener are left out, as Kafka does."""
        listener_name = self._listener(listener_name)
        out = []
        for broker_id, info in sorted(self.view.brokers.items()):
            endpoint = info.endpoint(listener_name) if listener_name else info.endpoints[0]
            if endpoint is None:
                continue
            out.append((broker_id, endpoint.host, endpoint.port, info.rack))
        return out

    def controller_id(self) -> int:
        return self.view.controller_id

    def hosted_replica_offline(self, topic: str, index: int) -> bool:
        """Never said in a cluster: a partition without a replica here is another broker's to
        lead (NOT_LEADER_OR_FOLLOWER sends the client to it; the controller moves leadership off
        replicas in failed dirs)."""
        return False

    def replication_factor(self, name: str) -> int:
        """The replica count of the topic's first partition (what new partitions get, as in Kafka)."""
        assignment = self.view.assignments[name]
        return len(next(iter(assignment.partitions.values())))

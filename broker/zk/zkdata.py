"""ZooKeeper-era Kafka znodes: their paths and their JSON, pure code (no kazoo, no I/O).

Every znode kind is a namespace class with ``path(...)``, ``encode(...) -> bytes`` and
``decode(bytes) -> value``. The bytes are what a ZooKeeper-mode Kafka broker writes: compact
JSON (no spaces, UTF-8), keys in the order Kafka's own writes show up in ZooKeeper, so tools
that read a Kafka cluster's znodes read Strom's the same way. Decoders accept any key order
and raise :class:`ZkDataError` on anything malformed.

Layout (all paths relative to the chroot)::

    /brokers/ids/<id>                         BrokerIdZNode       ephemeral, broker registration
    /brokers/topics/<t>                       TopicZNode          replica assignment, topic id
    /brokers/topics/<t>/partitions/<p>/state  TopicPartitionStateZNode  leader and ISR
    /controller                               ControllerZNode     ephemeral, the active controller
    /controller_epoch                         ControllerEpochZNode  plain decimal text
    /config/topics/<t>                        ConfigEntityZNode   topic config overrides
    /config/groups/<g>                        (quotas_zk)         group configs (Strom's; Kafka's are in KRaft)
    /config/changes/config_change_<seq>       ConfigEntityChangeNotificationSequenceZNode
    /admin/delete_topics/<t>                  DeleteTopicsTopicZNode  empty marker
    /isr_change_notification/isr_change_<seq> IsrChangeNotificationSequenceZNode
    /cluster/id                               ClusterIdZNode
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NO_LEADER = -1
"""The ``leader`` value of a partition without a leader."""

INITIAL_CONTROLLER_EPOCH = 0
"""What ``/controller_epoch`` holds before the first controller is elected."""

LEADER_RECOVERED = 0
LEADER_RECOVERING = 1
"""``leader_recovery_state`` values: Kafka writes the key only when it is RECOVERING."""

DEFAULT_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ZkDataError(ValueError):
    """A znode's content (or a name used to build a path) is malformed."""


# --- helpers ----------------------------------------------------------------------------------


def _dumps(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads_object(data: bytes | None, what: str) -> dict[str, Any]:
    if data is None or len(data) == 0:
        raise ZkDataError(f"{what}: znode has no data")
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkDataError(f"{what}: not JSON: {bytes(data)[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise ZkDataError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _field(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if key not in doc:
        raise ZkDataError(f"{what}: missing {key!r}")
    return _typed(doc[key], kind, f"{what}: {key!r}")


def _typed(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    # bool is an int subclass in Python; JSON true is never a valid integer field here.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ZkDataError(f"{what} must be {_kind_name(kind)}, got a boolean")
    if not isinstance(value, kind):
        raise ZkDataError(f"{what} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    items = _typed(value, list, what)
    return tuple(_typed(v, int, f"{what} item") for v in items)


def _int_text(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise ZkDataError(f"{what} must be an integer, got {text!r}") from exc


def segment(name: str, what: str = "name") -> str:
    """Check that ``name`` is usable as one znode path segment and return it."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\x00" in name:
        raise ZkDataError(f"{what} {name!r} cannot be a znode name")
    return name


def _broker_segment(broker_id: int) -> str:
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise ZkDataError(f"broker id must be a non-negative integer, got {broker_id!r}")
    return str(broker_id)


# --- topic ids --------------------------------------------------------------------------------


def new_topic_id() -> str:
    """A random topic id in Kafka's text form (URL-safe base64 of 16 bytes, no padding)."""
    return topic_id_to_text(uuid.uuid4().bytes)


def topic_id_to_text(raw: bytes) -> str:
    if len(raw) != 16:
        raise ZkDataError(f"a topic id has 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def topic_id_from_text(text: str) -> bytes:
    """The 16 bytes of a topic id written as Kafka's 22-character text."""
    if not isinstance(text, str) or len(text) != 22:
        raise ZkDataError(f"topic id must be 22 characters of base64, got {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError as exc:
        raise ZkDataError(f"topic id {text!r} is not URL-safe base64") from exc
    if topic_id_to_text(raw) != text:
        raise ZkDataError(f"topic id {text!r} is not canonical base64")
    return raw


# --- fixed paths ------------------------------------------------------------------------------


class Paths:
    """The persistent parent znodes a ZooKeeper-mode cluster needs (created at startup)."""

    BROKERS = "/brokers"
    BROKER_IDS = "/brokers/ids"
    TOPICS = "/brokers/topics"
    SEQID = "/brokers/seqid"
    CONFIG = "/config"
    CONFIG_TOPICS = "/config/topics"
    CONFIG_CHANGES = "/config/changes"
    ADMIN = "/admin"
    DELETE_TOPICS = "/admin/delete_topics"
    ISR_CHANGES = "/isr_change_notification"
    LOG_DIR_EVENTS = "/log_dir_event_notification"
    CLUSTER = "/cluster"

    PERSISTENT = (
        BROKER_IDS,
        TOPICS,
        SEQID,
        CONFIG_TOPICS,
        CONFIG_CHANGES,
        DELETE_TOPICS,
        ISR_CHANGES,
        CLUSTER,
        LOG_DIR_EVENTS,
    )


class BrokerIdsZNode:
    """``/brokers/ids``: persistent parent; its children are the live brokers' ids."""

    @staticmethod
    def path() -> str:
        return Paths.BROKER_IDS

    @staticmethod
    def decode_children(children: Iterable[str]) -> list[int]:
        """Sorted broker ids from the child names; non-numeric names are malformed."""
        return sorted(_int_text(c, "broker id znode name") for c in children)


# --- /brokers/ids/<id> ------------------------------------------------------------------------


@dataclass(frozen=True)
class EndPoint:
    """One advertised listener: ``<listener>://<host>:<port>`` plus its security protocol."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, protocols: Mapping[str, str]) -> EndPoint:
        listener, sep, address = text.partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not listener or not colon:
            raise ZkDataError(f"endpoint {text!r} is not LISTENER://host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        port = _int_text(port_text, f"endpoint {text!r} port")
        if listener not in protocols:
            raise ZkDataError(f"endpoint {text!r}: listener {listener!r} has no security protocol")
        return cls(listener, host, port, protocols[listener])


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration as stored in ``/brokers/ids/<id>`` (JSON version 5 when written).

    ``features`` maps a feature name to ``{"min_version": n, "max_version": m}``.
    ``unclean_shutdown`` (Strom's, written only when true): the first registration of a broker
    process that started without the clean-shutdown marker in its log dirs (after a crash, or on
    a new disk), which may lack records its earlier life had not flushed (KIP-966's clean
    shutdown detection; Kafka's KRaft registration carries the same fact as its previous broker
    epoch).
    """

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    features: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    version: int = 5
    unclean_shutdown: bool = False

    def endpoint(self, listener: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


class BrokerIdZNode:
    """``/brokers/ids/<id>``: ephemeral; JSON like
    ``{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},
    "endpoints":["PLAINTEXT://h:9092"],"jmx_port":-1,"port":9092,"host":"h","version":5,
    "timestamp":"1707276552023"}`` (``rack`` only when set). The top-level host and port are the
    first PLAINTEXT endpoint's (null and -1 without one), for old clients.
    """

    VERSION = 5

    @staticmethod
    def path(broker_id: int) -> str:
        return f"{Paths.BROKER_IDS}/{_broker_segment(broker_id)}"

    @staticmethod
    def encode(info: BrokerInfo) -> bytes:
        plaintext = next((e for e in info.endpoints if e.security_protocol == "PLAINTEXT"), None)
        doc: dict[str, Any] = {
            "features": {name: dict(rng) for name, rng in info.features.items()},
            "listener_security_protocol_map": {e.listener: e.security_protocol for e in info.endpoints},
            "endpoints": [e.connection_string for e in info.endpoints],
            "jmx_port": info.jmx_port,
            "port": plaintext.port if plaintext else -1,
            "host": plaintext.host if plaintext else None,
        }
        if info.rack is not None:
            doc["rack"] = info.rack
        if info.unclean_shutdown:
            doc["unclean_shutdown"] = True
        doc["version"] = BrokerIdZNode.VERSION
        doc["timestamp"] = str(info.timestamp_ms)
        return _dumps(doc)

    @staticmethod
    def decode(broker_id: int, data: bytes) -> BrokerInfo:
        what = f"broker {broker_id} registration"
        doc = _loads_object(data, what)
        version = _field(doc, "version", int, what)
        if version < 1:
            raise ZkDataError(f"{what}: unsupported version {version}")
        endpoints = BrokerIdZNode._endpoints(doc, version, what)
        rack = doc.get("rack")
        if rack is not None:
            _typed(rack, str, f"{what}: 'rack'")
        timestamp = doc.get("timestamp", "0")
        unclean = _typed(doc.get("unclean_shutdown", False), bool, f"{what}: 'unclean_shutdown'")
        return BrokerInfo(
            broker_id=broker_id,
            endpoints=endpoints,
            rack=rack,
            jmx_port=_field(doc, "jmx_port", int, what),
            timestamp_ms=_int_text(_typed(timestamp, str, f"{what}: 'timestamp'"), f"{what}: timestamp"),
            features=BrokerIdZNode._features(doc.get("features", {}), what),
            version=version,
            unclean_shutdown=unclean,
        )

    @staticmethod
    def _endpoints(doc: Mapping[str, Any], version: int, what: str) -> tuple[EndPoint, ...]:
        if version == 1:
            host = _field(doc, "host", str, what)
            return (EndPoint("PLAINTEXT", host, _field(doc, "port", int, what), "PLAINTEXT"),)
        raw_map = doc.get("listener_security_protocol_map")
        if raw_map is None:
            protocols = {p: p for p in DEFAULT_SECURITY_PROTOCOLS}
        else:
            protocols = {
                _typed(k, str, f"{what}: listener"): _typed(v, str, f"{what}: security protocol")
                for k, v in _typed(raw_map, dict, f"{what}: 'listener_security_protocol_map'").items()
            }
        texts = _field(doc, "endpoints", list, what)
        return tuple(EndPoint.parse(_typed(t, str, f"{what}: endpoint"), protocols) for t in texts)

    @staticmethod
    def _features(raw: Any, what: str) -> dict[str, dict[str, int]]:
        features = _typed(raw, dict, f"{what}: 'features'")
        return {
            name: {
                label: _typed(v, int, f"{what}: feature {name!r} {label!r}")
                for label, v in _typed(rng, dict, f"{what}: feature {name!r}").items()
            }
            for name, rng in features.items()
        }


# --- /brokers/topics/<t> ----------------------------------------------------------------------


@dataclass(frozen=True)
class TopicAssignment:
    """A topic's replica assignment: partition -> replicas in preference order (leader first)."""

    partitions: Mapping[int, tuple[int, ...]]
    topic_id: str | None = None
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


class TopicZNode:
    """``/brokers/topics/<t>``: JSON version 3, e.g. ``{"removing_replicas":{},
    "partitions":{"0":[1,2,3]},"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ","adding_replicas":{},
    "version":3}``; partition keys are decimal strings, ``topic_id`` is absent for topics
    created before topic ids existed.
    """

    VERSION = 3

    @staticmethod
    def path(topic: str) -> str:
        return f"{Paths.TOPICS}/{segment(topic, 'topic')}"

    @staticmethod
    def encode(assignment: TopicAssignment) -> bytes:
        if assignment.topic_id is not None:
            topic_id_from_text(assignment.topic_id)
        doc: dict[str, Any] = {
            "removing_replicas": TopicZNode._replica_map(assignment.removing_replicas),
            "partitions": TopicZNode._replica_map(assignment.partitions),
        }
        if assignment.topic_id is not None:
            doc["topic_id"] = assignment.topic_id
        doc["adding_replicas"] = TopicZNode._replica_map(assignment.adding_replicas)
        doc["version"] = TopicZNode.VERSION
        return _dumps(doc)

    @staticmethod
    def decode(data: bytes) -> TopicAssignment:
        what = "topic assignment"
        doc = _loads_object(data, what)
        _field(doc, "version", int, what)
        topic_id = doc.get("topic_id")
        if topic_id is not None:
            topic_id_from_text(_typed(topic_id, str, f"{what}: 'topic_id'"))
        return TopicAssignment(
            partitions=TopicZNode._parse_replica_map(doc.get("partitions", {}), f"{what}: partitions"),
            topic_id=topic_id,
            adding_replicas=TopicZNode._parse_replica_map(doc.get("adding_replicas", {}), f"{what}: adding"),
            removing_replicas=TopicZNode._parse_replica_map(doc.get("removing_replicas", {}), f"{what}: removing"),
        )

    @staticmethod
    def _replica_map(replicas: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
        return {str(p): list(replicas[p]) for p in sorted(replicas)}

    @staticmethod
    def _parse_replica_map(raw: Any, what: str) -> dict[int, tuple[int, ...]]:
        result: dict[int, tuple[int, ...]] = {}
        for key, replicas in _typed(raw, dict, what).items():
            partition = _int_text(key, f"{what} partition")
            if partition < 0:
                raise ZkDataError(f"{what}: negative partition {partition}")
            result[partition] = _int_list(replicas, f"{what} {key}")
        return dict(sorted(result.items()))


class TopicsZNode:
    """``/brokers/topics``: persistent parent; its children are the topic names."""

    @staticmethod
    def path() -> str:
        return Paths.TOPICS


class TopicPartitionsZNode:
    """``/brokers/topics/<t>/partitions``: persistent, no data; children are partition numbers."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{TopicZNode.path(topic)}/partitions"


class TopicPartitionZNode:
    """``/brokers/topics/<t>/partitions/<p>``: persistent, no data; parent of ``state``."""

    @staticmethod
    def path(topic: str, partition: int) -> str:
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise ZkDataError(f"partition must be a non-negative integer, got {partition!r}")
        return f"{TopicPartitionsZNode.path(topic)}/{partition}"


# --- /brokers/topics/<t>/partitions/<p>/state -------------------------------------------------


@dataclass(frozen=True)
class PartitionState:
    """Leader and ISR of one partition, and the epoch of the controller that wrote them."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = LEADER_RECOVERED


class TopicPartitionStateZNode:
    """``/brokers/topics/<t>/partitions/<p>/state``: JSON like ``{"controller_epoch":1,
    "leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}``, plus
    ``"leader_recovery_state":1`` only while a leader elected uncleanly is recovering. The znode's
    ZooKeeper version is the partition epoch: every write is conditional on it.
    """

    VERSION = 1

    @staticmethod
    def path(topic: str, partition: int) -> str:
        return f"{TopicPartitionZNode.path(topic, partition)}/state"

    @staticmethod
    def encode(state: PartitionState) -> bytes:
        if state.leader_recovery_state not in (LEADER_RECOVERED, LEADER_RECOVERING):
            raise ZkDataError(f"unknown leader_recovery_state {state.leader_recovery_state}")
        doc: dict[str, Any] = {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": TopicPartitionStateZNode.VERSION,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
        if state.leader_recovery_state != LEADER_RECOVERED:
            doc["leader_recovery_state"] = state.leader_recovery_state
        return _dumps(doc)

    @staticmethod
    def decode(data: bytes) -> PartitionState:
        what = "partition state"
        doc = _loads_object(data, what)
        recovery = _typed(doc.get("leader_recovery_state", LEADER_RECOVERED), int, f"{what}: recovery")
        if recovery not in (LEADER_RECOVERED, LEADER_RECOVERING):
            raise ZkDataError(f"{what}: unknown leader_recovery_state {recovery}")
        return PartitionState(
            leader=_field(doc, "leader", int, what),
            leader_epoch=_field(doc, "leader_epoch", int, what),
            isr=_int_list(_field(doc, "isr", list, what), f"{what}: 'isr'"),
            controller_epoch=_field(doc, "controller_epoch", int, what),
            leader_recovery_state=recovery,
        )


# --- /controller and /controller_epoch --------------------------------------------------------


@dataclass(frozen=True)
class ControllerInfo:
    """Who holds ``/controller``; ``kraft_controller_epoch`` is -1 for a ZooKeeper controller
    and None when the znode is version 1 (no such key)."""

    broker_id: int
    timestamp_ms: int
    kraft_controller_epoch: int | None = -1


class ControllerZNode:
    """``/controller``: ephemeral; JSON ``{"version":2,"brokerid":0,"timestamp":"1719917952299",
    "kraftControllerEpoch":-1}`` (version 1 has no ``kraftControllerEpoch``)."""

    VERSION = 2

    @staticmethod
    def path() -> str:
        return "/controller"

    @staticmethod
    def encode(broker_id: int, timestamp_ms: int, kraft_controller_epoch: int = -1) -> bytes:
        return _dumps(
            {
                "version": ControllerZNode.VERSION,
                "brokerid": broker_id,
                "timestamp": str(timestamp_ms),
                "kraftControllerEpoch": kraft_controller_epoch,
            }
        )

    @staticmethod
    def decode(data: bytes) -> ControllerInfo:
        what = "controller registration"
        doc = _loads_object(data, what)
        _field(doc, "version", int, what)
        kraft = doc.get("kraftControllerEpoch")
        if kraft is not None:
            _typed(kraft, int, f"{what}: 'kraftControllerEpoch'")
        timestamp = _typed(doc.get("timestamp", "0"), str, f"{what}: 'timestamp'")
        return ControllerInfo(
            broker_id=_field(doc, "brokerid", int, what),
            timestamp_ms=_int_text(timestamp, f"{what}: timestamp"),
            kraft_controller_epoch=kraft,
        )


class ControllerEpochZNode:
    """``/controller_epoch``: persistent; the epoch as decimal text (``b"3"``). Its ZooKeeper
    version is what controller writes check to fence a controller that was replaced."""

    @staticmethod
    def path() -> str:
        return "/controller_epoch"

    @staticmethod
    def encode(epoch: int) -> bytes:
        return str(epoch).encode("ascii")

    @staticmethod
    def decode(data: bytes) -> int:
        try:
            text = bytes(data).decode("ascii").strip()
        except UnicodeDecodeError as exc:
            raise ZkDataError(f"controller epoch: not ASCII: {bytes(data)[:50]!r}") from exc
        epoch = _int_text(text, "controller epoch")
        if epoch < 0:
            raise ZkDataError(f"controller epoch must not be negative, got {epoch}")
        return epoch


# --- /config ----------------------------------------------------------------------------------


class ConfigEntityZNode:
    """``/config/<entity type>/<name>`` (``/config/topics/<t>`` for topics): JSON
    ``{"version":1,"config":{"retention.ms":"100000"}}``; values are always strings."""

    TOPICS = "topics"

    @staticmethod
    def path(entity_type: str, name: str) -> str:
        return f"{Paths.CONFIG}/{segment(entity_type, 'entity type')}/{segment(name, 'entity name')}"

    @staticmethod
    def encode(config: Mapping[str, str]) -> bytes:
        for key, value in config.items():
            _typed(key, str, "config key")
            _typed(value, str, f"config {key!r} value")
        return _dumps({"version": 1, "config": dict(config)})

    @staticmethod
    def decode(data: bytes) -> dict[str, str]:
        what = "entity config"
        doc = _loads_object(data, what)
        config = _typed(doc.get("config", {}), dict, f"{what}: 'config'")
        return {k: _typed(v, str, f"{what}: {k!r}") for k, v in config.items()}


class ConfigEntityChangeNotificationSequenceZNode:
    """``/config/changes/config_change_<10-digit sequence>``: persistent sequential; JSON
    ``{"version":2,"entity_path":"topics/<t>"}``. Version 1 (``entity_type`` and
    ``entity_name``) is still read."""

    PREFIX = "config_change_"

    @staticmethod
    def create_path() -> str:
        return f"{Paths.CONFIG_CHANGES}/{ConfigEntityChangeNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def encode(entity_type: str, name: str) -> bytes:
        return _dumps({"version": 2, "entity_path": f"{segment(entity_type)}/{segment(name)}"})

    @staticmethod
    def decode(data: bytes) -> tuple[str, str]:
        """``(entity_type, entity_name)`` of the changed entity."""
        what = "config change notification"
        doc = _loads_object(data, what)
        version = _field(doc, "version", int, what)
        if version == 1:
            return _field(doc, "entity_type", str, what), _field(doc, "entity_name", str, what)
        if version != 2:
            raise ZkDataError(f"{what}: unsupported version {version}")
        entity_type, sep, name = _field(doc, "entity_path", str, what).partition("/")
        if not sep or not entity_type or not name:
            raise ZkDataError(f"{what}: entity_path must be <type>/<name>")
        return entity_type, name


# --- /admin/delete_topics, /isr_change_notification, /cluster/id ------------------------------


class DeleteTopicsTopicZNode:
    """``/admin/delete_topics/<t>``: persistent, empty; marks a topic for the controller to delete."""

    @staticmethod
    def path(topic: str) -> str:
        return f"{Paths.DELETE_TOPICS}/{segment(topic, 'topic')}"

    @staticmethod
    def encode() -> bytes:
        return b""


class IsrChangeNotificationSequenceZNode:
    """``/isr_change_notification/isr_change_<seq>``: persistent sequential; JSON
    ``{"version":1,"partitions":[{"topic":"t","partition":0}]}``."""

    PREFIX = "isr_change_"

    @staticmethod
    def create_path() -> str:
        return f"{Paths.ISR_CHANGES}/{IsrChangeNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def encode(partitions: Iterable[tuple[str, int]]) -> bytes:
        items = [{"topic": t, "partition": p} for t, p in sorted(set(partitions))]
        return _dumps({"version": 1, "partitions": items})

    @staticmethod
    def decode(data: bytes) -> set[tuple[str, int]]:
        what = "ISR change notification"
        doc = _loads_object(data, what)
        result: set[tuple[str, int]] = set()
        for item in _field(doc, "partitions", list, what):
            entry = _typed(item, dict, f"{what}: partition entry")
            result.add((_field(entry, "topic", str, what), _field(entry, "partition", int, what)))
        return result


class ClusterIdZNode:
    """``/cluster/id``: persistent; JSON ``{"version":"1","id":"<22-char base64 uuid>"}``
    (the version is a string here, as Kafka writes it)."""

    @staticmethod
    def path() -> str:
        return f"{Paths.CLUSTER}/id"

    @staticmethod
    def encode(cluster_id: str) -> bytes:
        return _dumps({"version": "1", "id": _typed(cluster_id, str, "cluster id")})

    @staticmethod
    def decode(data: bytes) -> str:
        cluster_id = _field(_loads_object(data, "cluster id"), "id", str, "cluster id")
        if not cluster_id:
            raise ZkDataError("cluster id is empty")
        return cluster_id


# --- /log_dir_event_notification/log_dir_event_<seq> -----------------------------------------


class LogDirEventNotificationSequenceZNode:
    """``/log_dir_event_notification/log_dir_event_<10-digit sequence>``: persistent sequential,
    written by a broker whose log dir failed. Kafka's JSON ``{"version":1,"broker":<id>,"event":1}``
    (1: LogDirFailure); Strom adds ``"partitions": [["<topic>", <partition>], ...]``, the replicas
    in the failed dir (Kafka's controller learns them from LeaderAndIsr answers, which Strom does
    not have). The controller moves leadership away from those replicas and out of their ISRs;
    the broker deletes its notifications when it starts again (its dirs are checked afresh)."""

    PREFIX = "log_dir_event_"
    LOG_DIR_FAILURE = 1

    @staticmethod
    def create_path() -> str:
        return f"{Paths.LOG_DIR_EVENTS}/{LogDirEventNotificationSequenceZNode.PREFIX}"

    @staticmethod
    def path(name: str) -> str:
        return f"{Paths.LOG_DIR_EVENTS}/{name}"

    @staticmethod
    def encode(broker_id: int, partitions: Iterable[tuple[str, int]]) -> bytes:
        return _dumps(
            {
                "version": 1,
                "broker": broker_id,
                "event": LogDirEventNotificationSequenceZNode.LOG_DIR_FAILURE,
                "partitions": [[t, p] for t, p in sorted(partitions)],
            }
        )

    @staticmethod
    def decode(data: bytes) -> tuple[int, list[tuple[str, int]]]:
        """``(broker id, offline replicas)`` of a notification (no partitions: a Kafka broker's)."""
        what = "log dir event notification"
        doc = _loads_object(data, what)
        if _field(doc, "version", int, what) != 1:
            raise ZkDataError(f"{what}: unsupported version {doc['version']}")
        broker = _field(doc, "broker", int, what)
        partitions = []
        for item in doc.get("partitions", []):
            if (
                not isinstance(item, list)
                or len(item) != 2
                or not isinstance(item[0], str)
                or isinstance(item[1], bool)
                or not isinstance(item[1], int)
            ):
                raise ZkDataError(f"{what}: partitions must be [topic, partition] pairs")
            partitions.append((item[0], item[1]))
        return broker, partitions

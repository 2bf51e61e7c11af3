"""``KafkaZkClient``: the cluster's ZooKeeper operations, kazoo driven from trio.

kazoo runs its own threads. Every blocking kazoo call here runs in a worker thread through
``trio.to_thread.run_sync``; watch callbacks and session-state changes, which kazoo calls on
its threads, are handed to the trio loop with ``TrioToken.run_sync_soon``, so user callbacks
always run in trio's thread, in the order ZooKeeper reported the changes.

Paths and JSON come from :mod:`strom.broker.zk.zkdata`; this module only moves bytes.

Controller fencing, as Kafka's ZooKeeper mode does it: becoming controller creates the
ephemeral ``/controller`` znode and bumps ``/controller_epoch`` in one multi-op, conditional
on the epoch znode's version. Every later controller write is a multi-op that first checks the
epoch znode still has the version this client set; once a newer controller bumped it, the
check fails and the write raises :class:`ControllerMovedError` without changing anything.

The connect string is Kafka's ``zookeeper.connect``: ``host:port[,host:port...][/chroot]``.
A missing chroot path is created first (through a short connection without the chroot).
"""

from __future__ import annotations

import enum
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from strom.broker.zk.quotas_zk import read_broker_configs, read_quotas, write_broker_config, write_quota
from strom.broker.zk.zkdata import (
    INITIAL_CONTROLLER_EPOCH,
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerInfo,
    ClusterIdZNode,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerInfo,
    ControllerZNode,
    DeleteTopicsTopicZNode,
    LogDirEventNotificationSequenceZNode,
    PartitionState,
    Paths,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
    TopicZNode,
    ZkDataError,
    new_topic_id,
)
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SESSION_TIMEOUT_S = 18.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0
REGISTER_RETRY_INTERVAL_S = 0.1
TOPIC_CONFIG = ConfigEntityZNode.TOPICS


# --- errors -----------------------------------------------------------------------------------


class ZkClientError(Exception):
    """Base of the errors a ZooKeeper operation raises; ``code`` is the Kafka error to answer with."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class ZkConnectionError(ZkClientError):
    """ZooKeeper could not be reached, or the connection dropped during an operation."""


class BrokerIdInUseError(ZkClientError):
    """``/brokers/ids/<id>`` is held by another session and did not go away in time."""


class ControllerMovedError(ZkClientError):
    """This client is not (or no longer) the controller: a newer controller epoch exists."""

    code = ErrorCode.NOT_CONTROLLER


class PartitionStateConflictError(ZkClientError):
    """A partition state write lost a race: the znode's version is not the expected one, or
    the znode already exists (create) or is missing (update)."""


class TopicExistsError(ZkClientError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class UnknownTopicError(ZkClientError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class TopicAlreadyMarkedForDeletionError(ZkClientError):
    """``/admin/delete_topics/<t>`` exists already."""


# --- values -----------------------------------------------------------------------------------


class SessionState(enum.Enum):
    """kazoo's connection states: CONNECTED, SUSPENDED (connection lost, session may live on),
    LOST (session expired: every ephemeral znode of this client is gone; kazoo then opens a
    new session and reports CONNECTED again)."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


@dataclass(frozen=True)
class VersionedPartitionState:
    """A partition state with its znode version (Kafka's partition epoch, for conditional writes)."""

    state: PartitionState
    zk_version: int


@dataclass(frozen=True)
class ControllerLease:
    """What this client holds while it is controller."""

    broker_id: int
    epoch: int
    epoch_zk_version: int


class Watch:
    """A registered watch; ``cancel()`` stops further callbacks (kazoo drops it on its next event)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def split_connect_string(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka/a"`` -> ``("h1:2181,h2:2181", "/kafka/a")``; chroot ``""`` if none."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r} has no host")
    chroot = f"/{chroot}".rstrip("/") if slash else ""
    if "//" in chroot:
        raise ValueError(f"zookeeper.connect {connect!r} has an empty chroot segment")
    return hosts, chroot


# --- the client -------------------------------------------------------------------------------


class KafkaZkClient:
    """Kafka's ZooKeeper-mode operations over one ZooKeeper session. Create with :meth:`connect`
    inside a trio run; every method is async except the watch cancel handles."""

    def __init__(self, zk: KazooClient, token: trio.lowlevel.TrioToken, chroot: str, session_timeout_s: float) -> None:
        self._zk = zk
        self.session_timeout_s = session_timeout_s
        self._token = token
        self.chroot = chroot
        self._closed = False
        self._lease: ControllerLease | None = None
        self._session_listeners: list[Callable[[SessionState], None]] = []
        self.session_state = SessionState.CONNECTED
        self.session_lost = trio.Event()
        """Set the first time the session expires (ephemeral znodes, the controller role and
        broker registration are gone; register again on the new session)."""
        zk.add_listener(self._on_kazoo_state)

    # connection ---------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        connect: str,
        *,
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> KafkaZkClient:
        """Open a session (creating the chroot if missing) and the persistent top-level znodes."""
        hosts, chroot = split_connect_string(connect)
        token = trio.lowlevel.current_trio_token()
        if chroot:
            await trio.to_thread.run_sync(_ensure_chroot, hosts, chroot, connect_timeout_s)
        # Reads and idempotent creates retry across connection loss for up to a session timeout.
        retry = {"max_tries": -1, "max_delay": 1.0, "deadline": session_timeout_s}
        zk = KazooClient(hosts=hosts + chroot, timeout=session_timeout_s, command_retry=retry)
        await trio.to_thread.run_sync(_start, zk, connect_timeout_s)
        client = cls(zk, token, chroot, session_timeout_s)
        try:
            await client._call(_ensure_paths, zk, Paths.PERSISTENT)
        except BaseException:
            await client.close()
            raise
        return client

    @property
    def session_id(self) -> int:
        return self._zk.client_id[0] if self._zk.client_id else 0

    @property
    def controller_lease(self) -> ControllerLease | None:
        """The epoch this client won as controller, or None."""
        return self._lease

    def add_session_listener(self, callback: Callable[[SessionState], None]) -> None:
        """Call ``callback(state)`` in trio's thread on every session state change."""
        self._session_listeners.append(callback)

    async def close(self) -> None:
        """End the session (its ephemeral znodes go away at once) and stop kazoo's threads."""
        if self._closed:
            return
        self._closed = True
        self._lease = None
        await trio.to_thread.run_sync(_stop, self._zk)

    async def __aenter__(self) -> KafkaZkClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # brokers ------------------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo, *, wait_s: float | None = None) -> None:
        """Create the ephemeral ``/brokers/ids/<id>``. When another session holds it (this
        broker's previous session that has not expired yet, or another broker with the same
        id), retry until it disappears, for up to ``wait_s`` (default: this session's timeout,
        plus half); then raise :class:`BrokerIdInUseError`."""
        path = BrokerIdZNode.path(info.broker_id)
        data = BrokerIdZNode.encode(info)
        deadline = trio.current_time() + (wait_s if wait_s is not None else self.session_timeout_s * 1.5)
        while not await self._call(self._zk.retry, self._create_owned_ephemeral, path, data):
            if trio.current_time() >= deadline:
                raise BrokerIdInUseError(
                    f"broker id {info.broker_id} is already registered by another ZooKeeper session"
                )
            await trio.sleep(REGISTER_RETRY_INTERVAL_S)

    async def get_live_broker_ids(self) -> list[int]:
        return BrokerIdsZNode.decode_children(await self._call(self._zk.get_children, Paths.BROKER_IDS))

    async def get_broker(self, broker_id: int) -> BrokerInfo | None:
        data = await self._get_data(BrokerIdZNode.path(broker_id))
        return None if data is None else BrokerIdZNode.decode(broker_id, data[0])

    async def get_all_brokers(self) -> dict[int, BrokerInfo]:
        brokers = {}
        for broker_id in await self.get_live_broker_ids():
            info = await self.get_broker(broker_id)
            if info is not None:
                brokers[broker_id] = info
        return brokers

    # controller ---------------------------------------------------------------------------

    async def try_become_controller(self, broker_id: int) -> int | None:
        """Create ``/controller`` and bump ``/controller_epoch`` atomically. Returns the new
        epoch, or None when another broker (or an older session of this one) is controller or
        won the race; watch the controller znode and try again when it goes away."""
        lease = await self._call(self._elect, broker_id)
        self._lease = lease
        return lease.epoch if lease else None

    async def resign_controller(self) -> None:
        """Delete ``/controller`` if this client still holds it (fenced by the epoch)."""
        lease, self._lease = self._lease, None
        if lease is None:
            return
        try:
            await self._fenced(lease, [("delete", ControllerZNode.path(), None, -1)])
        except (ControllerMovedError, PartitionStateConflictError):
            pass

    async def get_controller(self) -> ControllerInfo | None:
        data = await self._get_data(ControllerZNode.path())
        return None if data is None else ControllerZNode.decode(data[0])

    async def get_controller_id(self) -> int | None:
        info = await self.get_controller()
        return None if info is None else info.broker_id

    async def get_controller_epoch(self) -> tuple[int, int] | None:
        """``(epoch, znode version)`` of ``/controller_epoch``, None before any election."""
        data = await self._get_data(ControllerEpochZNode.path())
        return None if data is None else (ControllerEpochZNode.decode(data[0]), data[1].version)

    # topics -------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str] | None = None,
        topic_id: str | None = None,
    ) -> str:
        """Write ``/config/topics/<t>`` and ``/brokers/topics/<t>`` in one multi-op and return
        the topic id (a new one unless given). The controller then creates partition states.
        Raises :class:`TopicExistsError`."""
        topic_id = topic_id or new_topic_id()
        data = TopicZNode.encode(
            TopicAssignment(
                {p: tuple(replicas) for p, replicas in assignment.items()},
                topic_id=topic_id,
            )
        )
        config = ConfigEntityZNode.encode(dict(configs or {}))
        await self._call(self._create_topic, name, data, config)
        return topic_id

    async def get_topics(self) -> list[str]:
        return sorted(await self._call(self._zk.get_children, Paths.TOPICS))

    async def get_topic_assignment(self, name: str) -> TopicAssignment | None:
        data = await self._get_data(TopicZNode.path(name))
        return None if data is None else TopicZNode.decode(data[0])

    async def set_topic_assignment(self, name: str, assignment: TopicAssignment) -> None:
        """Overwrite an existing topic's assignment (adding partitions). Raises UnknownTopicError."""
        try:
            await self._call(self._zk.set, TopicZNode.path(name), TopicZNode.encode(assignment))
        except NoNodeError as exc:
            raise UnknownTopicError(f"Topic {name} does not exist") from exc

    # partition state (controller writes, fenced) ------------------------------------------

    async def create_partition_states(self, topic: str, states: Mapping[int, PartitionState]) -> None:
        """Create the state znodes of new partitions, fenced by the controller epoch.
        Raises :class:`PartitionStateConflictError` if one exists already."""
        lease = self._require_lease()
        if await self._call(self._zk.exists, TopicZNode.path(topic)) is None:
            raise UnknownTopicError(f"Topic {topic} does not exist")
        parents = [TopicPartitionZNode.path(topic, p) for p in states]
        await self._call(_ensure_paths, self._zk, [TopicPartitionsZNode.path(topic), *parents])
        ops = [
            ("create", TopicPartitionStateZNode.path(topic, p), TopicPartitionStateZNode.encode(s), None)
            for p, s in states.items()
        ]
        await self._fenced(lease, ops)

    async def set_partition_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> int:
        """Write a partition's state if its znode still has ``expected_version``; returns the
        new version. Raises :class:`ControllerMovedError` when a newer controller exists and
        :class:`PartitionStateConflictError` when the state changed since it was read."""
        lease = self._require_lease()
        path = TopicPartitionStateZNode.path(topic, partition)
        results = await self._fenced(lease, [("set", path, TopicPartitionStateZNode.encode(state), expected_version)])
        stat: ZnodeStat = results[1]
        return stat.version

    async def update_isr(self, topic: str, partition: int, state: PartitionState, expected_version: int) -> int:
        """A partition leader's own ISR change (Kafka's ZooKeeper-era leaders wrote it directly):
        conditional on the znode version alone, so a write based on a stale state fails with
        :class:`PartitionStateConflictError` and the leader re-reads."""
        path = TopicPartitionStateZNode.path(topic, partition)
        try:
            stat = await self._call(self._zk.set, path, TopicPartitionStateZNode.encode(state), expected_version)
        except (BadVersionError, NoNodeError) as exc:
            raise PartitionStateConflictError(f"{path} changed since version {expected_version}") from exc
        return stat.version

    async def allocate_producer_id_block(self, broker_id: int, size: int = 1000) -> tuple[int, int]:
        """Reserve ids [start, end] in ``/latest_producer_id_block`` (Kafka's znode and JSON),
        with a conditional write so two brokers never get the same block."""
        return await self._call(self._allocate_block, broker_id, size)

    def _allocate_block(self, broker_id: int, size: int) -> tuple[int, int]:
        import json

        path = "/latest_producer_id_block"
        while True:
            try:
                data, stat = self._zk.get(path)
            except NoNodeError:
                try:
                    self._zk.create(path, b"", makepath=True)
                except NodeExistsError:
                    pass
                continue
            start = int(json.loads(data)["block_end"]) + 1 if data else 0
            block = {"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(start + size - 1)}
            try:
                self._zk.set(path, json.dumps(block).encode(), stat.version)
                return start, start + size - 1
            except BadVersionError:
                continue

    async def get_partition_state(self, topic: str, partition: int) -> VersionedPartitionState | None:
        data = await self._get_data(TopicPartitionStateZNode.path(topic, partition))
        return (
            None if data is None else VersionedPartitionState(TopicPartitionStateZNode.decode(data[0]), data[1].version)
        )

    async def get_partition_states(self, topic: str) -> dict[int, VersionedPartitionState]:
        """Every partition of ``topic`` that has a state znode, by partition number."""
        try:
            children = await self._call(self._zk.get_children, TopicPartitionsZNode.path(topic))
        except NoNodeError:
            return {}
        states = {}
        for partition in sorted(int(c) for c in children if c.isdigit()):
            versioned = await self.get_partition_state(topic, partition)
            if versioned is not None:
                states[partition] = versioned
        return states

    # configs ------------------------------------------------------------------------------

    async def set_topic_config(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's config overrides and announce it under ``/config/changes``.
        Raises :class:`UnknownTopicError` for a topic that does not exist."""
        if await self._call(self._zk.exists, TopicZNode.path(name)) is None:
            raise UnknownTopicError(f"Topic {name} does not exist")
        await self._call(
            self._set_or_create, ConfigEntityZNode.path(TOPIC_CONFIG, name), ConfigEntityZNode.encode(dict(configs))
        )
        notification = ConfigEntityChangeNotificationSequenceZNode.encode(TOPIC_CONFIG, name)
        await self._call(
            self._zk.create,
            ConfigEntityChangeNotificationSequenceZNode.create_path(),
            notification,
            sequence=True,
        )

    async def get_topic_config(self, name: str) -> dict[str, str]:
        """A topic's config overrides; empty when it has none."""
        data = await self._get_data(ConfigEntityZNode.path(TOPIC_CONFIG, name))
        return {} if data is None else ConfigEntityZNode.decode(data[0])

    async def get_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        """``/config/<entity type>/<name>`` (users: SCRAM credentials); empty when absent."""
        data = await self._get_data(ConfigEntityZNode.path(entity_type, name))
        return {} if data is None else ConfigEntityZNode.decode(data[0])

    async def set_entity_config(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        """Replace ``/config/<entity type>/<name>`` and announce it under ``/config/changes``."""
        await self._call(self._zk.ensure_path, f"{Paths.CONFIG}/{entity_type}")
        await self._call(
            self._set_or_create, ConfigEntityZNode.path(entity_type, name), ConfigEntityZNode.encode(dict(configs))
        )
        await self._call(
            self._zk.create,
            ConfigEntityChangeNotificationSequenceZNode.create_path(),
            ConfigEntityChangeNotificationSequenceZNode.encode(entity_type, name),
            sequence=True,
            makepath=True,
        )

    async def get_entity_names(self, entity_type: str) -> list[str]:
        path = f"{Paths.CONFIG}/{entity_type}"
        if await self._call(self._zk.exists, path) is None:
            return []
        return sorted(await self._call(self._zk.get_children, path))

    # generic znodes (the ACL store: /kafka-acl, /kafka-acl-extended and their change logs) ---

    async def children(self, path: str) -> list[str]:
        """Children of ``path``; empty when it does not exist."""
        try:
            return sorted(await self._call(self._zk.get_children, path))
        except NoNodeError:
            return []

    async def data(self, path: str) -> bytes | None:
        got = await self._get_data(path)
        return None if got is None else got[0]

    async def put(self, path: str, data: bytes) -> None:
        """Set ``path`` to ``data``, creating it and its parents when absent."""
        parent = path.rsplit("/", 1)[0]
        if parent:
            await self._call(self._zk.ensure_path, parent)
        await self._call(self._set_or_create, path, data)

    async def remove(self, path: str) -> None:
        try:
            await self._call(self._zk.delete, path)
        except NoNodeError:
            pass

    async def append_sequential(self, prefix: str, data: bytes) -> None:
        await self._call(self._zk.create, prefix, data, sequence=True, makepath=True)

    async def watch_child_names(self, path: str, callback: Callable[[list[str]], None]) -> Watch:
        await self._call(self._zk.ensure_path, path)
        return await self._watch_children(path, lambda children: sorted(children), callback)

    # deletion -----------------------------------------------------------------------------

    async def mark_topic_for_deletion(self, name: str) -> None:
        """Create ``/admin/delete_topics/<t>``. Raises :class:`UnknownTopicError` or
        :class:`TopicAlreadyMarkedForDeletionError`."""
        if await self._call(self._zk.exists, TopicZNode.path(name)) is None:
            raise UnknownTopicError(f"Topic {name} does not exist")
        try:
            await self._call(self._zk.create, DeleteTopicsTopicZNode.path(name), DeleteTopicsTopicZNode.encode())
        except NodeExistsError as exc:
            raise TopicAlreadyMarkedForDeletionError(f"Topic {name} is already marked for deletion") from exc

    async def get_topics_to_delete(self) -> list[str]:
        return sorted(await self._call(self._zk.get_children, Paths.DELETE_TOPICS))

    async def delete_topic_znodes(self, name: str) -> None:
        """Controller step after a topic's logs are gone: delete ``/brokers/topics/<t>`` with
        its partitions, ``/config/topics/<t>`` and the deletion mark, in one fenced multi-op."""
        lease = self._require_lease()
        roots = [TopicZNode.path(name), ConfigEntityZNode.path(TOPIC_CONFIG, name), DeleteTopicsTopicZNode.path(name)]
        paths = await self._call(self._subtrees_bottom_up, roots)
        await self._fenced(lease, [("delete", path, None, -1) for path in paths])

    # log dir failures ---------------------------------------------------------------------

    async def create_log_dir_event(self, broker_id: int, partitions: Iterable[tuple[str, int]]) -> None:
        """Announce that ``partitions`` of ``broker_id`` are in a failed log dir."""
        await self._call(
            self._zk.create,
            LogDirEventNotificationSequenceZNode.create_path(),
            LogDirEventNotificationSequenceZNode.encode(broker_id, partitions),
            sequence=True,
        )

    async def get_log_dir_events(self) -> list[tuple[str, int, list[tuple[str, int]]]]:
        """(znode name, broker id, offline replicas) of every notification (malformed ones skipped)."""
        out = []
        for name in sorted(await self._call(self._zk.get_children, Paths.LOG_DIR_EVENTS)):
            data = await self._get_data(LogDirEventNotificationSequenceZNode.path(name))
            if data is None:
                continue
            try:
                broker, partitions = LogDirEventNotificationSequenceZNode.decode(data[0])
            except ZkDataError:
                log.warning("ignoring malformed log dir event %s", name)
                continue
            out.append((name, broker, partitions))
        return out

    async def delete_log_dir_events(self, broker_id: int) -> None:
        """Remove ``broker_id``'s notifications (it restarted: its dirs are checked afresh)."""
        for name, broker, _ in await self.get_log_dir_events():
            if broker == broker_id:
                try:
                    await self._call(self._zk.delete, LogDirEventNotificationSequenceZNode.path(name))
                except NoNodeError:
                    pass

    async def watch_log_dir_events(self, callback: Callable[[list[str]], None]) -> Watch:
        return await self._watch_children(Paths.LOG_DIR_EVENTS, list, callback)

    # client quotas and dynamic broker configs (/config/users, /config/clients, /config/ips, /config/brokers)

    async def get_client_quotas(self) -> dict[tuple, dict[str, float]]:
        """Every client quota entity's values (see :mod:`strom.broker.zk.quotas_zk`)."""
        return await self._call(read_quotas, self._zk)

    async def set_client_quota(self, entity: tuple, values: Mapping[str, float]) -> None:
        """Replace one entity's quotas (empty: remove them), announced to every broker."""
        await self._call(write_quota, self._zk, entity, dict(values))

    async def get_broker_configs(self) -> dict[str, dict[str, str]]:
        """The dynamic configs of every broker ("" for the cluster default)."""
        return await self._call(read_broker_configs, self._zk)

    async def set_broker_config(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace /config/brokers/<name> ("" for <default>), announced to every broker."""
        await self._call(write_broker_config, self._zk, name, dict(configs))

    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> Watch:
        """``callback(change notification names)`` now and after every config change notice."""
        return await self._watch_children(Paths.CONFIG_CHANGES, list, callback)

    # cluster id ---------------------------------------------------------------------------

    async def get_or_create_cluster_id(self) -> str:
        """The cluster id in ``/cluster/id``, created (random, Kafka's text form) if absent."""
        return await self._call(self._zk.retry, self._cluster_id)

    # watches ------------------------------------------------------------------------------

    async def watch_broker_ids(self, callback: Callable[[list[int]], None]) -> Watch:
        """``callback(sorted live broker ids)`` now and after every change."""
        return await self._watch_children(Paths.BROKER_IDS, BrokerIdsZNode.decode_children, callback)

    async def watch_topics(self, callback: Callable[[list[str]], None]) -> Watch:
        """``callback(sorted topic names)`` now and after every change."""
        return await self._watch_children(Paths.TOPICS, sorted, callback)

    async def watch_topics_to_delete(self, callback: Callable[[list[str]], None]) -> Watch:
        return await self._watch_children(Paths.DELETE_TOPICS, sorted, callback)

    async def watch_controller(self, callback: Callable[[ControllerInfo | None], None]) -> Watch:
        """``callback(controller or None)`` now and whenever ``/controller`` changes."""
        return await self._watch_data(ControllerZNode.path(), lambda data, stat: ControllerZNode.decode(data), callback)

    async def watch_topic_assignment(self, name: str, callback: Callable[[TopicAssignment | None], None]) -> Watch:
        return await self._watch_data(TopicZNode.path(name), lambda data, stat: TopicZNode.decode(data), callback)

    async def watch_partition_state(
        self,
        topic: str,
        partition: int,
        callback: Callable[[VersionedPartitionState | None], None],
    ) -> Watch:
        def decode(data: bytes, stat: ZnodeStat) -> VersionedPartitionState:
            return VersionedPartitionState(TopicPartitionStateZNode.decode(data), stat.version)

        return await self._watch_data(TopicPartitionStateZNode.path(topic, partition), decode, callback)

    # internals: trio side -----------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise ZkConnectionError("the ZooKeeper client is closed")
        try:
            return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except (NoNodeError, NodeExistsError, ZkClientError, ZkDataError):
            raise  # NoNode/NodeExists are handled by the callers that expect them
        except _CONNECTION_ERRORS as exc:
            raise ZkConnectionError(f"ZooKeeper connection problem: {exc!r}") from exc
        except KazooException as exc:
            raise ZkClientError(f"ZooKeeper operation failed: {exc!r}") from exc

    async def _get_data(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self._call(self._zk.retry, self._zk.get, path)
        except NoNodeError:
            return None

    async def _fenced(
        self, lease: ControllerLease, ops: Sequence[tuple[str, str, bytes | None, int | None]]
    ) -> list[Any]:
        try:
            return await self._call(self._fenced_multi, lease, ops)
        except ControllerMovedError:
            if self._lease == lease:
                self._lease = None
            raise

    def _require_lease(self) -> ControllerLease:
        if self._lease is None:
            raise ControllerMovedError("this broker is not the controller")
        return self._lease

    def _deliver(self, callback: Callable[[T], None], value: T) -> None:
        """From a kazoo thread: run ``callback(value)`` in trio's thread."""
        try:
            self._token.run_sync_soon(_guarded, callback, value)
        except trio.RunFinishedError:
            pass

    def _on_kazoo_state(self, state: str) -> None:
        self._deliver(self._on_session_state, SessionState(state))

    def _on_session_state(self, state: SessionState) -> None:
        if self._closed:
            return
        self.session_state = state
        if state is SessionState.LOST:
            self._lease = None
            self.session_lost.set()
        for listener in list(self._session_listeners):
            _guarded(listener, state)

    async def _watch_children(
        self, path: str, decode: Callable[[list[str]], T], callback: Callable[[T], None]
    ) -> Watch:
        handle = Watch()

        def on_children(children: list[str]) -> bool:
            if handle.cancelled or self._closed:
                return False
            try:
                self._deliver(callback, decode(children))
            except ZkDataError:
                log.exception("malformed children of %s", path)
            return True

        await self._call(ChildrenWatch, self._zk, path, on_children)
        return handle

    async def _watch_data(
        self, path: str, decode: Callable[[bytes, ZnodeStat], T], callback: Callable[[T | None], None]
    ) -> Watch:
        handle = Watch()

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if handle.cancelled or self._closed:
                return False
            try:
                value = None if data is None or stat is None else decode(data, stat)
            except ZkDataError:
                log.exception("malformed data in %s", path)
                value = None
            self._deliver(callback, value)
            return True

        await self._call(DataWatch, self._zk, path, on_data)
        return handle

    # internals: worker-thread side (blocking kazoo calls) ---------------------------------

    def _create_owned_ephemeral(self, path: str, data: bytes) -> bool:
        """Create an ephemeral znode; True if it now exists for this session."""
        try:
            self._zk.create(path, data, ephemeral=True)
            return True
        except NodeExistsError:
            try:
                current, stat = self._zk.get(path)
            except NoNodeError:
                return False
            if stat.ephemeralOwner != self.session_id:
                return False
            if current != data:
                self._zk.set(path, data, version=stat.version)
            return True

    def _elect(self, broker_id: int) -> ControllerLease | None:
        epoch, epoch_version = self._read_or_create_epoch()
        transaction = self._zk.transaction()
        transaction.create(ControllerZNode.path(), ControllerZNode.encode(broker_id, _now_ms()), ephemeral=True)
        transaction.set_data(ControllerEpochZNode.path(), ControllerEpochZNode.encode(epoch + 1), version=epoch_version)
        results = transaction.commit()
        failure = _first_failure(results)
        if failure is None:
            return ControllerLease(broker_id, epoch + 1, results[1].version)
        if isinstance(failure, (NodeExistsError, BadVersionError)):
            return self._lease_already_held(broker_id)
        raise failure

    def _lease_already_held(self, broker_id: int) -> ControllerLease | None:
        """This session's lease if ``/controller`` is already ours (an earlier attempt that
        succeeded although its reply was lost, or a repeated call), else None."""
        try:
            data, stat = self._zk.get(ControllerZNode.path())
            epoch_data, epoch_stat = self._zk.get(ControllerEpochZNode.path())
        except NoNodeError:
            return None
        if stat.ephemeralOwner != self.session_id or ControllerZNode.decode(data).broker_id != broker_id:
            return None
        return ControllerLease(broker_id, ControllerEpochZNode.decode(epoch_data), epoch_stat.version)

    def _read_or_create_epoch(self) -> tuple[int, int]:
        path = ControllerEpochZNode.path()
        try:
            data, stat = self._zk.get(path)
            return ControllerEpochZNode.decode(data), stat.version
        except NoNodeError:
            pass
        try:
            self._zk.create(path, ControllerEpochZNode.encode(INITIAL_CONTROLLER_EPOCH))
            return INITIAL_CONTROLLER_EPOCH, 0
        except NodeExistsError:
            data, stat = self._zk.get(path)
            return ControllerEpochZNode.decode(data), stat.version

    def _fenced_multi(
        self, lease: ControllerLease, ops: Sequence[tuple[str, str, bytes | None, int | None]]
    ) -> list[Any]:
        """Run ``ops`` in one multi-op after checking the controller epoch znode version."""
        transaction = self._zk.transaction()
        transaction.check(ControllerEpochZNode.path(), lease.epoch_zk_version)
        for kind, path, data, version in ops:
            _TRANSACTION_OPS[kind](transaction, path, data, version)
        results = transaction.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMovedError(f"controller epoch {lease.epoch} is stale: a newer controller was elected")
        failure = _first_failure(results)
        if isinstance(failure, (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)):
            raise PartitionStateConflictError(f"conditional write lost a race: {type(failure).__name__}")
        if failure is not None:
            raise failure
        return results

    def _create_topic(self, name: str, data: bytes, config: bytes) -> None:
        topic_path = TopicZNode.path(name)
        config_path = ConfigEntityZNode.path(TOPIC_CONFIG, name)
        if self._zk.exists(topic_path) is not None:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        transaction = self._zk.transaction()
        if self._zk.exists(config_path) is None:
            transaction.create(config_path, config)
        else:
            transaction.set_data(config_path, config)
        transaction.create(topic_path, data)
        results = transaction.commit()
        failure = _first_failure(results)
        if isinstance(failure, NodeExistsError):
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if failure is not None:
            raise failure

    def _set_or_create(self, path: str, data: bytes) -> None:
        try:
            self._zk.set(path, data)
        except NoNodeError:
            try:
                self._zk.create(path, data)
            except NodeExistsError:
                self._zk.set(path, data)

    def _subtrees_bottom_up(self, roots: Sequence[str]) -> list[str]:
        paths: list[str] = []

        def visit(path: str) -> None:
            try:
                children = self._zk.get_children(path)
            except NoNodeError:
                return
            for child in children:
                visit(f"{path}/{child}")
            paths.append(path)

        for root in roots:
            visit(root)
        return paths

    def _cluster_id(self) -> str:
        path = ClusterIdZNode.path()
        try:
            return ClusterIdZNode.decode(self._zk.get(path)[0])
        except NoNodeError:
            pass
        try:
            # A cluster id has the text form of a topic id: base64 of a random UUID.
            self._zk.create(path, ClusterIdZNode.encode(new_topic_id()))
        except NodeExistsError:
            pass
        return ClusterIdZNode.decode(self._zk.get(path)[0])


# --- module helpers ---------------------------------------------------------------------------


def _guarded(callback: Callable[[T], None], value: T) -> None:
    """Run a user callback in trio's thread; an exception is logged, never kills the run."""
    try:
        callback(value)
    except Exception:
        log.exception("ZooKeeper watch callback %r failed", callback)


def _start(zk: KazooClient, timeout_s: float) -> None:
    try:
        zk.start(timeout=timeout_s)
    except (KazooTimeoutError, KazooException) as exc:
        _stop(zk)
        raise ZkConnectionError(f"cannot connect to ZooKeeper at {zk.hosts}: {exc!r}") from exc


def _stop(zk: KazooClient) -> None:
    try:
        zk.stop()
    finally:
        zk.close()


def _ensure_chroot(hosts: str, chroot: str, timeout_s: float) -> None:
    zk = KazooClient(hosts=hosts)
    _start(zk, timeout_s)
    try:
        zk.ensure_path(chroot)
    finally:
        _stop(zk)


def _ensure_paths(zk: KazooClient, paths: Sequence[str]) -> None:
    for path in paths:
        zk.ensure_path(path)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _first_failure(results: Sequence[object]) -> Exception | None:
    """The operation error of a failed multi-op (the other operations report RolledBackError)."""
    return next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)


_CONNECTION_ERRORS = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, KazooTimeoutError)

_TRANSACTION_OPS: dict[str, Callable[[Any, str, bytes | None, int | None], None]] = {
    "create": lambda t, path, data, version: t.create(path, data or b""),
    "set": lambda t, path, data, version: t.set_data(path, data or b"", version=-1 if version is None else version),
    "delete": lambda t, path, data, version: t.delete(path, version=-1 if version is None else version),
}

"""``KafkaZkClient``: the cluster's ZooKeeper operations, over the :class:`ZkSession` port.

Every znode operation goes through one :class:`~strom.broker.zk.session.ZkSession` (kazoo and a
real ZooKeeper by default, or ``strom.testing.memzk``'s in-memory ZooKeeper when the broker is
given that session factory); this module never touches kazoo's client itself. User callbacks
(watches, session states) always run in trio's thread, in the order ZooKeeper reported the
changes. Watches are kept as kazoo's ``DataWatch``/``ChildrenWatch`` recipes keep them: a
one-shot watch set again on every read, and read again after a new session.

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

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from strom.broker.zk.quotas_zk import (
    read_broker_configs,
    read_group_configs,
    read_quotas,
    write_broker_config,
    write_group_config,
    write_quota,
)
from strom.broker.zk.session import (
    CheckOp,
    CreateOp,
    DeleteOp,
    MultiOp,
    SessionState,
    SetDataOp,
    ZkSession,
    ZkSessionFactory,
    open_kazoo_session,
)
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
from strom.storage import clock

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_SESSION_TIMEOUT_S = 18.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0
REGISTER_RETRY_INTERVAL_S = 0.1
RETRY_MAX_DELAY_S = 1.0
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


@dataclass(frozen=True)
class VersionedPartitionState:
    """A partition state with its znode version (Kafka's partition epoch, for conditional writes)."""

    state: PartitionState
    zk_version: int
    # the zxid of the write that made this state: a state written before a broker's registration
    # (its broker epoch, the registration's czxid) was meant for an earlier life of that broker
    mzxid: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ControllerLease:
    """What this client holds while it is controller."""

    broker_id: int
    epoch: int
    epoch_zk_version: int


class Watch:
    """A registered watch; ``cancel()`` stops further callbacks (ZooKeeper drops the one-shot
    watch on its next event)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Recipe:
    """kazoo's DataWatch/ChildrenWatch: read with a one-shot watch; on each event (and after a
    new session) read again and report. Reads run one at a time, so reports keep their order."""

    def __init__(self, client: KafkaZkClient, handle: Watch, read: ReadFn) -> None:
        self._client = client
        self.handle = handle
        self._read = read
        self._wanted = trio.Event()
        self._fired = False
        self._running = False

    def on_event(self, event: object) -> None:
        """The one-shot watch fired (``event``), or the session was renewed (None): read again."""
        if self.handle.cancelled or self._client._closed:
            return
        self._fired = self._fired or event is not None
        self._wanted.set()
        if not self._running:
            self._running = True
            trio.lowlevel.spawn_system_task(self._worker, name=f"zk-watch-{id(self)}")

    async def start(self) -> None:
        await self._read(self.on_event, False)

    async def _worker(self) -> None:
        try:
            while self._wanted.is_set() and not self.handle.cancelled and not self._client._closed:
                self._wanted = trio.Event()
                fired, self._fired = self._fired, False
                try:
                    if not await self._client._retrying(self._read, self.on_event, fired):
                        return
                except Exception as exc:  # read again when asked (the next session), or now if that came
                    log.warning("watch read failed: %r", exc)
        finally:
            self._running = False


WatchCallbackT = Callable[[object], None]
ReadFn = Callable[[WatchCallbackT, bool], Awaitable[bool]]
"""Read a watched znode with ``watcher`` set; the flag says a watch event caused the read."""


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

    def __init__(self, zk: ZkSession, chroot: str, session_timeout_s: float) -> None:
        self._zk = zk
        self.session_timeout_s = session_timeout_s
        self.chroot = chroot
        self._closed = False
        self._lease: ControllerLease | None = None
        self._session_listeners: list[Callable[[SessionState], None]] = []
        self.session_state = SessionState.CONNECTED
        self.session_lost = trio.Event()
        """Set the first time the session expires (ephemeral znodes, the controller role and
        broker registration are gone; register again on the new session)."""
        self._recipes: list[_Recipe] = []
        zk.add_listener(self._on_session_state)

    # connection ---------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        connect: str,
        *,
        session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        session_factory: ZkSessionFactory | None = None,
    ) -> KafkaZkClient:
        """Open a session (creating the chroot if missing) and the persistent top-level znodes.
        ``session_factory`` opens the session (default: kazoo to a real ZooKeeper)."""
        _, chroot = split_connect_string(connect)
        factory = session_factory or open_kazoo_session
        zk = await factory(connect, session_timeout_s, connect_timeout_s)
        client = cls(zk, chroot, session_timeout_s)
        try:
            for path in Paths.PERSISTENT:
                await client._retrying(client._call, zk.ensure_path, path)
        except BaseException:
            await client.close()
            raise
        return client

    @property
    def session_id(self) -> int:
        return self._zk.session_id

    @property
    def session(self) -> ZkSession:
        """The ZooKeeper session under this client (tests reach znodes through it)."""
        return self._zk

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
        await self._zk.close()

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
        while not await self._retrying(self._create_owned_ephemeral, path, data):
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
        return {broker_id: info for broker_id, (info, _) in (await self.get_broker_registrations()).items()}

    async def get_broker_registrations(self) -> dict[int, tuple[BrokerInfo, int]]:
        """Every live broker's registration and its broker epoch: the czxid of its
        ``/brokers/ids/<id>`` znode, new for each registration (Kafka's broker epoch), so a broker
        that restarted or lost its session is told apart from one that stayed."""
        brokers = {}
        for broker_id in await self.get_live_broker_ids():
            data = await self._get_data(BrokerIdZNode.path(broker_id))
            if data is not None:
                brokers[broker_id] = (BrokerIdZNode.decode(broker_id, data[0]), data[1].czxid)
        return brokers

    # controller ---------------------------------------------------------------------------

    async def try_become_controller(self, broker_id: int) -> int | None:
        """Create ``/controller`` and bump ``/controller_epoch`` atomically. Returns the new
        epoch, or None when another broker (or an older session of this one) is controller or
        won the race; watch the controller znode and try again when it goes away."""
        lease = await self._elect(broker_id)
        self._lease = lease
        return lease.epoch if lease else None

    async def resign_controller(self) -> None:
        """Delete ``/controller`` if this client still holds it (fenced by the epoch)."""
        lease, self._lease = self._lease, None
        if lease is None:
            return
        try:
            await self._fenced(lease, [DeleteOp(ControllerZNode.path())])
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
        await self._create_topic(name, data, config)
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
        for path in [TopicPartitionsZNode.path(topic), *parents]:
            await self._call(self._zk.ensure_path, path)
        ops: list[MultiOp] = [
            CreateOp(TopicPartitionStateZNode.path(topic, p), TopicPartitionStateZNode.encode(s))
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
        results = await self._fenced(lease, [SetDataOp(path, TopicPartitionStateZNode.encode(state), expected_version)])
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
        path = "/latest_producer_id_block"
        while True:
            try:
                data, stat = await self._call(self._zk.get, path)
            except NoNodeError:
                try:
                    await self._call(self._zk.create, path, b"", makepath=True)
                except NodeExistsError:
                    pass
                continue
            start = int(json.loads(data)["block_end"]) + 1 if data else 0
            block = {"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(start + size - 1)}
            try:
                await self._call(self._zk.set, path, json.dumps(block).encode(), stat.version)
                return start, start + size - 1
            except BadVersionError:
                continue

    async def get_partition_state(self, topic: str, partition: int) -> VersionedPartitionState | None:
        data = await self._get_data(TopicPartitionStateZNode.path(topic, partition))
        return (
            None
            if data is None
            else VersionedPartitionState(TopicPartitionStateZNode.decode(data[0]), data[1].version, data[1].mzxid)
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
        await self._set_or_create(ConfigEntityZNode.path(TOPIC_CONFIG, name), ConfigEntityZNode.encode(dict(configs)))
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
        await self._set_or_create(ConfigEntityZNode.path(entity_type, name), ConfigEntityZNode.encode(dict(configs)))
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
        await self._set_or_create(path, data)

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
        paths = await self._subtrees_bottom_up(roots)
        await self._fenced(lease, [DeleteOp(path) for path in paths])

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

    # client quotas, dynamic broker configs and group configs (/config/users, /clients, /ips, /brokers, /groups)

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

    async def get_group_configs(self) -> dict[str, dict[str, str]]:
        """Every group's own configs (/config/groups/<group id>)."""
        return await self._call(read_group_configs, self._zk)

    async def set_group_config(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replace /config/groups/<group id> (empty: remove it), announced to every broker."""
        await self._call(write_group_config, self._zk, group_id, dict(configs))

    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> Watch:
        """``callback(change notification names)`` now and after every config change notice."""
        return await self._watch_children(Paths.CONFIG_CHANGES, list, callback)

    # cluster id ---------------------------------------------------------------------------

    async def get_or_create_cluster_id(self) -> str:
        """The cluster id in ``/cluster/id``, created (random, Kafka's text form) if absent."""
        return await self._retrying(self._cluster_id)

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
            return VersionedPartitionState(TopicPartitionStateZNode.decode(data), stat.version, stat.mzxid)

        return await self._watch_data(TopicPartitionStateZNode.path(topic, partition), decode, callback)

    # internals --------------------------------------------------------------------------

    async def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """One operation on the session, its errors as this module's (NoNode/NodeExists and
        BadVersion pass through for the callers that expect them)."""
        if self._closed:
            raise ZkConnectionError("the ZooKeeper client is closed")
        try:
            return await fn(*args, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError, ZkClientError, ZkDataError):
            raise
        except _CONNECTION_ERRORS as exc:
            raise ZkConnectionError(f"ZooKeeper connection problem: {exc!r}") from exc
        except KazooException as exc:
            raise ZkClientError(f"ZooKeeper operation failed: {exc!r}") from exc

    async def _retrying(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(*args)``, again after a connection problem, for up to a session timeout (what
        kazoo's command retry did for reads and idempotent creates)."""
        deadline = trio.current_time() + self.session_timeout_s
        delay = 0.1
        while True:
            try:
                return await fn(*args)
            except ZkConnectionError:
                if self._closed or trio.current_time() + delay > deadline:
                    raise
            except _CONNECTION_ERRORS as exc:
                if self._closed or trio.current_time() + delay > deadline:
                    raise ZkConnectionError(f"ZooKeeper connection problem: {exc!r}") from exc
            await trio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_S)

    async def _get_data(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self._retrying(self._call, self._zk.get, path)
        except NoNodeError:
            return None

    async def _fenced(self, lease: ControllerLease, ops: Sequence[MultiOp]) -> list[Any]:
        try:
            return await self._fenced_multi(lease, ops)
        except ControllerMovedError:
            if self._lease == lease:
                self._lease = None
            raise

    def _require_lease(self) -> ControllerLease:
        if self._lease is None:
            raise ControllerMovedError("this broker is not the controller")
        return self._lease

    def _on_session_state(self, state: SessionState) -> None:
        if self._closed:
            return
        renewed = state is SessionState.CONNECTED and self.session_state is not SessionState.CONNECTED
        self.session_state = state
        if state is SessionState.LOST:
            self._lease = None
            self.session_lost.set()
        for listener in list(self._session_listeners):
            _guarded(listener, state)
        if renewed:  # watches are read (and set) again, as kazoo's recipes do after a reconnect
            for recipe in list(self._recipes):
                recipe.on_event(None)

    async def _watch(self, read: ReadFn) -> Watch:
        handle = Watch()
        recipe = _Recipe(self, handle, read)
        await self._retrying(recipe.start)
        self._recipes.append(recipe)
        return handle

    async def _watch_children(
        self, path: str, decode: Callable[[list[str]], T], callback: Callable[[T], None]
    ) -> Watch:
        prior: list[list[str]] = []

        async def read(watcher: WatchCallbackT, fired: bool) -> bool:
            try:
                children = await self._call(self._zk.get_children, path, watcher)
            except NoNodeError:
                return False  # as kazoo's ChildrenWatch: the watch ends with its znode
            if not fired and prior and prior[0] == children:
                return True  # set again after a reconnect, nothing changed: as kazoo, no report
            prior[:] = [children]
            try:
                value = decode(children)
            except ZkDataError:
                log.exception("malformed children of %s", path)
                return True
            _guarded(callback, value)
            return True

        return await self._watch(read)

    async def _watch_data(
        self, path: str, decode: Callable[[bytes, ZnodeStat], T], callback: Callable[[T | None], None]
    ) -> Watch:
        last: list[int | None] = []

        async def read(watcher: WatchCallbackT, fired: bool) -> bool:
            while True:
                try:
                    data, stat = await self._call(self._zk.get, path, watcher)
                    break
                except NoNodeError:
                    if await self._call(self._zk.exists, path, watcher) is None:
                        data, stat = None, None
                        break
            version = None if stat is None else stat.mzxid
            if last and last[0] == version:
                return True  # as kazoo's DataWatch: report changes only
            last[:] = [version]
            try:
                value = None if data is None or stat is None else decode(data, stat)
            except ZkDataError:
                log.exception("malformed data in %s", path)
                value = None
            _guarded(callback, value)
            return True

        return await self._watch(read)

    async def _create_owned_ephemeral(self, path: str, data: bytes) -> bool:
        """Create an ephemeral znode; True if it now exists for this session."""
        try:
            await self._call(self._zk.create, path, data, ephemeral=True)
            return True
        except NodeExistsError:
            try:
                current, stat = await self._call(self._zk.get, path)
            except NoNodeError:
                return False
            if stat.ephemeralOwner != self.session_id:
                return False
            if current != data:
                await self._call(self._zk.set, path, data, stat.version)
            return True

    async def _elect(self, broker_id: int) -> ControllerLease | None:
        epoch, epoch_version = await self._read_or_create_epoch()
        results = await self._call(
            self._zk.multi,
            [
                CreateOp(ControllerZNode.path(), ControllerZNode.encode(broker_id, _now_ms()), ephemeral=True),
                SetDataOp(ControllerEpochZNode.path(), ControllerEpochZNode.encode(epoch + 1), epoch_version),
            ],
        )
        failure = _first_failure(results)
        if failure is None:
            return ControllerLease(broker_id, epoch + 1, results[1].version)
        if isinstance(failure, (NodeExistsError, BadVersionError)):
            return await self._lease_already_held(broker_id)
        raise ZkClientError(f"controller election failed: {failure!r}")

    async def _lease_already_held(self, broker_id: int) -> ControllerLease | None:
        """This session's lease if ``/controller`` is already ours (an earlier attempt that
        succeeded although its reply was lost, or a repeated call), else None."""
        try:
            data, stat = await self._call(self._zk.get, ControllerZNode.path())
            epoch_data, epoch_stat = await self._call(self._zk.get, ControllerEpochZNode.path())
        except NoNodeError:
            return None
        if stat.ephemeralOwner != self.session_id or ControllerZNode.decode(data).broker_id != broker_id:
            return None
        return ControllerLease(broker_id, ControllerEpochZNode.decode(epoch_data), epoch_stat.version)

    async def _read_or_create_epoch(self) -> tuple[int, int]:
        path = ControllerEpochZNode.path()
        try:
            data, stat = await self._call(self._zk.get, path)
            return ControllerEpochZNode.decode(data), stat.version
        except NoNodeError:
            pass
        try:
            await self._call(self._zk.create, path, ControllerEpochZNode.encode(INITIAL_CONTROLLER_EPOCH))
            return INITIAL_CONTROLLER_EPOCH, 0
        except NodeExistsError:
            data, stat = await self._call(self._zk.get, path)
            return ControllerEpochZNode.decode(data), stat.version

    async def _fenced_multi(self, lease: ControllerLease, ops: Sequence[MultiOp]) -> list[Any]:
        """Run ``ops`` in one multi-op after checking the controller epoch znode version."""
        results = await self._call(self._zk.multi, [CheckOp(ControllerEpochZNode.path(), lease.epoch_zk_version), *ops])
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMovedError(f"controller epoch {lease.epoch} is stale: a newer controller was elected")
        failure = _first_failure(results)
        if isinstance(failure, (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)):
            raise PartitionStateConflictError(f"conditional write lost a race: {type(failure).__name__}")
        if failure is not None:
            raise ZkClientError(f"ZooKeeper multi-op failed: {failure!r}")
        return results

    async def _create_topic(self, name: str, data: bytes, config: bytes) -> None:
        topic_path = TopicZNode.path(name)
        config_path = ConfigEntityZNode.path(TOPIC_CONFIG, name)
        if await self._call(self._zk.exists, topic_path) is not None:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        ops: list[MultiOp] = []
        if await self._call(self._zk.exists, config_path) is None:
            ops.append(CreateOp(config_path, config))
        else:
            ops.append(SetDataOp(config_path, config))
        ops.append(CreateOp(topic_path, data))
        results = await self._call(self._zk.multi, ops)
        failure = _first_failure(results)
        if isinstance(failure, NodeExistsError):
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if failure is not None:
            raise ZkClientError(f"creating topic {name} failed: {failure!r}")

    async def _set_or_create(self, path: str, data: bytes) -> None:
        try:
            await self._call(self._zk.set, path, data)
        except NoNodeError:
            try:
                await self._call(self._zk.create, path, data)
            except NodeExistsError:
                await self._call(self._zk.set, path, data)

    async def _subtrees_bottom_up(self, roots: Sequence[str]) -> list[str]:
        paths: list[str] = []

        async def visit(path: str) -> None:
            try:
                children = await self._call(self._zk.get_children, path)
            except NoNodeError:
                return
            for child in sorted(children):
                await visit(f"{path}/{child}")
            paths.append(path)

        for root in roots:
            await visit(root)
        return paths

    async def _cluster_id(self) -> str:
        path = ClusterIdZNode.path()
        try:
            return ClusterIdZNode.decode((await self._call(self._zk.get, path))[0])
        except NoNodeError:
            pass
        try:
            # A cluster id has the text form of a topic id: base64 of a random UUID.
            await self._call(self._zk.create, path, ClusterIdZNode.encode(new_topic_id()))
        except NodeExistsError:
            pass
        return ClusterIdZNode.decode((await self._call(self._zk.get, path))[0])


# --- module helpers ---------------------------------------------------------------------------


def _guarded(callback: Callable[[T], None], value: T) -> None:
    """Run a user callback in trio's thread; an exception is logged, never kills the run."""
    try:
        callback(value)
    except Exception:
        log.exception("ZooKeeper watch callback %r failed", callback)


def _now_ms() -> int:
    return clock.wall_ms()  # the simulation's clock there


def _first_failure(results: Sequence[object]) -> Exception | None:
    """The operation error of a failed multi-op (the others report RolledBackError before it
    and RuntimeInconsistency after it)."""
    return next(
        (r for r in results if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))),
        None,
    )


_CONNECTION_ERRORS = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    KazooTimeoutError,
    OperationTimeoutError,
)

"""The composition root: storage, metadata, admin, coordinators and listeners wired together, run on trio."""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import trio

from strom.broker.auth import make_authorizer
from strom.broker.auth.acl import AclBinding
from strom.broker.auth.zkstore import StandaloneAclStore, ZkAclStore
from strom.broker.config import BrokerConfig, Listener
from strom.broker.connection_quota import ConnectionQuotas
from strom.broker.coordinator.group.config import GroupCoordinatorConfig
from strom.broker.coordinator.group.coordinator import GroupCoordinator
from strom.broker.coordinator.share.coordinator import (
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    ShareCoordinatorSettings,
)
from strom.broker.coordinator.share.state_persister import DefaultStatePersister
from strom.broker.coordinator.txn.coordinator import TransactionCoordinator, TxnSettings
from strom.broker.dynamic_config import DynamicConfigs
from strom.broker.fetch_session import FetchManager, FetchSessionCache
from strom.broker.metadata.admin import AdminManager, StandaloneAdminManager
from strom.broker.metadata.cache import MetadataCache, StandaloneMetadataCache, TopicCache
from strom.broker.quotas import QuotaManager
from strom.broker.replica.manager import ReplicaManager
from strom.broker.replica.partition import Partition
from strom.broker.replication_quota import FOLLOWER, LEADER, ReplicationQuota
from strom.broker.request_context import RequestContext
from strom.broker.security import listener_security
from strom.broker.security.credentials import StandaloneCredentials, ZkCredentials
from strom.broker.security.interbroker import inter_broker_security
from strom.broker.server.connection import ConnectionHandler, serve_listener
from strom.broker.server.coordinator_runtime import BrokerCoordinatorRuntime
from strom.broker.server.dispatch import ApiVersionManager, RequestDispatcher
from strom.broker.server.listen import BoundSockets, bind_listeners
from strom.broker.stats import BrokerStats
from strom.broker.topics import METADATA_FILE, TopicInfo, TopicStore, log_config
from strom.storage import clock, files
from strom.storage.errors import StorageError
from strom.storage.faults import storage_error
from strom.storage.log_manager import LogManager

if TYPE_CHECKING:
    from strom.broker.cluster.member import ClusterMember
    from strom.broker.zk.session import ZkSessionFactory

log = logging.getLogger("strom.broker")


def _make_dirs(dirs) -> None:
    """Create the log dirs. The first holds the topic metadata and must work; another that
    cannot be created is taken offline by the log manager while the rest serve (as Kafka)."""
    dirs[0].mkdir(parents=True, exist_ok=True)
    for d in dirs[1:]:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass


_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


class AcceptRetry(trio.abc.Listener):
    """A listener whose accept waits out a lack of descriptors instead of failing: logged once
    per burst with what to do (trio would log every attempt with a traceback), cached segment
    files closed to make room, retried every 100 ms."""

    def __init__(self, inner: trio.SocketListener) -> None:
        self.inner = inner
        self.socket = inner.socket

    async def accept(self):
        while True:
            try:
                return await self.inner.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                storage_error(exc, "accept a connection on", str(self.socket.getsockname()))
                files.cache.shed()
                await trio.sleep(0.1)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass(frozen=True)
class BoundListener:
    listener: Listener
    advertised: Listener


class Network(Protocol):
    """Where the broker listens and how it reaches the other brokers. None (the default) is TCP:
    the configured listeners are bound as sockets and connections are ``trio.open_tcp_stream``.
    The deterministic simulation (``strom.sim``) passes its in-memory network instead."""

    def listen(self, listener: Listener) -> tuple[int, trio.abc.Listener]:
        """Listen as ``listener`` says; the port bound and the listener accepting on it."""
        ...

    async def connect(self, host: str, port: int) -> trio.abc.Stream: ...


class BrokerServer:
    """The composition root: builds the broker's services once, decides once whether it is
    standalone or a ZooKeeper cluster member (which metadata cache and admin manager it uses),
    and runs the listeners, the coordinators and the periodic tasks in one nursery."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        network: Network | None = None,
        run_blocking: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
        zk_sessions: ZkSessionFactory | None = None,
    ):
        self.config = config
        self.zk_sessions = zk_sessions  # how the cluster member opens its ZooKeeper session (None: kazoo)
        self.network = network  # None: TCP sockets
        # how blocking storage work (flush, compaction) leaves the event loop: a worker thread,
        # or (the simulation, which must stay on one thread to be deterministic) in place
        self._run_blocking = run_blocking or trio.to_thread.run_sync
        self.node_id = config.node_id
        self.started = clock.monotonic()
        self.bound: list[BoundListener] = []
        self.replicas = ReplicaManager(self.node_id, config, None)  # its metadata cache: once open
        self.fetch_sessions = FetchManager(FetchSessionCache(config["max.incremental.fetch.session.cache.slots"]))
        self.topics: TopicStore | TopicCache | None = None  # the topic table the metadata cache reads
        self.metadata: MetadataCache | None = None  # once the metadata is open
        self.admin: AdminManager | None = None
        self.request_context: RequestContext | None = None  # what every API handler gets, once open
        self.logs: LogManager | None = None
        self.groups: GroupCoordinator | None = None
        self.authorizer = make_authorizer(config)  # Kafka's ACL authorizer when authorizer.class.name is set
        self.stats = BrokerStats()
        self.console = None  # strom.broker.console.Console when console.listeners is set
        # TLS and SASL settings per listener name, checked now so bad ones stop the start
        self.security = {
            listener.name: listener_security(config, listener.name, listener.security_protocol)
            for listener in config.listeners
        }
        self.credentials: StandaloneCredentials | ZkCredentials | None = None  # SCRAM, once the metadata is open
        self.inter_broker = inter_broker_security(config)  # how this broker connects to the others
        self.txn: TransactionCoordinator | None = None
        self.share_coordinator: ShareCoordinator | None = None  # __share_group_state, once open
        self.share_persister: DefaultStatePersister | None = None
        self.cluster: ClusterMember | None = None
        self.quotas = QuotaManager(
            lambda: getattr(self.topics, "quotas", None) or {},  # the topic store's, once open
            config["quota.window.num"],
            config["quota.window.size.seconds"],
        )
        self.dynamic_configs = DynamicConfigs(  # AlterConfigs on a broker resource
            config, self.node_id, lambda: getattr(self.topics, "broker_configs", None) or {}
        )
        self.connection_quotas = ConnectionQuotas(  # connection_creation_rate, max.connection.creation.rate
            config, self.dynamic_configs, self.quotas
        )

        def topic_configs(name: str) -> dict[str, str] | None:  # a topic's overrides: its throttled replicas
            info = self.topics.topics.get(name) if self.topics is not None else None
            return info.configs if info is not None else None

        self.leader_quota = ReplicationQuota(
            LEADER,
            self.node_id,
            self.dynamic_configs,
            topic_configs,
            config["replication.quota.window.num"],
            config["replication.quota.window.size.seconds"],
        )
        self.follower_quota = ReplicationQuota(
            FOLLOWER,
            self.node_id,
            self.dynamic_configs,
            topic_configs,
            config["replication.quota.window.num"],
            config["replication.quota.window.size.seconds"],
        )
        self.api_versions = ApiVersionManager()
        self.dispatcher = RequestDispatcher(  # its context: the request context, once the metadata is open
            None,
            self.api_versions,
            self.quotas,
            self.stats,
            lambda topic_id: self.metadata.topic_name_by_id(topic_id) if self.metadata is not None else None,
        )
        if config["zookeeper.connect"]:  # standalone or cluster: decided here, once
            from strom.broker.cluster.member import ClusterMember

            self.cluster = ClusterMember(self)
            self.replicas.isr_expansion_listener = self.cluster.follower_caught_up

    # ----------------------------------------------------------------- lifecycle
    def open_storage(self) -> None:
        """Standalone: topics from the metadata file, every partition led here."""
        dirs = self.config.log_dirs
        _make_dirs(dirs)
        self.topics = store = TopicStore(dirs[0] / METADATA_FILE, self.config["cluster.id"])
        self.credentials = StandaloneCredentials(store)
        if self.authorizer is not None:
            self.authorizer.attach(StandaloneAclStore(store), [AclBinding.from_json(row) for row in store.acls])
        self._start_logs(store.cluster_id, {t.name: log_config(self.config, t.configs) for t in store.topics.values()})
        self.metadata = self.replicas.metadata = metadata = StandaloneMetadataCache(
            self.config, store, self.replicas, self.logs, self.advertised_for
        )
        self.admin = StandaloneAdminManager(
            self.config,
            store,
            metadata,
            self.logs,
            self.replicas,
            self.stats,
            self.drop_local_partition,
            self._topic_created,
            self.connection_quotas.configs_changed,
        )
        for info in store.topics.values():
            self._open_partitions(info, range(info.partitions))
        known = {(t.name, p) for t in store.topics.values() for p in range(t.partitions)}
        for key, partition_log in self.logs.all_logs().items():
            if key in known:
                continue
            if partition_log.size_in_bytes == 0 and partition_log.log_start_offset == 0:
                # an interrupted topic creation (logs are made before the metadata is written)
                log.info("removing empty log %s-%d of no known topic (a topic creation was interrupted)", *key)
                self.logs.delete_log(*key)
            else:
                log.warning("log directory %s-%d belongs to no known topic; left untouched", *key)
        self._build_coordinators()
        self.groups.load()
        self._start_txn()
        self.txn.load()
        self.share_coordinator.load()
        self._build_request_context()

    def _topic_created(self, name: str) -> None:
        if name == "__transaction_state" and self.txn is not None:
            self.txn.follow_leadership()
        if name == SHARE_GROUP_STATE_TOPIC and self.share_coordinator is not None:
            self.share_coordinator.follow_leadership()

    def _build_coordinators(self) -> None:
        """The group coordinator over the coordinator runtime, once the metadata cache and the admin
        manager exist (the transaction coordinator follows in _start_txn on the same runtime)."""
        self.coordinator_runtime = BrokerCoordinatorRuntime(
            node_id=self.node_id,
            is_cluster=self.metadata.is_cluster,
            config=self.config,
            replicas=self.replicas,
            metadata=self.metadata,
            admin=self.admin,
            topic_infos=lambda: self.topics.topics,
            on_markers_written=lambda *marker: self.groups.complete_txn(*marker) if self.groups is not None else None,
        )
        self.groups = GroupCoordinator(
            self.coordinator_runtime,
            GroupCoordinatorConfig.from_config(self.config),
            lambda: getattr(self.topics, "group_configs", None) or {},  # the metadata's (the admin manager writes)
        )
        self.share_coordinator = ShareCoordinator(
            self.coordinator_runtime, ShareCoordinatorSettings.from_config(self.config)
        )

        def state_client(host: str, port: int):
            from strom.broker.cluster.client import BrokerClient

            return BrokerClient(host, port, f"strom-share-persister-{self.node_id}", security=self.inter_broker)

        self.share_persister = DefaultStatePersister(self.share_coordinator, state_client)
        self._build_share()

    def _build_share(self) -> None:
        """Share groups' data path: the share partitions and sessions, writing their state through
        the persister: the share coordinator's (`__share_group_state`), here or on the broker that
        leads a share-partition's state."""
        from strom.broker.replica.share_manager import SharePartitionManager, settings_from

        assert self.groups is not None and self.share_persister is not None
        self.share = SharePartitionManager(
            self.replicas,
            self.share_persister,
            settings_from(self.groups.group_configs),
            self.config["group.share.max.share.sessions"],
        )
        self.groups.share.member_gone.append(self.share.member_gone)
        self.groups.share.initialize_state = self.share.initialize_group_partitions

    def _start_txn(self) -> None:
        def client(host: str, port: int):
            from strom.broker.cluster.client import BrokerClient

            return BrokerClient(
                host,
                port,
                f"strom-txn-{self.node_id}",
                security=self.inter_broker,
                connect=self.network.connect if self.network is not None else None,
            )

        self.txn = TransactionCoordinator(
            self.coordinator_runtime, TxnSettings.from_config(self.config), client, self.groups.offsets_partition_count
        )

    async def open_cluster_storage(self) -> None:
        """Cluster member: the cluster id and topics come from ZooKeeper; logs open as replicas."""
        _make_dirs(self.config.log_dirs)
        cluster = self.cluster
        cluster_id = await cluster.connect()
        self.metadata = cluster.metadata
        self.replicas.metadata = cluster.metadata
        from strom.broker.metadata.zk_admin import ZkAdminManager  # kazoo only in cluster mode

        self.admin = ZkAdminManager(
            self.config, cluster.zk, cluster.metadata, cluster, self.connection_quotas.configs_changed
        )
        self.credentials = ZkCredentials(cluster.zk)
        if self.authorizer is not None:
            store = ZkAclStore(cluster.zk)
            self.authorizer.attach(store, await store.load())
            await store.watch(self.authorizer.changed_elsewhere)
        self.topics = cluster.metadata.cache
        self._start_logs(cluster_id, {})
        self._build_coordinators()
        self.groups.load()
        self._start_txn()
        self._build_request_context()

    def _build_request_context(self) -> None:
        self.request_context = RequestContext(
            config=self.config,
            node_id=self.node_id,
            replica_manager=self.replicas,
            metadata=self.metadata,
            admin=self.admin,
            groups=self.groups,
            txn=self.txn,
            authorizer=self.authorizer,
            quotas=self.quotas,
            fetch_sessions=self.fetch_sessions,
            api_versions=self.api_versions,
            logs=self.logs,
            dynamic_configs=self.dynamic_configs,
            leader_quota=self.leader_quota,
            follower_quota=self.follower_quota,
            credentials=self.credentials,
            security=self.security,
            stats=self.stats,
            share_coordinator=self.share_coordinator,
            share_persister=self.share_persister,
            share=self.share,
        )
        self.dispatcher.context = self.request_context

    def _start_logs(self, cluster_id: str, topic_configs: dict) -> None:
        self.logs = LogManager(
            self.config.log_dirs, log_config(self.config, {}), progress=lambda msg: log.info("%s", msg)
        )
        self.logs.startup(broker_id=self.node_id, cluster_id=cluster_id, topic_configs=topic_configs)
        self.replicas.logs = self.logs

    def _open_partitions(self, info: TopicInfo, indexes) -> list[Partition]:
        """Host existing partitions; one whose log is in a dir that is offline stays unhosted
        (its requests are answered KAFKA_STORAGE_ERROR)."""
        config = log_config(self.config, info.configs)
        out = []
        for i in indexes:
            try:
                partition_log = self.logs.get_or_create_log(info.name, i, config, is_new=False)
            except StorageError as exc:
                log.error("partition %s-%d is unavailable: %s", info.name, i, exc)
                continue
            out.append(self.replicas.add(info.name, i, partition_log))
        return out

    async def run(self, prebound: list[BoundSockets] | None = None, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Open the logs, listen, and serve until cancelled; then shut down by a deadline.

        ``prebound``: listening sockets `strom serve` bound before loading the broker (see
        ``broker.listen``); without them the configured listeners are bound here, after the logs
        are open."""
        self._size_file_cache()
        try:
            if self.cluster is None:
                self.open_storage()
            else:
                await self.open_cluster_storage()
        except BaseException:
            for bound in prebound or ():
                bound.close()
            raise
        listeners: list[tuple[str, trio.abc.Listener]] = []
        try:
            async with trio.open_nursery() as nursery:
                listeners = self._open_listeners(prebound)
                for name, listener in listeners:
                    nursery.start_soon(
                        serve_listener,
                        self,
                        name,
                        AcceptRetry(listener) if isinstance(listener, trio.SocketListener) else listener,
                        ConnectionHandler(self, self.security[name]),
                    )
                nursery.start_soon(self._periodic, "flush", self.config["log.flush.scheduler.interval.ms"], self._flush)
                nursery.start_soon(
                    self._periodic,
                    "checkpoint",
                    self.config["log.flush.offset.checkpoint.interval.ms"],
                    self._checkpoint,
                )
                nursery.start_soon(
                    self._periodic, "retention", self.config["log.retention.check.interval.ms"], self._retention
                )
                nursery.start_soon(self._periodic, "log cleaner", self.config["log.cleaner.backoff.ms"], self._clean)
                nursery.start_soon(
                    self._periodic,
                    "producer id expiry",
                    self.config["producer.id.expiration.check.interval.ms"],
                    self._expire_producers,
                )
                nursery.start_soon(self.groups.run)
                nursery.start_soon(self.share.run)
                if self.authorizer is not None and self.cluster is not None:
                    nursery.start_soon(self.authorizer.follow)
                await nursery.start(self.txn.run)
                nursery.start_soon(self.share_coordinator.run)
                if self.cluster is not None:
                    await nursery.start(self.cluster.run)
                if self.config.console_listeners:
                    from strom.broker.console import Console

                    self.console = Console(self)
                    await nursery.start(self.console.run)
                log.info(
                    "broker started node_id=%d listeners=%s startup_ms=%.0f",
                    self.node_id,
                    ",".join(str(b.advertised) for b in self.bound),
                    (clock.monotonic() - self.started) * 1000,
                )
                task_status.started(self.bound)
        finally:
            with trio.CancelScope(shield=True):
                for _, listener in listeners:
                    await listener.aclose()
                if self.cluster is not None:
                    await self.cluster.close()
                self.close()

    def _size_file_cache(self) -> None:
        """Raise the soft open-files limit to the hard one and size the cache of open segment
        files from it (or from log.open.files.max)."""
        before, soft, hard = files.raise_open_files_limit()
        configured = self.config["log.open.files.max"]
        files.cache.resize(configured or files.auto_cache_size(soft))
        log.info(
            "open files limit: soft %d%s, hard %d; up to %d segment/index files kept open",
            soft,
            f" (raised from {before})" if soft != before else "",
            hard,
            files.cache.capacity,
        )

    def close(self) -> None:
        if self.txn is not None:
            self.txn.shutdown()
        if self.share_coordinator is not None:
            self.share_coordinator.shutdown()
        if self.groups is not None:
            self.groups.shutdown()
        if self.logs is not None:
            self.logs.shutdown()
            self.logs = None
            log.info("broker stopped: logs flushed and closed")

    def _open_listeners(self, prebound: list[BoundSockets] | None) -> list[tuple[str, trio.abc.Listener]]:
        """(listener name, trio listener) for every bound socket; advertised addresses by name."""
        advertised = {a.name: a for a in self.config.advertised or []}
        out: list[tuple[str, trio.abc.Listener]] = []
        if self.network is not None:
            for listener in self.config.listeners:
                port, accepting = self.network.listen(listener)
                bound = Listener(listener.name, listener.host, port, listener.security_protocol)
                self.bound.append(BoundListener(bound, advertised.get(listener.name) or bound))
                out.append((listener.name, accepting))
            return out
        bound_sockets = prebound if prebound is not None else bind_listeners(self.config.listeners)
        for bound_socks in bound_sockets:
            listener = bound_socks.listener
            bound = Listener(listener.name, listener.host, bound_socks.port, listener.security_protocol)
            adv = advertised.get(listener.name) or Listener(
                listener.name,
                listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1",
                bound_socks.port,
                listener.security_protocol,
            )
            self.bound.append(BoundListener(bound, adv))
            out.extend(
                (listener.name, trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                for sock in bound_socks.sockets
            )
        return out

    async def _periodic(self, name: str, interval_ms: int, work) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            try:
                await work()
            except Exception:
                log.exception("background task %s failed; will try again", name)

    async def _flush(self) -> None:
        for partition_log in list(self.logs.all_logs().values()):
            if partition_log.recovery_point < partition_log.log_end_offset:
                try:
                    await self._run_blocking(partition_log.flush)
                except StorageError:
                    pass  # logged once per burst by the storage layer; retried next interval

    async def _checkpoint(self) -> None:
        self.logs.checkpoint()

    async def _retention(self) -> None:
        self.logs.cleanup()

    async def _expire_producers(self) -> None:
        removed = self.logs.remove_expired_producers(self.config["producer.id.expiration.ms"])
        if removed:
            log.info("forgot %d producer ids idle for producer.id.expiration.ms", removed)

    async def _clean(self) -> None:
        """Compact `cleanup.policy=compact` logs on a worker thread (the cleaner locks each log
        only to swap segments in)."""
        results = await self._run_blocking(self.logs.clean_compacted)
        for (topic, index), result in results.items():
            if result is not None and not result.aborted and (result.records_removed or result.markers_removed):
                log.info(
                    "compacted %s-%d: %d records and %d transaction markers removed, %d -> %d bytes",
                    topic,
                    index,
                    result.records_removed,
                    result.markers_removed,
                    result.bytes_before,
                    result.bytes_after,
                )

    # ----------------------------------------------------------------- hosting
    def drop_local_partition(self, topic: str, index: int) -> None:
        """Stop hosting a partition and delete its log (its topic is gone, or moved away)."""
        self.logs.delete_log(topic, index)
        self.replicas.remove(topic, index)
        if self.metadata.topic(topic) is None:
            self.stats.forget_topic(topic)  # as Kafka drops a deleted topic's metrics
        self.replicas.notify_data()

    def groups_follow_leadership(self) -> None:
        """Coordinate exactly the groups whose `__consumer_offsets` partition is led here."""
        if self.groups is not None:
            self.groups.follow_leadership()
        if self.txn is not None:
            self.txn.follow_leadership()
        if self.share_coordinator is not None:
            self.share_coordinator.follow_leadership()

    def advertised_for(self, listener_name: str = "PLAINTEXT") -> Listener:
        """The address clients are told to use (before binding: the configured one)."""
        for b in self.bound:
            if b.advertised.name == listener_name:
                return b.advertised
        if self.bound:
            return self.bound[0].advertised
        return (self.config.advertised or self.config.listeners)[0]

"""The broker: storage, topic metadata, partitions and listeners wired together, run on trio."""
from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass
from typing import Sequence

import trio

from strom.protocol.errors import ErrorCode
from strom.storage import files
from strom.storage.config import LogConfig
from strom.storage.faults import storage_error
from strom.storage.errors import StorageError
from strom.storage.log_manager import LogManager

from strom.broker import context
from strom.broker.config import TOPIC_CONFIGS, BrokerConfig, Listener, format_value, parse_topic_config, ConfigError
from strom.broker.errors import TopicError
from strom.broker.fetch_session import FetchManager, FetchSessionCache
from strom.broker.quotas import QuotaManager
from strom.broker.dynamic_config import DynamicConfigs
from strom.broker.connection_quota import ConnectionQuotas
from strom.broker.replication_quota import FOLLOWER, LEADER, ReplicationQuota
from strom.broker.server.listen import BoundSockets, bind_listeners
from strom.broker.coordinator.group.coordinator import GroupCoordinator
from strom.broker.coordinator.txn.coordinator import TransactionCoordinator, TxnSettings
from strom.broker.coordinator.txn.port import BrokerPort
from strom.broker.replica.manager import ReplicaManager
from strom.broker.replica.partition import Partition
from strom.broker.auth import make_authorizer
from strom.broker.auth.acl import AclBinding
from strom.broker.auth.zkstore import StandaloneAclStore, ZkAclStore
from strom.broker.security import listener_security
from strom.broker.security.interbroker import inter_broker_security
from strom.broker.security.credentials import StandaloneCredentials, ZkCredentials
from strom.broker.server.connection import ConnectionHandler, serve_listener
from strom.broker.stats import BrokerStats
from strom.broker.topics import METADATA_FILE, TopicInfo, TopicStore, topic_name_error

log = logging.getLogger("strom.broker")

MAX_PARTITIONS = 10_000


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


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id = config.node_id
        self.started = time.monotonic()
        self.bound: list[BoundListener] = []
        self._settings: dict[tuple[str, str], tuple[dict, object]] = {}
        self.replicas = ReplicaManager(self.node_id, config, self)
        self.fetch_sessions = FetchManager(FetchSessionCache(config["max.incremental.fetch.session.cache.slots"]))
        self.topics: TopicStore | None = None
        self.logs: LogManager | None = None
        self.groups: GroupCoordinator | None = None
        self.authorizer = make_authorizer(config)  # Kafka's ACL authorizer when authorizer.class.name is set
        self.stats = BrokerStats()
        self.console = None  # strom.broker.console.Console when console.listeners is set
        # TLS and SASL settings per listener name, checked now so bad ones stop the start
        self.security = {listener.name: listener_security(config, listener.name, listener.security_protocol)
                         for listener in config.listeners}
        self.credentials = None  # SCRAM credentials, once the metadata is open
        self.inter_broker = inter_broker_security(config)  # how this broker connects to the others
        self.txn: TransactionCoordinator | None = None
        self.cluster = None
        # Fault injection (broker/faults.py): `faults` is the injector only while a fault, pause,
        # version cap or recording is active, so the request path checks one attribute for None.
        self.faults = None
        self.quotas = QuotaManager(self, config["quota.window.num"], config["quota.window.size.seconds"])
        self.dynamic_configs = DynamicConfigs(self)  # AlterConfigs on a broker resource
        self.connection_quotas = ConnectionQuotas(self)  # connection_creation_rate, max.connection.creation.rate
        self.leader_quota = ReplicationQuota(self, LEADER, config["replication.quota.window.num"],
                                             config["replication.quota.window.size.seconds"])
        self.follower_quota = ReplicationQuota(self, FOLLOWER, config["replication.quota.window.num"],
                                               config["replication.quota.window.size.seconds"])
        self._injector = None
        self.control_port: int | None = None  # the test control endpoint's port (control.listener)
        if config["zookeeper.connect"]:
            from strom.broker.cluster.member import ClusterMember
            self.cluster = ClusterMember(self)
            self.replicas.isr_expansion_listener = self.cluster.follower_caught_up

    # ----------------------------------------------------------------- lifecycle
    def open_storage(self) -> None:
        """Standalone: topics from the metadata file, every partition led here."""
        dirs = self.config.log_dirs
        _make_dirs(dirs)
        self.topics = TopicStore(dirs[0] / METADATA_FILE, self.config["cluster.id"])
        self.credentials = StandaloneCredentials(self.topics)
        if self.authorizer is not None:
            store = StandaloneAclStore(self.topics)
            self.authorizer.attach(store, [AclBinding.from_json(row) for row in self.topics.acls])
        self._start_logs(self.topics.cluster_id, {t.name: self.log_config(t.configs) for t in self.topics.topics.values()})
        for info in self.topics.topics.values():
            self._open_partitions(info, range(info.partitions))
        known = {(t.name, p) for t in self.topics.topics.values() for p in range(t.partitions)}
        for key, partition_log in self.logs.all_logs().items():
            if key in known:
                continue
            if partition_log.size_in_bytes == 0 and partition_log.log_start_offset == 0:
                # an interrupted topic creation (logs are made before the metadata is written)
                log.info("removing empty log %s-%d of no known topic (a topic creation was interrupted)", *key)
                self.logs.delete_log(*key)
            else:
                log.warning("log directory %s-%d belongs to no known topic; left untouched", *key)
        self.groups = GroupCoordinator(self)
        self.groups.load()
        self._start_txn()
        self.txn.load()

    def _start_txn(self) -> None:
        def client(host: str, port: int):
            from strom.broker.cluster.client import BrokerClient
            return BrokerClient(host, port, f"strom-txn-{self.node_id}", security=self.inter_broker)

        self.txn = TransactionCoordinator(BrokerPort(self), TxnSettings.from_config(self.config), client,
                                          lambda: self.groups._topic_partitions())

    async def open_cluster_storage(self) -> None:
        """Cluster member: the cluster id and topics come from ZooKeeper; logs open as replicas."""
        _make_dirs(self.config.log_dirs)
        cluster_id = await self.cluster.connect()
        self.credentials = ZkCredentials(self.cluster.zk)
        if self.authorizer is not None:
            store = ZkAclStore(self.cluster.zk)
            self.authorizer.attach(store, await store.load())
            await store.watch(self.authorizer.changed_elsewhere)
        self.topics = self.cluster.cache
        self._start_logs(cluster_id, {})
        self.groups = GroupCoordinator(self)
        self.groups.load()
        self._start_txn()

    def _start_logs(self, cluster_id: str, topic_configs: dict) -> None:
        self.logs = LogManager(self.config.log_dirs, self.log_config({}), progress=lambda msg: log.info("%s", msg))
        self.logs.startup(broker_id=self.node_id, cluster_id=cluster_id, topic_configs=topic_configs)
        self.replicas.logs = self.logs

    def _open_partitions(self, info: TopicInfo, indexes) -> list[Partition]:
        """Host existing partitions; one whose log is in a dir that is offline stays unhosted
        (its requests are answered KAFKA_STORAGE_ERROR)."""
        config = self.log_config(info.configs)
        out = []
        for i in indexes:
            try:
                partition_log = self.logs.get_or_create_log(info.name, i, config, is_new=False)
            except StorageError as exc:
                log.error("partition %s-%d is unavailable: %s", info.name, i, exc)
                continue
            out.append(self.replicas.add(info.name, i, partition_log))
        return out

    async def run(self, prebound: list[BoundSockets] | None = None, *,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
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
        listeners: list[trio.SocketListener] = []
        try:
            async with trio.open_nursery() as nursery:
                listeners = self._open_listeners(prebound)
                for name, listener in listeners:
                    nursery.start_soon(serve_listener, self, name, AcceptRetry(listener),
                                       ConnectionHandler(self, self.security[name]))
                nursery.start_soon(self._periodic, "flush", self.config["log.flush.scheduler.interval.ms"], self._flush)
                nursery.start_soon(self._periodic, "checkpoint",
                                   self.config["log.flush.offset.checkpoint.interval.ms"], self._checkpoint)
                nursery.start_soon(self._periodic, "retention",
                                   self.config["log.retention.check.interval.ms"], self._retention)
                nursery.start_soon(self._periodic, "log cleaner", self.config["log.cleaner.backoff.ms"], self._clean)
                nursery.start_soon(self._periodic, "producer id expiry",
                                   self.config["producer.id.expiration.check.interval.ms"], self._expire_producers)
                nursery.start_soon(self.groups.run)
                if self.authorizer is not None and self.cluster is not None:
                    nursery.start_soon(self.authorizer.follow)
                await nursery.start(self.txn.run)
                if self.cluster is not None:
                    await nursery.start(self.cluster.run)
                if self.config.console_listeners:
                    from strom.broker.console import Console
                    self.console = Console(self)
                    await nursery.start(self.console.run)
                if self.config.control is not None:
                    from strom.broker.control import bind_control, serve_control
                    self.control_port = await nursery.start(serve_control, self, bind_control(self))
                log.info("broker started node_id=%d listeners=%s startup_ms=%.0f", self.node_id,
                         ",".join(str(b.advertised) for b in self.bound),
                         (time.monotonic() - self.started) * 1000)
                task_status.started(self.bound)
        finally:
            with trio.CancelScope(shield=True):
                for _, listener in listeners:
                    await listener.aclose()
                if self.cluster is not None:
                    await self.cluster.close()
                self.close()

    def injector(self):
        """The fault injector of this broker (created on first use)."""
        if self._injector is None:
            from strom.broker.faults import FaultInjector
            self._injector = FaultInjector(self)
        return self._injector

    def _size_file_cache(self) -> None:
        """Raise the soft open-files limit to the hard one and size the cache of open segment
        files from it (or from log.open.files.max)."""
        before, soft, hard = files.raise_open_files_limit()
        configured = self.config["log.open.files.max"]
        files.cache.resize(configured or files.auto_cache_size(soft))
        log.info("open files limit: soft %d%s, hard %d; up to %d segment/index files kept open",
                 soft, f" (raised from {before})" if soft != before else "", hard, files.cache.capacity)

    def close(self) -> None:
        if self.txn is not None:
            self.txn.shutdown()
        if self.groups is not None:
            self.groups.shutdown()
        if self.logs is not None:
            self.logs.shutdown()
            self.logs = None
            log.info("broker stopped: logs flushed and closed")

    def _open_listeners(self, prebound: list[BoundSockets] | None) -> list[tuple[str, trio.SocketListener]]:
        """(listener name, trio listener) for every bound socket; advertised addresses by name."""
        bound_sockets = prebound if prebound is not None else bind_listeners(self.config.listeners)
        advertised = {a.name: a for a in self.config.advertised or []}
        out = []
        for bound_socks in bound_sockets:
            listener = bound_socks.listener
            bound = Listener(listener.name, listener.host, bound_socks.port, listener.security_protocol)
            adv = advertised.get(listener.name) or Listener(
                listener.name, listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1",
                bound_socks.port, listener.security_protocol)
            self.bound.append(BoundListener(bound, adv))
            out.extend((listener.name, trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                       for sock in bound_socks.sockets)
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
                    await trio.to_thread.run_sync(partition_log.flush)
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
        results = await trio.to_thread.run_sync(self.logs.clean_compacted)
        for (topic, index), result in results.items():
            if result is not None and not result.aborted and (result.records_removed or result.markers_removed):
                log.info("compacted %s-%d: %d records and %d transaction markers removed, %d -> %d bytes",
                         topic, index, result.records_removed, result.markers_removed,
                         result.bytes_before, result.bytes_after)

    # ----------------------------------------------------------------- topics
    def log_config(self, overrides: dict[str, str]) -> LogConfig:
        props = {key: format_value(self.config.topic_default(key)) for key in TOPIC_CONFIGS}
        props.update(overrides)
        return LogConfig.from_properties({k: v for k, v in props.items() if v is not None})

    def topic_config_value(self, info: TopicInfo, key: str) -> tuple[str | None, bool]:
        """(value as Kafka shows it, whether it is the broker default)."""
        if key in info.configs:
            return info.configs[key], False
        return format_value(self.config.topic_default(key)), True

    def topic_setting(self, topic: str, key: str):
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

    def validate_topic_configs(self, configs: dict[str, str | None]) -> None:
        for key, value in configs.items():
            if value is None:
                continue
            try:
                parse_topic_config(key, value)
            except ConfigError as exc:
                raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        try:  # what the log itself refuses is refused here, before anything is stored
            self.log_config({k: v for k, v in configs.items() if v is not None})
        except ValueError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str], *, validate_only: bool = False,
                           assignment: Sequence[tuple[int, Sequence[int]]] | None = None) -> TopicInfo | None:
        """Create a topic with ``partitions`` x ``replication_factor`` placed by the broker, or (with
        ``assignment``: (partition index, replica broker ids) pairs, counts -1) exactly as assigned,
        the first replica of each partition its preferred leader."""
        reason = topic_name_error(name)
        if reason:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if name in self.topics.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if not assignment:
            if partitions == -1:
                partitions = self.config["num.partitions"]
            if partitions < 1 or partitions > MAX_PARTITIONS:
                raise TopicError(ErrorCode.INVALID_PARTITIONS,
                                 "Number of partitions was set to an invalid non-positive value." if partitions < 1
                                 else f"Number of partitions must be between 1 and {MAX_PARTITIONS}.")
            if replication_factor == -1:
                replication_factor = self.config["default.replication.factor"]
            if replication_factor < 1:
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        self.validate_topic_configs(configs)
        placed = None
        if assignment:  # Kafka's controller checks these after the configs
            if replication_factor != -1:
                raise TopicError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                 "but replication factor was not set to -1.")
            if partitions != -1:
                raise TopicError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                 "but numPartitions was not set to -1.")
            from strom.broker.metadata.placement import PlacementError, manual_assignment  # kept off a lean start
            try:
                placed = manual_assignment(assignment, await self.registered_brokers())
            except PlacementError as exc:
                raise TopicError(exc.code, exc.message) from None
            if len(placed) > MAX_PARTITIONS:
                raise TopicError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions must be between 1 and {MAX_PARTITIONS}.")
            partitions, replication_factor = len(placed), len(placed[0])
        if self.cluster is not None:
            info = await self.cluster.create_topic(name, partitions, replication_factor, configs, validate_only,
                                                   assignment=placed)
        else:
            if replication_factor > 1:
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Unable to replicate the partition {replication_factor} time(s): The target "
                                 f"replication factor of {replication_factor} cannot be reached because only 1 "
                                 "broker(s) are registered.")
            if validate_only:
                return None
            config = self.log_config(configs)
            logs = self._create_logs(name, range(partitions), config)
            try:
                info = self.topics.create(name, partitions, configs)
            except TopicError:
                self._discard_logs(name, range(partitions))
                raise
            for i, partition_log in enumerate(logs):
                self.replicas.add(name, i, partition_log)
            if name == "__transaction_state" and self.txn is not None:
                self.txn.follow_leadership()
        if info is not None:
            log.info("created topic=%s partitions=%d replication_factor=%d", name, partitions, replication_factor)
        return info

    async def auto_create(self, name: str) -> TopicInfo | None:
        """Create `name` with the broker defaults if auto-creation is on and the name is legal."""
        if not self.config["auto.create.topics.enable"] or topic_name_error(name):
            return None
        try:
            return await self.create_topic(name, -1, -1, {})
        except TopicError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return self.topics.topics.get(name)
            log.warning("auto-creating topic=%s failed: %s", name, exc.message)
            return None

    async def delete_topic(self, name: str) -> None:
        if not self.config["delete.topic.enable"]:
            raise TopicError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        if name not in self.topics.topics:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        info = self.topics.topics[name]
        if self.cluster is not None:
            await self.cluster.delete_topic(name)
        else:
            # logs first, then the metadata: a crash between leaves the topic listed with empty
            # partitions (recreated at start), never partition dirs that belong to no topic
            for partition in list(self.replicas.partitions.values()):
                if partition.topic == name:
                    try:
                        self.drop_local_partition(name, partition.index)
                    except StorageError as exc:
                        raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
            self.topics.delete(name)
            self.stats.forget_topic(name)
        log.info("deleted topic=%s partitions=%d", name, info.partitions)

    def _create_logs(self, topic: str, indexes, config: LogConfig) -> list:
        """Create the partitions' logs; if one cannot be (full disk, no descriptors), remove
        the ones just made and raise TopicError(KAFKA_STORAGE_ERROR)."""
        made = []
        try:
            for i in indexes:
                made.append(self.logs.get_or_create_log(topic, i, config))
        except StorageError as exc:
            self._discard_logs(topic, indexes[:len(made)])
            raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
        return made

    def _discard_logs(self, topic: str, indexes) -> None:
        for i in indexes:
            if self.replicas.partition(topic, i) is None:
                try:
                    self.logs.delete_log(topic, i)
                except (OSError, StorageError) as exc:
                    log.warning("could not remove the log of %s-%d after a failed create: %s", topic, i, exc)

    def drop_local_partition(self, topic: str, index: int) -> None:
        """Stop hosting a partition and delete its log (its topic is gone)."""
        self.logs.delete_log(topic, index)
        self.replicas.remove(topic, index)
        if topic not in self.topics.topics:
            self.stats.forget_topic(topic)  # as Kafka drops a deleted topic's metrics
        self.replicas.notify_data()

    async def create_partitions(self, name: str, count: int, *, validate_only: bool = False,
                                assignment: Sequence[Sequence[int]] | None = None) -> None:
        """Grow ``name`` to ``count`` partitions, placed by the broker or (``assignment``: one
        replica list per new partition, in order) exactly as assigned."""
        info = self.topics.topics.get(name)
        if info is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)  # Kafka: no message
        if count == info.partitions:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {count} partition(s).")
        if count < info.partitions:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {info.partitions} "
                             f"partition(s); {count} would not be an increase.")
        if count > MAX_PARTITIONS:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Number of partitions must be at most {MAX_PARTITIONS}.")
        placed = None
        if assignment is not None:
            replication_factor = self.cluster.replication_factor(name) if self.cluster is not None else 1
            from strom.broker.metadata.placement import PlacementError, added_assignment  # kept off a lean start
            try:
                placed = added_assignment(assignment, await self.registered_brokers(), info.partitions, count,
                                          replication_factor)
            except PlacementError as exc:
                raise TopicError(exc.code, exc.message) from None
        old = info.partitions
        if self.cluster is not None:  # validate_only: also whether the broker could place them
            await self.cluster.create_partitions(name, count, assignment=placed, validate_only=validate_only)
        elif not validate_only:
            config = self.log_config(info.configs)
            logs = self._create_logs(name, range(old, count), config)
            try:
                self.topics.set_partitions(name, count)
            except TopicError:
                self._discard_logs(name, range(old, count))
                raise
            for i, partition_log in zip(range(old, count), logs):
                self.replicas.add(name, i, partition_log)
        if not validate_only:
            log.info("topic=%s partitions %d -> %d", name, old, count)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.validate_topic_configs(configs)
        if self.cluster is not None:
            await self.cluster.set_topic_configs(name, configs)
        else:
            self.topics.set_configs(name, configs)
        self.logs.update_config(name, self.log_config(configs))

    async def set_broker_configs(self, name: str, configs: dict[str, str]) -> None:
        """The dynamic configs of broker `name` ("" for the cluster default), replaced."""
        if self.cluster is not None:
            await self.cluster.set_broker_configs(name, configs)
        else:
            self.topics.set_broker_configs(name, configs)
        self.connection_quotas.configs_changed()  # waiting listeners look again; max.connections
        log.info("dynamic configs of %s are now %s", f"broker {name}" if name else "the cluster default",
                 configs or "none")

    async def allocate_producer_id(self) -> int:
        if self.cluster is not None:
            return await self.cluster.allocate_producer_id()
        return self.topics.allocate_producer_id()

    def groups_follow_leadership(self) -> None:
        """Coordinate exactly the groups whose `__consumer_offsets` partition is led here."""
        if self.groups is not None:
            self.groups.follow_leadership()
        if self.txn is not None:
            self.txn.follow_leadership()

    # ----------------------------------------------------------------- metadata views
    def partition_view(self, topic: str, index: int) -> tuple[int, int, list[int], list[int], list[int]] | None:
        """(leader, leader epoch, replicas, isr, offline replicas) of any partition in the cluster."""
        if self.cluster is None:
            partition = self.replicas.partition(topic, index)
            if partition is None:
                return None
            offline = [self.node_id] if partition.log.offline is not None else []
            return partition.leader_id, partition.leader_epoch, partition.replicas, partition.isr, offline
        state = self.cluster.partition_state(topic, index)
        assignment = self.cluster.view.assignments.get(topic)
        if state is None or assignment is None or index not in assignment.partitions:
            return None
        replicas = list(assignment.partitions[index])
        live = self.cluster.view.brokers
        return state.leader, state.leader_epoch, replicas, list(state.isr), [r for r in replicas if r not in live]

    async def registered_brokers(self) -> set[int]:
        """The broker ids a manual replica assignment may name: those registered in ZooKeeper now
        (as Kafka's controller checks them), standalone this broker."""
        if self.cluster is not None:
            return await self.cluster.registered_brokers()
        return {self.node_id}

    def live_brokers(self, listener_name: str | None = None) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker, at its endpoint on ``listener_name``
        (default: the listener of the current connection, outside of one the first listener), as
        Kafka answers Metadata."""
        if listener_name is None:
            listener_name = context.listener_name.get() or self.config.listeners[0].name
        if self.cluster is not None:
            return self.cluster.live_brokers(listener_name)
        endpoint = self.advertised_for(listener_name)
        return [(self.node_id, endpoint.host, endpoint.port, self.config["broker.rack"])]

    @property
    def controller_id(self) -> int:
        return self.cluster.view.controller_id if self.cluster is not None else self.node_id

    def broker_endpoint(self, broker_id: int, listener_name: str | None = None) -> tuple[str, int] | None:
        for node, host, port, _ in self.live_brokers(listener_name):
            if node == broker_id:
                return host, port
        return None

    # TEMP (issue 22, helper "replica"): the RequestContext fields the Produce and Fetch handlers
    # use, until helper "core"'s RequestContext replaces the Broker as what handlers receive.
    @property
    def replica_manager(self) -> ReplicaManager:
        return self.replicas

    @property
    def metadata(self) -> "Broker":
        return self

    @property
    def is_cluster(self) -> bool:
        return self.cluster is not None

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.topics.get(name) if self.topics is not None else None

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.replicas.partition(topic, index)

    def topic_name_by_id(self, topic_id: bytes) -> str | None:
        info = self.topics.by_id.get(topic_id) if self.topics is not None else None
        return info.name if info is not None else None

    def cluster_id(self) -> str:
        return self.topics.cluster_id

    def advertised_for(self, listener_name: str = "PLAINTEXT") -> Listener:
        """The address clients are told to use (before binding: the configured one)."""
        for b in self.bound:
            if b.advertised.name == listener_name:
                return b.advertised
        if self.bound:
            return self.bound[0].advertised
        return (self.config.advertised or self.config.listeners)[0]

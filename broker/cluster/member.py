"""A broker's part in a ZooKeeper cluster: registration, metadata, leadership, replication.

The broker registers itself under `/brokers/ids/<id>` (ephemeral: it disappears when the
session ends), watches brokers, topics, partition states and config changes, and after every
change reconciles: it re-reads the cluster (`ClusterView`) into the metadata cache
(`strom.broker.metadata.cache.ZkMetadataCache`), lets the controller (if it holds the role) repair
leaders and ISRs, then makes each local replica leader or follower as the partition states say.
Admin changes (topics, configs, quotas, producer ids) are `ZkAdminManager`'s, which waits for
this loop to see them. Followers fetch from their leaders with their replica id (the replica manager's `ReplicaFetcher`,
`strom.broker.replica.fetcher`, started here), exactly
as Kafka's do; leaders track them, move the high watermark, and shrink or expand the ISR in the
partition-state znode with a version-conditional write.

When the ZooKeeper session expires, the ZooKeeper client opens a new one; the broker registers again and runs
for controller again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

from strom.broker.metadata.cache import ClusterView, ZkMetadataCache
from strom.broker.replica.fetcher import ReplicaFetcher
from strom.broker.zk.controller import Controller
from strom.broker.zk.zkclient import (
    KafkaZkClient,
    PartitionStateConflictError,
    SessionState,
    VersionedPartitionState,
    ZkClientError,
)
from strom.broker.zk.zkdata import NO_LEADER, BrokerInfo, EndPoint, PartitionState
from strom.storage.errors import StorageError

from ..topics import log_config

if TYPE_CHECKING:
    from strom.broker.config import BrokerConfig
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.replica.partition import Partition
    from strom.broker.replication_quota import ReplicationQuota
    from strom.broker.stats import BrokerStats
    from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.cluster")

FETCH_BACKOFF_S = 1.0  # before reconciling again after ZooKeeper failed
RECONCILE_DEBOUNCE_S = 0.02


class MemberHost(Protocol):
    """What a cluster member uses of the broker that hosts it (the composition root provides it):
    the replicas it makes leaders and followers, their logs, the counters it keeps, and the two
    callbacks for partitions that leave this broker and leaderships that move."""

    node_id: int
    config: BrokerConfig
    replicas: ReplicaManager
    logs: LogManager | None
    stats: BrokerStats
    follower_quota: ReplicationQuota
    inter_broker: Any  # how this broker connects to the others (strom.broker.security.interbroker)
    connection_quotas: Any  # configs_changed(): dynamic broker configs may have changed
    bound: Sequence[Any]  # the listeners as bound, each with its advertised address

    def drop_local_partition(self, topic: str, index: int) -> None: ...

    def groups_follow_leadership(self) -> None: ...


class ClusterMember:
    def __init__(self, broker: MemberHost):
        self.broker = broker
        self.node_id = broker.node_id
        self.config = broker.config
        self.zk: KafkaZkClient | None = None
        self.metadata = ZkMetadataCache(self.config, "")  # replaced by connect() with the cluster's id
        self.controller = Controller(self)
        # this broker's epoch: the czxid of its current registration (0 before it registered)
        self.broker_epoch = 0
        self._dirty = trio.Event()
        self._changed = trio.Event()
        self.fetcher = ReplicaFetcher(
            broker.replicas,
            broker.config,
            broker.follower_quota,
            self.leader_endpoint,
            broker.inter_broker,
            broker.network.connect if broker.network is not None else None,
        )
        broker.replicas.fetcher = self.fetcher
        self._watched: set[tuple[str, int]] = set()
        self._nursery: trio.Nursery | None = None
        self._session_lost = False
        self._registered = False  # a registration of this process was written (later ones follow a session expiry)
        self._unloadable: set[tuple[str, int]] = set()
        self._published_offline: frozenset = frozenset()

    # ----------------------------------------------------------------- start-up
    async def connect(self) -> str:
        """Open the ZooKeeper session; the cluster id (created by the first broker)."""
        connect = self.config["zookeeper.connect"]
        timeout_s = self.config["zookeeper.session.timeout.ms"] / 1000
        try:
            self.zk = await KafkaZkClient.connect(
                connect,
                session_timeout_s=timeout_s,
                connect_timeout_s=self.config["zookeeper.connection.timeout.ms"] / 1000,
                session_factory=self.broker.zk_sessions,
            )
        except Exception as exc:
            from ..config import ConfigError

            raise ConfigError(f"zookeeper.connect={connect}: cannot connect ({exc}); is ZooKeeper running?") from None
        cluster_id = await self.zk.get_or_create_cluster_id()
        self.metadata = ZkMetadataCache(self.config, cluster_id)
        return cluster_id

    @property
    def view(self) -> ClusterView:
        """The last read of the cluster (the metadata cache's)."""
        return self.metadata.view

    @view.setter
    def view(self, view: ClusterView) -> None:
        self.metadata.update(view)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Register, watch, and keep reconciling until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.zk.add_session_listener(self._on_session)
            await self._register()
            self._token = trio.lowlevel.current_trio_token()
            self.broker.logs.dir_failure_listener = self._log_dir_failed
            await self.zk.delete_log_dir_events(self.node_id)  # restarted: dirs checked afresh
            self._published_offline = frozenset()
            await self.zk.watch_log_dir_events(lambda names: self.mark_dirty())
            await self.zk.watch_broker_ids(lambda ids: self.mark_dirty())
            await self.zk.watch_topics(lambda names: self.mark_dirty())
            await self.zk.watch_topics_to_delete(lambda names: self.mark_dirty())
            await self.zk.watch_controller(lambda info: self._controller_changed(info))
            await self._watch_config_changes()
            await nursery.start(self.fetcher.run)
            await self._reconcile()
            nursery.start_soon(self._reconcile_loop)
            nursery.start_soon(self._isr_loop)
            task_status.started()

    async def close(self) -> None:
        if self.zk is not None:
            await self.zk.close()

    async def _register(self) -> None:
        endpoints = tuple(
            EndPoint(b.advertised.name, b.advertised.host, b.advertised.port, b.advertised.security_protocol)
            for b in self.broker.bound
        )
        logs = self.broker.logs
        info = BrokerInfo(
            self.node_id,
            endpoints,
            rack=self.config["broker.rack"],
            timestamp_ms=int(trio.current_time() * 1000),
            # a re-registration after a session expiry is the same process: nothing it wrote is lost
            unclean_shutdown=not self._registered and logs is not None and not logs.had_clean_shutdown,
        )
        await self.zk.register_broker(info, wait_s=self.zk.session_timeout_s * 2)
        self._registered = True
        mine = (await self.zk.get_broker_registrations()).get(self.node_id)
        if mine is not None:
            self.broker_epoch = mine[1]
        await self.zk.try_become_controller(self.node_id)
        log.info("registered broker id=%d endpoints=%s", self.node_id, [e.connection_string for e in endpoints])

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            log.warning("ZooKeeper session expired; registering again when reconnected")
            self._session_lost = True
        elif state is SessionState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._nursery.start_soon(self._reregister)

    async def _reregister(self) -> None:
        try:
            await self._register()
        except ZkClientError as exc:
            log.error("registering again failed: %s", exc)
        self.mark_dirty()

    def _controller_changed(self, info) -> None:
        if info is None and self._nursery is not None:
            self._nursery.start_soon(self._run_for_controller)
        self.mark_dirty()

    async def _run_for_controller(self) -> None:
        try:
            epoch = await self.zk.try_become_controller(self.node_id)
        except ZkClientError as exc:
            log.warning("controller election failed: %s", exc)
            return
        if epoch is not None:
            log.info("became the controller epoch=%d", epoch)
        self.mark_dirty()

    async def _watch_config_changes(self) -> None:
        await self.zk.watch_config_changes(lambda children: self.mark_dirty())

    def mark_dirty(self) -> None:
        self._dirty.set()

    # ----------------------------------------------------------------- reconcile
    async def _reconcile_loop(self) -> None:
        while True:
            await self._dirty.wait()
            await trio.sleep(RECONCILE_DEBOUNCE_S)
            self._dirty = trio.Event()
            try:
                await self._reconcile()
            except (ZkClientError, StorageError) as exc:
                log.warning("reconciling with ZooKeeper failed (%s); retrying", exc)
                await trio.sleep(FETCH_BACKOFF_S)
                self.mark_dirty()

    def _log_dir_failed(self, log_dir, partitions) -> None:
        """A log dir went offline (called on any thread): publish its replicas at the next
        reconcile, so the controller moves leadership away and drops them from the ISRs."""
        token = getattr(self, "_token", None)
        if token is not None:
            try:
                token.run_sync_soon(self.mark_dirty)
            except trio.RunFinishedError:
                pass

    def _offline_local(self) -> frozenset:
        """Hosted replicas whose log dir failed, and known partitions with no log because
        their dir was offline at start."""
        return frozenset(
            key for key, p in self.broker.replicas.partitions.items() if p.log.offline is not None
        ) | frozenset(self._unloadable)

    async def _publish_offline(self) -> None:
        offline = self._offline_local()
        if offline and offline != self._published_offline:
            await self.zk.create_log_dir_event(self.node_id, offline)
            log.warning("announced %d replicas in failed log dirs to the controller", len(offline))
            self._published_offline = offline

    async def read_view(self) -> ClusterView:
        zk = self.zk
        registrations = await zk.get_broker_registrations()
        view = ClusterView(
            brokers={b: info for b, (info, _) in registrations.items()},
            broker_epochs={b: epoch for b, (_, epoch) in registrations.items()},
            unclean_starts={b for b, (info, _) in registrations.items() if info.unclean_shutdown},
            to_delete=await zk.get_topics_to_delete(),
        )
        for _, broker_id, partitions in await zk.get_log_dir_events():
            for key in partitions:
                view.offline_replicas.setdefault(key, set()).add(broker_id)
        controller = await zk.get_controller_id()
        view.controller_id = -1 if controller is None else controller
        view.quotas = await zk.get_client_quotas()
        view.broker_configs = await zk.get_broker_configs()
        view.group_configs = await zk.get_group_configs()
        for name in await zk.get_topics():
            assignment = await zk.get_topic_assignment(name)
            if assignment is None:
                continue
            view.assignments[name] = assignment
            view.configs[name] = await zk.get_topic_config(name)
            for partition, state in (await zk.get_partition_states(name)).items():
                view.states[(name, partition)] = state
        return view

    async def _reconcile(self) -> None:
        await self._publish_offline()
        view = await self.read_view()
        if await self.controller.reconcile(view):
            view = await self.read_view()
        self.metadata.update(view)
        self.broker.connection_quotas.configs_changed()  # dynamic broker configs may have changed
        await self._watch_new_partitions(view)
        self._apply_local(view)
        self._changed.set()
        self._changed = trio.Event()
        self.fetcher.metadata_changed()
        self.broker.replicas.notify_data()

    async def _watch_new_partitions(self, view: ClusterView) -> None:
        """Watch every partition's state znode, also those the controller has yet to create."""
        for name, assignment in view.assignments.items():
            for index in assignment.partitions:
                if (name, index) not in self._watched:
                    self._watched.add((name, index))
                    await self.zk.watch_partition_state(name, index, lambda state: self.mark_dirty())
        for name in view.assignments:
            if (name, -1) not in self._watched:
                self._watched.add((name, -1))
                await self.zk.watch_topic_assignment(name, lambda assignment: self.mark_dirty())
        gone = {key for key in self._watched if key[0] not in view.assignments}
        self._watched -= gone

    def _apply_local(self, view: ClusterView) -> None:
        broker = self.broker
        hosted = set()
        for name, assignment in view.assignments.items():
            if name in view.to_delete:
                continue
            for index, replicas in assignment.partitions.items():
                if self.node_id not in replicas:
                    continue
                hosted.add((name, index))
                state = view.states.get((name, index))
                partition = broker.replicas.partition(name, index)
                if partition is None:
                    is_new = state is None or state.state.leader_epoch == 0
                    try:
                        partition_log = broker.logs.get_or_create_log(
                            name, index, log_config(self.config, view.configs.get(name, {})), is_new=is_new
                        )
                    except StorageError as exc:  # its dir is offline (or full): an offline replica
                        if (name, index) not in self._unloadable:
                            log.warning("cannot host %s-%d: %s", name, index, exc)
                        self._unloadable.add((name, index))
                        continue
                    self._unloadable.discard((name, index))
                    partition = broker.replicas.add(
                        name, index, partition_log, leader=NO_LEADER, leader_epoch=-1, replicas=list(replicas), isr=[]
                    )
                if state is not None:
                    self._apply_state(partition, list(replicas), state)
        for key in list(broker.replicas.partitions):
            if key not in hosted and key[0] not in view.assignments:
                broker.drop_local_partition(*key)
            elif key not in hosted and key[0] not in view.to_delete and key[1] in view.assignments[key[0]].partitions:
                log.info("%s-%d was reassigned away from this broker; deleting its replica", *key)
                broker.drop_local_partition(*key)
        self.fetcher.follow(
            {
                p.leader_id
                for p in broker.replicas.partitions.values()
                if not p.is_leader and p.leader_id != NO_LEADER and p.leader_id in view.brokers
            }
        )
        broker.groups_follow_leadership()

    def _apply_state(self, partition: Partition, replicas: list[int], versioned: VersionedPartitionState) -> None:
        state = versioned.state
        if state.leader == self.node_id and versioned.mzxid < self.broker_epoch:
            # written before this registration: the leadership of an earlier life of this broker
            # (restarted, or its session expired), whose unflushed records may be gone; the
            # controller elects again (a new epoch) and this broker leads or follows then
            log.info(
                "not leading %s-%d in epoch %d: it was given to an earlier registration of this broker",
                partition.topic,
                partition.index,
                state.leader_epoch,
            )
            return
        if state.leader == self.node_id:
            if not partition.is_leader or partition.leader_epoch != state.leader_epoch:
                partition.log.leader_epoch_cache.assign(state.leader_epoch, partition.log.log_end_offset)
                partition.become_leader(state.leader_epoch, replicas, list(state.isr), versioned.zk_version)
                self.broker.stats.leader_elections += 1
                log.info(
                    "leader of %s-%d epoch=%d isr=%s",
                    partition.topic,
                    partition.index,
                    state.leader_epoch,
                    list(state.isr),
                )
            else:
                partition.replicas, partition.isr = replicas, list(state.isr)
                partition.state_version = versioned.zk_version
                partition.maybe_advance_high_watermark()
        else:
            if partition.leader_id != state.leader or partition.leader_epoch != state.leader_epoch:
                log.info(
                    "follower of %s-%d leader=%d epoch=%d",
                    partition.topic,
                    partition.index,
                    state.leader,
                    state.leader_epoch,
                )
            partition.become_follower(state.leader, state.leader_epoch, replicas, list(state.isr), versioned.zk_version)

    # ----------------------------------------------------------------- leader duties
    def follower_caught_up(self, partition: Partition) -> None:
        if partition.caught_up_replicas() and self._nursery is not None:
            self._nursery.start_soon(self._expand_isr, partition)

    async def _expand_isr(self, partition: Partition) -> None:
        joining = partition.caught_up_replicas()
        if joining:
            await self._write_isr(partition, partition.isr + [r for r in joining if r not in partition.isr])

    async def _isr_loop(self) -> None:
        max_lag = self.config["replica.lag.time.max.ms"]
        while True:
            await trio.sleep(max_lag / 2000)
            for partition in list(self.broker.replicas.partitions.values()):
                if partition.is_leader:
                    lagging = partition.lagging_replicas(max_lag)
                    if lagging:
                        log.info(
                            "shrinking ISR of %s-%d: %s lag more than %d ms",
                            partition.topic,
                            partition.index,
                            lagging,
                            max_lag,
                        )
                        await self._write_isr(partition, [r for r in partition.isr if r not in lagging])

    async def _write_isr(self, partition: Partition, isr: list[int]) -> None:
        if sorted(isr) == sorted(partition.isr) or not partition.is_leader:
            return
        current = self.view.states.get((partition.topic, partition.index))
        controller_epoch = current.state.controller_epoch if current else 0
        state = PartitionState(self.node_id, partition.leader_epoch, tuple(isr), controller_epoch)
        try:
            version = await self.zk.update_isr(partition.topic, partition.index, state, partition.state_version)
        except PartitionStateConflictError:
            self.mark_dirty()
            return
        except ZkClientError as exc:
            log.warning("ISR update of %s-%d failed: %s", partition.topic, partition.index, exc)
            return
        log.info("ISR of %s-%d is now %s", partition.topic, partition.index, isr)
        if len(isr) < len(partition.isr):
            self.broker.stats.isr_shrinks += 1
        elif len(isr) > len(partition.isr):
            self.broker.stats.isr_expands += 1
        partition.isr, partition.state_version = list(isr), version
        partition.maybe_advance_high_watermark()
        self.broker.replicas.notify_data()

    # ----------------------------------------------------------------- followers
    def leader_endpoint(self, leader: int) -> tuple[str, int] | None:
        """Where the replica fetcher reaches ``leader``: its inter-broker listener (or its first)."""
        info = self.view.brokers.get(leader)
        if info is None:
            return None
        endpoint = info.endpoint(self.config.inter_broker_listener) or info.endpoints[0]
        return endpoint.host, endpoint.port

    # ----------------------------------------------------------------- for the admin manager
    async def changed(self) -> None:
        """Until the next reconcile has applied what ZooKeeper holds."""
        await self._changed.wait()

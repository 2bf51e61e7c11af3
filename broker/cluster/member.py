"""A broker's part in a ZooKeeper cluster: registration, metadata, leadership, replication.

The broker registers itself under `/brokers/ids/<id>` (ephemeral: it disappears when the
session ends), watches brokers, topics, partition states and config changes, and after every
change reconciles: it re-reads the cluster (`ClusterView`) into the metadata cache
(`strom.broker.metadata.cache.ZkMetadataCache`), lets the controller (if it holds the role) repair
leaders and ISRs, then makes each local replica leader or follower as the partition states say.
Admin changes (topics, configs, quotas, producer ids) are `ZkAdminManager`'s, which waits for
this loop to see them. Followers fetch from their leaders with their replica id (`ReplicaFetcher`), exactly
as Kafka's do; leaders track them, move the high watermark, and shrink or expand the ISR in the
partition-state znode with a version-conditional write.

When the ZooKeeper session expires, kazoo opens a new one; the broker registers again and runs
for controller again.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import validate_batches
from strom.protocol.records.errors import RecordsError
from strom.protocol.schema import ApiKey
from strom.storage.errors import StorageError

from ..topics import log_config
from .client import BrokerClient, BrokerUnavailable
from strom.broker.zk.controller import Controller
from strom.broker.metadata.cache import ClusterView, ZkMetadataCache
from strom.broker.zk.zkclient import (KafkaZkClient, PartitionStateConflictError, SessionState,
                                      VersionedPartitionState, ZkClientError)
from ..fetch_session import FetchSessionHandler
from strom.broker.zk.zkdata import NO_LEADER, BrokerInfo, EndPoint, PartitionState

if TYPE_CHECKING:
    from strom.broker.server.root import BrokerServer
    from strom.broker.replica.manager import Partition

log = logging.getLogger("strom.cluster")

FETCH_VERSION = 12
FETCH_WAIT_MS = 500
FETCH_BACKOFF_S = 1.0
RECONCILE_DEBOUNCE_S = 0.02


class ClusterMember:
    def __init__(self, broker: "BrokerServer"):
        self.broker = broker
        self.node_id = broker.node_id
        self.config = broker.config
        self.zk: KafkaZkClient | None = None
        self.metadata = ZkMetadataCache(self.config, "")  # replaced by connect() with the cluster's id
        self.controller = Controller(self)
        self._dirty = trio.Event()
        self._changed = trio.Event()
        self._fetchers: dict[int, trio.CancelScope] = {}
        self._watched: set[tuple[str, int]] = set()
        self._nursery: trio.Nursery | None = None
        self._session_lost = False
        self._unloadable: set[tuple[str, int]] = set()
        self._published_offline: frozenset = frozenset()

    # ----------------------------------------------------------------- start-up
    async def connect(self) -> str:
        """Open the ZooKeeper session; the cluster id (created by the first broker)."""
        connect = self.config["zookeeper.connect"]
        timeout_s = self.config["zookeeper.session.timeout.ms"] / 1000
        try:
            self.zk = await KafkaZkClient.connect(connect, session_timeout_s=timeout_s,
                                                  connect_timeout_s=self.config["zookeeper.connection.timeout.ms"] / 1000)
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
            await self._reconcile()
            nursery.start_soon(self._reconcile_loop)
            nursery.start_soon(self._isr_loop)
            task_status.started()

    async def close(self) -> None:
        if self.zk is not None:
            await self.zk.close()

    async def _register(self) -> None:
        endpoints = tuple(EndPoint(b.advertised.name, b.advertised.host, b.advertised.port,
                                   b.advertised.security_protocol)
                          for b in self.broker.bound)
        info = BrokerInfo(self.node_id, endpoints, rack=self.config["broker.rack"],
                          timestamp_ms=int(trio.current_time() * 1000))
        await self.zk.register_broker(info, wait_s=self.zk.session_timeout_s * 2)
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
        return frozenset(key for key, p in self.broker.replicas.partitions.items() if p.log.offline is not None) \
            | frozenset(self._unloadable)

    async def _publish_offline(self) -> None:
        offline = self._offline_local()
        if offline and offline != self._published_offline:
            await self.zk.create_log_dir_event(self.node_id, offline)
            log.warning("announced %d replicas in failed log dirs to the controller", len(offline))
            self._published_offline = offline

    async def read_view(self) -> ClusterView:
        zk = self.zk
        view = ClusterView(brokers=await zk.get_all_brokers(), to_delete=await zk.get_topics_to_delete())
        for _, broker_id, partitions in await zk.get_log_dir_events():
            for key in partitions:
                view.offline_replicas.setdefault(key, set()).add(broker_id)
        controller = await zk.get_controller_id()
        view.controller_id = -1 if controller is None else controller
        view.quotas = await zk.get_client_quotas()
        view.broker_configs = await zk.get_broker_configs()
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
                partition = broker.replicas.get(name, index)
                if partition is None:
                    is_new = state is None or state.state.leader_epoch == 0
                    try:
                        partition_log = broker.logs.get_or_create_log(
                            name, index, log_config(self.config, view.configs.get(name, {})), is_new=is_new)
                    except StorageError as exc:  # its dir is offline (or full): an offline replica
                        if (name, index) not in self._unloadable:
                            log.warning("cannot host %s-%d: %s", name, index, exc)
                        self._unloadable.add((name, index))
                        continue
                    self._unloadable.discard((name, index))
                    partition = broker.replicas.add(name, index, partition_log, leader=NO_LEADER, leader_epoch=-1,
                                                    replicas=list(replicas), isr=[])
                if state is not None:
                    self._apply_state(partition, list(replicas), state)
        for key in list(broker.replicas.partitions):
            if key not in hosted and key[0] not in view.assignments:
                broker.drop_local_partition(*key)
            elif (key not in hosted and key[0] not in view.to_delete
                  and key[1] in view.assignments[key[0]].partitions):
                log.info("%s-%d was reassigned away from this broker; deleting its replica", *key)
                broker.drop_local_partition(*key)
        for leader in {p.leader_id for p in broker.replicas.partitions.values()
                       if not p.is_leader and p.leader_id != NO_LEADER}:
            if leader not in self._fetchers and leader in view.brokers:
                self._start_fetcher(leader)
        broker.groups_follow_leadership()

    def _apply_state(self, partition: "Partition", replicas: list[int], versioned: VersionedPartitionState) -> None:
        state = versioned.state
        if state.leader == self.node_id:
            if not partition.is_leader or partition.leader_epoch != state.leader_epoch:
                partition.log.leader_epoch_cache.assign(state.leader_epoch, partition.log.log_end_offset)
                partition.become_leader(state.leader_epoch, replicas, list(state.isr), versioned.zk_version)
                self.broker.stats.leader_elections += 1
                log.info("leader of %s-%d epoch=%d isr=%s", partition.topic, partition.index,
                         state.leader_epoch, list(state.isr))
            else:
                partition.replicas, partition.isr = replicas, list(state.isr)
                partition.state_version = versioned.zk_version
                partition.maybe_advance_high_watermark()
        else:
            if partition.leader_id != state.leader or partition.leader_epoch != state.leader_epoch:
                log.info("follower of %s-%d leader=%d epoch=%d", partition.topic, partition.index,
                         state.leader, state.leader_epoch)
            partition.become_follower(state.leader, state.leader_epoch, replicas, list(state.isr),
                                      versioned.zk_version)

    # ----------------------------------------------------------------- leader duties
    def follower_caught_up(self, partition: "Partition") -> None:
        if partition.caught_up_replicas() and self._nursery is not None:
            self._nursery.start_soon(self._expand_isr, partition)

    async def _expand_isr(self, partition: "Partition") -> None:
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
                        log.info("shrinking ISR of %s-%d: %s lag more than %d ms", partition.topic,
                                 partition.index, lagging, max_lag)
                        await self._write_isr(partition, [r for r in partition.isr if r not in lagging])

    async def _write_isr(self, partition: "Partition", isr: list[int]) -> None:
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
    def _start_fetcher(self, leader: int) -> None:
        scope = trio.CancelScope()
        self._fetchers[leader] = scope
        self._nursery.start_soon(self._fetch_loop, leader, scope)

    def _followed(self, leader: int) -> list["Partition"]:
        return [p for p in self.broker.replicas.partitions.values()
                if p.leader_id == leader and not p.is_leader and p.log.offline is None]

    async def _fetch_loop(self, leader: int, scope: trio.CancelScope) -> None:
        client = None
        session = FetchSessionHandler()  # an incremental fetch session with this leader (KIP-227)
        with scope:
            try:
                while True:
                    partitions = self._followed(leader)
                    info = self.view.brokers.get(leader)
                    if not partitions or info is None:
                        await self._changed.wait()
                        continue
                    endpoint = info.endpoint(self.config.inter_broker_listener) or info.endpoints[0]
                    if client is None or (client.host, client.port) != (endpoint.host, endpoint.port):
                        if client is not None:
                            await client.close()
                        client = BrokerClient(endpoint.host, endpoint.port, f"strom-replica-{self.node_id}",
                                              security=self.broker.inter_broker)
                        session.reset()
                    try:
                        await self._fetch_once(client, partitions, session)
                    except BrokerUnavailable as exc:
                        session.reset()
                        log.debug("fetching from broker %d failed: %s", leader, exc)
                        with trio.move_on_after(FETCH_BACKOFF_S):
                            await self._changed.wait()
            finally:
                self._fetchers.pop(leader, None)
                if client is not None:
                    with trio.CancelScope(shield=True):
                        await client.close()

    async def _fetch_once(self, client: BrokerClient, partitions: list["Partition"],
                          session: FetchSessionHandler | None = None) -> None:
        wanted: dict[tuple[str, int], dict] = {}
        quota = self.broker.follower_quota
        throttling = quota.active()
        now = trio.current_time()
        held = [p for p in partitions if not p.fetch_caught_up and quota.is_throttled(p.topic, p.index)
                and quota.exceeded(now)] if throttling else []
        if held:  # Kafka's follower throttle: out-of-sync throttled partitions wait for the rate to fall
            partitions = [p for p in partitions if p not in held]
            if not partitions:
                with trio.move_on_after(min(max(quota.delay(now), 0.01), FETCH_BACKOFF_S)):
                    await self._changed.wait()
                return
        for p in partitions:
            epoch = p.log.latest_epoch()
            wanted[(p.topic, p.index)] = {
                "partition": p.index, "current_leader_epoch": p.leader_epoch,
                "fetch_offset": p.log.log_end_offset, "last_fetched_epoch": epoch if epoch is not None else -1,
                "log_start_offset": p.log.log_start_offset,
                "partition_max_bytes": self.config["replica.fetch.max.bytes"]}
        session = session if session is not None else FetchSessionHandler()
        session_id, session_epoch, send, forget = session.build(wanted)
        by_topic: dict[str, list] = {}
        for (topic, _), fields in send.items():
            by_topic.setdefault(topic, []).append(fields)
        forgotten: dict[str, list[int]] = {}
        for topic, index in forget:
            forgotten.setdefault(topic, []).append(index)
        body = {"replica_id": self.node_id, "max_wait_ms": FETCH_WAIT_MS, "min_bytes": 1,
                "max_bytes": self.config["replica.fetch.response.max.bytes"], "isolation_level": 0,
                "session_id": session_id, "session_epoch": session_epoch,
                "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten.items()]}
        try:
            response = await client.request(ApiKey.FETCH, FETCH_VERSION, body, timeout_s=FETCH_WAIT_MS / 1000 + 30)
        except BaseException:
            session.reset()
            raise
        session.handle(response.error_code, response.session_id)
        if response.error_code != ErrorCode.NONE:
            log.debug("fetch from the leader answered %s", ErrorCode(response.error_code).name)
            return
        progressed: list[tuple[str, int]] = []  # partitions whose data or high watermark changed
        throttled_bytes = 0
        for topic in response.responses:
            for data in topic.partitions:
                partition = self.broker.replicas.get(topic.topic, data.partition_index)
                if partition is None or partition.is_leader:
                    continue
                if data.records and quota.is_throttled(partition.topic, partition.index):  # measured as Kafka: rate or not
                    throttled_bytes += len(data.records)
                try:
                    if self._apply_fetched(partition, data):
                        progressed.append((partition.topic, partition.index))
                except StorageError as exc:
                    # cannot write (full or failed dir): this replica falls behind and the leader
                    # drops it from the ISR; the broker and its other partitions carry on
                    log.debug("follower append to %s-%d failed: %s", partition.topic, partition.index, exc)
                if data.error_code == ErrorCode.NONE:
                    partition.fetch_caught_up = partition.log.log_end_offset >= data.high_watermark
        quota.record(throttled_bytes, trio.current_time())
        if progressed:  # wakes the long polls of consumers fetching these from this follower (KIP-392)
            self.broker.replicas.notify_data(progressed)
        elif any(d.error_code for t in response.responses for d in t.partitions):
            with trio.move_on_after(FETCH_BACKOFF_S):
                await self._changed.wait()

    def _apply_fetched(self, partition: "Partition", data) -> bool:
        plog = partition.log
        code = data.error_code
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if plog.log_end_offset < data.log_start_offset:
                plog.truncate_fully_and_start_at(data.log_start_offset)
            else:
                plog.truncate_to(min(plog.log_end_offset, max(data.high_watermark, 0)))
            return True
        if code != ErrorCode.NONE:
            return False
        diverging = data.diverging_epoch
        if diverging.end_offset >= 0 and diverging.epoch >= 0:
            target = truncation_offset(plog, diverging.epoch, diverging.end_offset)
            log.info("truncating %s-%d to %d (diverged from the leader at epoch %d)",
                     partition.topic, partition.index, target, diverging.epoch)
            plog.truncate_to(target)
            return True
        appended = False
        records = data.records
        if records:
            try:
                headers = validate_batches(_whole_batches(records))
            except RecordsError as exc:
                log.warning("bad data from leader for %s-%d: %s", partition.topic, partition.index, exc)
                return False
            if headers:
                whole = memoryview(records)[:sum(h.size for h in headers)]
                plog.append_as_follower(bytearray(whole), headers)
                appended = True
        hw = min(data.high_watermark, plog.log_end_offset)
        if hw > plog.high_watermark:
            plog.high_watermark = hw
            appended = True
        # the leader's log start offset, but never past this replica's own high watermark (as the
        # leader's own never passes its): what is above it may not be everywhere yet
        if data.log_start_offset > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(min(data.log_start_offset, plog.high_watermark))
        return appended

    # ----------------------------------------------------------------- for the admin manager
    async def changed(self) -> None:
        """Until the next reconcile has applied what ZooKeeper holds."""
        await self._changed.wait()


def truncation_offset(plog, leader_epoch: int, leader_end_offset: int) -> int:
    """Where a follower cuts its log when the leader answers that it diverged: the leader's largest
    epoch at or below the follower's last one is ``leader_epoch`` and ends at ``leader_end_offset``
    (KIP-101/KIP-279, as Kafka's fetcher decides).

    The follower looks up its own largest epoch at or below ``leader_epoch`` and where that ends.
    If it is ``leader_epoch`` itself, both logs agree up to the smaller end. If it is smaller, the
    follower never had the leader's epoch: its records from where its own epoch ends belong to
    epochs the leader never had, so it cuts there, not at the leader's offset (which would keep
    them); the next fetch, with an older last epoch, finds any divergence further back. If it
    has no epoch that old, it cuts at the leader's offset. Never past either end offset: at or
    beyond ``leader_end_offset`` the leader holds only epochs newer than any of the follower's,
    so nothing the follower has there can be the leader's.
    """
    ours_epoch, ours_end = plog.end_offset_for_epoch(leader_epoch)
    target = min(leader_end_offset, plog.log_end_offset)
    if ours_epoch >= 0 and ours_end >= 0:
        target = min(target, ours_end)
    return target


def _whole_batches(records) -> memoryview:
    """The leading whole batches of a fetch response (a size limit may cut the last one)."""
    view = memoryview(records)
    pos = 0
    while pos + 12 <= len(view):
        size = 12 + int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if size < 12 or pos + size > len(view):
            break
        pos += size
    return view[:pos]

"""The admin manager: the operations that change the metadata (Kafka's ZkAdminManager /
ControllerApis side): create, delete and grow topics, topic and broker configs, client quotas,
producer ids, leader elections and partition reassignments.

`StandaloneAdminManager` writes the broker's metadata file and creates or deletes the logs itself;
`ZkAdminManager` writes the znodes (as Kafka's AdminZkClient does) and waits until this broker's
reconcile loop has seen the change. The checks Kafka makes before either (names, counts, configs,
manual assignments) are shared."""
from __future__ import annotations

import logging
import uuid
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

import trio

from strom.protocol.errors import ErrorCode
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError
from strom.broker.config import BrokerConfig, ConfigError, parse_topic_config
from strom.broker.errors import TopicError
from strom.broker.metadata.cache import ClusterView, StandaloneMetadataCache, ZkMetadataCache
from strom.broker.metadata.placement import (PlacementError, added_assignment, assign_replicas, manual_assignment,
                                             reassignment_target_error)
from strom.broker.topics import TopicInfo, TopicStore, log_config, topic_name_error
from strom.broker.zk.zkclient import KafkaZkClient, TopicExistsError, ZkClientError
from strom.broker.zk.zkdata import TopicAssignment, topic_id_to_text

if TYPE_CHECKING:
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.stats import BrokerStats
    from strom.broker.zk.controller import Controller
    from strom.storage.log import Log
    from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.broker")

MAX_PARTITIONS = 10_000
TOPIC_WAIT_S = 10.0

# (topic, partition) -> (error, message) of an election
ElectionResults = dict[tuple[str, int], tuple[ErrorCode, "str | None"]]
# (topic, partition, error, message) of a reassignment
ReassignmentResult = tuple[str, int, ErrorCode, "str | None"]


class NotControllerError(Exception):
    """The operation is the controller's and this broker is not it (the client asks the controller)."""


class AdminManager(Protocol):
    """What the admin APIs (and the coordinators, for their internal topics) change."""

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> None: ...

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str], *,
                           validate_only: bool = False,
                           assignment: Sequence[tuple[int, Sequence[int]]] | None = None) -> TopicInfo | None: ...

    async def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> None: ...

    async def auto_create(self, name: str) -> TopicInfo | None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(self, name: str, count: int, *, validate_only: bool = False,
                                assignment: Sequence[Sequence[int]] | None = None) -> None: ...

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def set_broker_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def alter_client_quotas(self, quotas: dict[tuple, dict[str, float]]) -> None: ...

    async def allocate_producer_id(self) -> int: ...

    async def registered_brokers(self) -> set[int]: ...

    async def elect_leaders(self, wanted: list[tuple[str, int]] | None, unclean: bool) -> ElectionResults: ...

    async def alter_partition_reassignments(
            self, wanted: list[tuple[str, int, list[int] | None]]) -> list[ReassignmentResult]: ...

    async def list_partition_reassignments(self) -> dict[str, TopicAssignment]: ...


class _AdminChecks(ABC):
    """Kafka's checks of an admin request, made before either implementation changes anything."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config

    @abstractmethod
    def _topic(self, name: str) -> TopicInfo | None: ...

    @abstractmethod
    async def registered_brokers(self) -> set[int]: ...

    @abstractmethod
    def _replication_factor(self, name: str) -> int: ...

    @abstractmethod
    async def _create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                      validate_only: bool, placed: dict[int, list[int]] | None) -> TopicInfo | None: ...

    @abstractmethod
    async def _delete(self, name: str) -> None: ...

    @abstractmethod
    async def _add_partitions(self, info: TopicInfo, count: int, placed: dict[int, list[int]] | None,
                              validate_only: bool) -> None: ...

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> None:
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

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        return log_config(self.config, overrides)

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str], *,
                           validate_only: bool = False,
                           assignment: Sequence[tuple[int, Sequence[int]]] | None = None) -> TopicInfo | None:
        """Create a topic with ``partitions`` x ``replication_factor`` placed by the broker, or (with
        ``assignment``: (partition index, replica broker ids) pairs, counts -1) exactly as assigned,
        the first replica of each partition its preferred leader."""
        reason = topic_name_error(name)
        if reason:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if self._topic(name) is not None:
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
            try:
                placed = manual_assignment(assignment, await self.registered_brokers())
            except PlacementError as exc:
                raise TopicError(exc.code, exc.message) from None
            if len(placed) > MAX_PARTITIONS:
                raise TopicError(ErrorCode.INVALID_PARTITIONS,
                                 f"Number of partitions must be between 1 and {MAX_PARTITIONS}.")
            partitions, replication_factor = len(placed), len(placed[0])
        info = await self._create(name, partitions, replication_factor, configs, validate_only, placed)
        if info is not None:
            log.info("created topic=%s partitions=%d replication_factor=%d", name, partitions, replication_factor)
        return info

    async def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> None:
        """An internal topic a coordinator needs (`__consumer_offsets`, `__transaction_state`)."""
        await self.create_topic(name, partitions, replication_factor, configs)

    async def auto_create(self, name: str) -> TopicInfo | None:
        """Create `name` with the broker defaults if auto-creation is on and the name is legal."""
        if not self.config["auto.create.topics.enable"] or topic_name_error(name):
            return None
        try:
            return await self.create_topic(name, -1, -1, {})
        except TopicError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return self._topic(name)
            log.warning("auto-creating topic=%s failed: %s", name, exc.message)
            return None

    async def delete_topic(self, name: str) -> None:
        if not self.config["delete.topic.enable"]:
            raise TopicError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        info = self._topic(name)
        if info is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        await self._delete(name)
        log.info("deleted topic=%s partitions=%d", name, info.partitions)

    async def create_partitions(self, name: str, count: int, *, validate_only: bool = False,
                                assignment: Sequence[Sequence[int]] | None = None) -> None:
        """Grow ``name`` to ``count`` partitions, placed by the broker or (``assignment``: one
        replica list per new partition, in order) exactly as assigned."""
        info = self._topic(name)
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
            try:
                placed = added_assignment(assignment, await self.registered_brokers(), info.partitions, count,
                                          self._replication_factor(name))
            except PlacementError as exc:
                raise TopicError(exc.code, exc.message) from None
        old = info.partitions
        await self._add_partitions(info, count, placed, validate_only)
        if not validate_only:
            log.info("topic=%s partitions %d -> %d", name, old, count)


class StandaloneAdminManager(_AdminChecks):
    """A single broker: the metadata file, and the logs created and deleted here at once."""

    def __init__(self, config: BrokerConfig, store: TopicStore, metadata: StandaloneMetadataCache,
                 logs: "LogManager", replicas: "ReplicaManager", stats: "BrokerStats",
                 drop_partition: Callable[[str, int], None],
                 topic_created: Callable[[str], None] = lambda name: None,
                 broker_configs_changed: Callable[[], None] = lambda: None) -> None:
        super().__init__(config)
        self.store = store
        self.metadata = metadata
        self.logs = logs
        self.replicas = replicas
        self.stats = stats
        self._drop_partition = drop_partition
        self._topic_created = topic_created
        self._broker_configs_changed = broker_configs_changed

    def _topic(self, name: str) -> TopicInfo | None:
        return self.store.topics.get(name)

    async def registered_brokers(self) -> set[int]:
        return {self.config.node_id}

    def _replication_factor(self, name: str) -> int:
        return 1

    async def _create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                      validate_only: bool, placed: dict[int, list[int]] | None) -> TopicInfo | None:
        if replication_factor > 1:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {replication_factor} time(s): The target "
                             f"replication factor of {replication_factor} cannot be reached because only 1 "
                             "broker(s) are registered.")
        if validate_only:
            return None
        logs = self._create_logs(name, range(partitions), self.log_config(configs))
        try:
            info = self.store.create(name, partitions, configs)
        except TopicError:
            self._discard_logs(name, range(partitions))
            raise
        for i, partition_log in enumerate(logs):
            self.replicas.add(name, i, partition_log)
        self._topic_created(name)
        return info

    async def _delete(self, name: str) -> None:
        # logs first, then the metadata: a crash between leaves the topic listed with empty
        # partitions (recreated at start), never partition dirs that belong to no topic
        for partition in list(self.replicas.partitions.values()):
            if partition.topic == name:
                try:
                    self._drop_partition(name, partition.index)
                except StorageError as exc:
                    raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
        self.store.delete(name)
        self.stats.forget_topic(name)

    async def _add_partitions(self, info: TopicInfo, count: int, placed: dict[int, list[int]] | None,
                              validate_only: bool) -> None:
        if validate_only:
            return
        old = info.partitions
        logs = self._create_logs(info.name, range(old, count), self.log_config(info.configs))
        try:
            self.store.set_partitions(info.name, count)
        except TopicError:
            self._discard_logs(info.name, range(old, count))
            raise
        for i, partition_log in zip(range(old, count), logs):
            self.replicas.add(info.name, i, partition_log)

    def _create_logs(self, topic: str, indexes: range, config: LogConfig) -> list["Log"]:
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

    def _discard_logs(self, topic: str, indexes: range) -> None:
        for i in indexes:
            if self.replicas.partition(topic, i) is None:
                try:
                    self.logs.delete_log(topic, i)
                except (OSError, StorageError) as exc:
                    log.warning("could not remove the log of %s-%d after a failed create: %s", topic, i, exc)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.validate_topic_configs(configs)
        self.store.set_configs(name, configs)
        self.logs.update_config(name, self.log_config(configs))

    async def set_broker_configs(self, name: str, configs: dict[str, str]) -> None:
        """The dynamic configs of broker `name` ("" for the cluster default), replaced."""
        self.store.set_broker_configs(name, configs)
        self._broker_configs_changed()
        _log_broker_configs(name, configs)

    async def alter_client_quotas(self, quotas: dict[tuple, dict[str, float]]) -> None:
        self.store.set_quotas(quotas)

    async def allocate_producer_id(self) -> int:
        return self.store.allocate_producer_id()

    async def elect_leaders(self, wanted: list[tuple[str, int]] | None, unclean: bool) -> ElectionResults:
        """This broker is the only replica of every partition, so each existing one already has
        its preferred leader: ELECTION_NOT_NEEDED, as a single Kafka broker answers."""
        if wanted is None:
            return {}
        results: ElectionResults = {}
        for topic, index in wanted:
            info = self.store.topics.get(topic)
            if info is None:
                results[(topic, index)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}")
            elif not 0 <= index < info.partitions:
                results[(topic, index)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                           f"No such partition as {topic}-{index}")
            else:
                results[(topic, index)] = (ErrorCode.ELECTION_NOT_NEEDED, None)
        return results

    async def alter_partition_reassignments(
            self, wanted: list[tuple[str, int, list[int] | None]]) -> list[ReassignmentResult]:
        """The only replica there is: a target of just this broker changes nothing, any other is
        INVALID_REPLICA_ASSIGNMENT; there is never a move to cancel."""
        results: list[ReassignmentResult] = []
        for topic, index, target in wanted:
            info = self.store.topics.get(topic)
            if info is None:
                results.append((topic, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"Unable to find a topic named {topic}."))
            elif not 0 <= index < info.partitions:
                results.append((topic, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"Unable to find partition {topic}:{index}."))
            elif target is None:
                results.append((topic, index, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None))
            elif (problem := reassignment_target_error(target, {self.config.node_id})) is not None:
                results.append((topic, index, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem))
            else:
                results.append((topic, index, ErrorCode.NONE, None))
        return results

    async def list_partition_reassignments(self) -> dict[str, TopicAssignment]:
        return {}  # nothing ever moves


class ClusterSync(Protocol):
    """What the ZooKeeper admin manager needs of the cluster member: to have it read the
    cluster again, to wait for that, and the controller role (held or not)."""

    controller: "Controller"

    def mark_dirty(self) -> None: ...

    async def changed(self) -> None: ...

    async def read_view(self) -> ClusterView: ...


class ZkAdminManager(_AdminChecks):
    """A ZooKeeper cluster member: writes the znodes, then waits until its own metadata cache
    has seen the change (bounded: the change is in ZooKeeper either way)."""

    def __init__(self, config: BrokerConfig, zk: KafkaZkClient, metadata: ZkMetadataCache, sync: ClusterSync,
                 broker_configs_changed: Callable[[], None] = lambda: None) -> None:
        super().__init__(config)
        self.zk = zk
        self.metadata = metadata
        self.sync = sync
        self._broker_configs_changed = broker_configs_changed
        self._pid_next, self._pid_end = 0, -1

    def _topic(self, name: str) -> TopicInfo | None:
        return self.metadata.topic(name)

    def _replication_factor(self, name: str) -> int:
        return self.metadata.replication_factor(name)

    async def registered_brokers(self) -> set[int]:
        """The broker ids registered in ZooKeeper now (as Kafka's controller checks a manual
        assignment against; the watched view may lag a moment)."""
        return set(await self.zk.get_live_broker_ids())

    async def registered_racks(self) -> dict[int, str | None]:
        """The rack (None: none) of every broker registered in ZooKeeper now (placement is
        rack-aware when any has one)."""
        return {broker_id: info.rack for broker_id, info in (await self.zk.get_all_brokers()).items()}

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        """Until the watched metadata satisfies `condition` (bounded by TOPIC_WAIT_S)."""
        self.sync.mark_dirty()
        with trio.move_on_after(TOPIC_WAIT_S):
            while not condition():
                await self.sync.changed()

    def _has_states(self, name: str, count: int) -> Callable[[], bool]:
        return lambda: all((name, p) in self.metadata.view.states for p in range(count))

    async def _create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                      validate_only: bool, placed: dict[int, list[int]] | None) -> TopicInfo | None:
        """Write the topic's znodes with ``placed`` (a checked manual assignment) or, without, replicas
        placed over the registered brokers (rack-aware when they have racks); the controller then
        creates the partition states."""
        if placed is None:
            # Like Kafka's AdminZkClient, place replicas on the brokers registered in ZooKeeper now: the
            # watched view can still miss a broker that registered a moment ago.
            racks = await self.registered_racks()
            try:
                placed = assign_replicas(racks, partitions, replication_factor, racks=racks)
            except PlacementError as exc:
                raise TopicError(exc.code, str(exc)) from None
        if validate_only:
            return None
        topic_id = uuid.uuid4().bytes
        try:
            await self.zk.create_topic(name, {p: tuple(r) for p, r in placed.items()}, configs,
                                       topic_id=topic_id_to_text(topic_id))
        except TopicExistsError:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        await self.wait_for(self._has_states(name, partitions))
        return self.metadata.topic(name)

    async def _delete(self, name: str) -> None:
        await self.zk.mark_topic_for_deletion(name)
        await self.wait_for(lambda: self.metadata.topic(name) is None)

    async def _add_partitions(self, info: TopicInfo, count: int, placed: dict[int, list[int]] | None,
                              validate_only: bool) -> None:
        """Add partitions up to ``count`` with ``placed`` or placed over the registered brokers
        (``validate_only``: also whether the broker could place them)."""
        current = self.metadata.view.assignments[info.name]
        existing = len(current.partitions)
        if placed is None:
            try:
                racks = await self.registered_racks()
                placed = assign_replicas(racks, count - existing, self._replication_factor(info.name),
                                         start_partition=existing, racks=racks)
            except PlacementError as exc:
                raise TopicError(exc.code, str(exc)) from None
        if validate_only:
            return
        partitions = dict(current.partitions)
        partitions.update({p: tuple(r) for p, r in placed.items()})
        await self.zk.set_topic_assignment(info.name, TopicAssignment(partitions, topic_id=current.topic_id))
        await self.wait_for(self._has_states(info.name, count))

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.validate_topic_configs(configs)
        await self.zk.set_topic_config(name, configs)
        await self.wait_for(lambda: (info := self.metadata.topic(name)) is not None and info.configs == configs)

    async def set_broker_configs(self, name: str, configs: dict[str, str]) -> None:
        """Write /config/brokers/<name> (announced to every broker); this broker uses it at once."""
        try:
            await self.zk.set_broker_config(name, configs)
        except (ZkClientError, OSError) as exc:
            raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {exc}") from None
        stored = dict(self.metadata.cache.broker_configs)
        if configs:
            stored[name] = dict(configs)
        else:
            stored.pop(name, None)
        self.metadata.cache.broker_configs = stored
        self.sync.mark_dirty()
        self._broker_configs_changed()
        _log_broker_configs(name, configs)

    async def alter_client_quotas(self, quotas: dict[tuple, dict[str, float]]) -> None:
        """Each changed entity's node under /config, announced to every broker; this broker uses
        them at once, the others on notice."""
        before = self.metadata.client_quotas()
        for entity in set(quotas) | set(before):
            if quotas.get(entity, {}) != before.get(entity, {}):
                try:
                    await self.zk.set_client_quota(entity, quotas.get(entity, {}))
                except (ZkClientError, OSError) as exc:
                    raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {exc}") from None
        self.metadata.cache.quotas = {e: v for e, v in quotas.items() if v}
        self.sync.mark_dirty()

    async def allocate_producer_id(self) -> int:
        if self._pid_next > self._pid_end:
            self._pid_next, self._pid_end = await self.zk.allocate_producer_id_block(self.config.node_id)
        pid = self._pid_next
        self._pid_next += 1
        return pid

    def _controller(self) -> "Controller":
        if self.sync.controller.epoch is None:
            raise NotControllerError("This broker is not the controller.")
        return self.sync.controller

    async def elect_leaders(self, wanted: list[tuple[str, int]] | None, unclean: bool) -> ElectionResults:
        return await self._controller().elect_leaders(wanted, unclean)

    async def alter_partition_reassignments(
            self, wanted: list[tuple[str, int, list[int] | None]]) -> list[ReassignmentResult]:
        return await self._controller().alter_reassignments(wanted)

    async def list_partition_reassignments(self) -> dict[str, TopicAssignment]:
        """Every topic's assignment as ZooKeeper has it now (with the replicas being added and
        removed); only the controller answers."""
        self._controller()
        return dict((await self.sync.read_view()).assignments)


def _log_broker_configs(name: str, configs: Mapping[str, str]) -> None:
    log.info("dynamic configs of %s are now %s", f"broker {name}" if name else "the cluster default",
             configs or "none")


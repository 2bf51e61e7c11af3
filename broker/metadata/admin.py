"""The admin manager: the operations that change the metadata (Kafka's ZkAdminManager /
ControllerApis side): create, delete and grow topics, topic and broker configs, client quotas,
producer ids, leader elections and partition reassignments.

`StandaloneAdminManager` writes the broker's metadata file and creates or deletes the logs itself;
`ZkAdminManager` (zk_admin.py, imported only in cluster mode) writes the znodes, as Kafka's
AdminZkClient, and waits until this broker's reconcile loop has seen the change. The checks Kafka
makes before either (names, counts, configs, manual assignments) are shared."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from strom.broker.config import BrokerConfig, ConfigError, parse_topic_config
from strom.broker.errors import TopicError
from strom.broker.metadata.cache import StandaloneMetadataCache
from strom.broker.metadata.placement import (
    PlacementError,
    added_assignment,
    manual_assignment,
    reassignment_target_error,
)
from strom.broker.topics import TopicInfo, TopicStore, log_config, topic_name_error
from strom.broker.zk.zkdata import TopicAssignment
from strom.protocol.errors import ErrorCode
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError

if TYPE_CHECKING:
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.stats import BrokerStats
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

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool = False,
        assignment: Sequence[tuple[int, Sequence[int]]] | None = None,
    ) -> TopicInfo | None: ...

    async def create_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None: ...

    async def auto_create(self, name: str) -> TopicInfo | None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(
        self, name: str, count: int, *, validate_only: bool = False, assignment: Sequence[Sequence[int]] | None = None
    ) -> None: ...

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def set_broker_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None: ...

    async def alter_client_quotas(self, quotas: dict[tuple, dict[str, float]]) -> None: ...

    async def allocate_producer_id(self) -> int: ...

    async def registered_brokers(self) -> set[int]: ...

    async def elect_leaders(self, wanted: list[tuple[str, int]] | None, unclean: bool) -> ElectionResults: ...

    async def alter_partition_reassignments(
        self, wanted: list[tuple[str, int, list[int] | None]]
    ) -> list[ReassignmentResult]: ...

    async def list_partition_reassignments(self) -> dict[str, TopicAssignment]: ...


class AdminChecks(ABC):
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
    async def _create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool,
        placed: dict[int, list[int]] | None,
    ) -> TopicInfo | None: ...

    @abstractmethod
    async def _delete(self, name: str) -> None: ...

    @abstractmethod
    async def _add_partitions(
        self, info: TopicInfo, count: int, placed: dict[int, list[int]] | None, validate_only: bool
    ) -> None: ...

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

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool = False,
        assignment: Sequence[tuple[int, Sequence[int]]] | None = None,
    ) -> TopicInfo | None:
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
                raise TopicError(
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value."
                    if partitions < 1
                    else f"Number of partitions must be between 1 and {MAX_PARTITIONS}.",
                )
            if replication_factor == -1:
                replication_factor = self.config["default.replication.factor"]
            if replication_factor < 1:
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        self.validate_topic_configs(configs)
        placed = None
        if assignment:  # Kafka's controller checks these after the configs
            if replication_factor != -1:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but replication factor was not set to -1.",
                )
            if partitions != -1:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but numPartitions was not set to -1.",
                )
            try:
                placed = manual_assignment(assignment, await self.registered_brokers())
            except PlacementError as exc:
                raise TopicError(exc.code, exc.message) from None
            if len(placed) > MAX_PARTITIONS:
                raise TopicError(
                    ErrorCode.INVALID_PARTITIONS, f"Number of partitions must be between 1 and {MAX_PARTITIONS}."
                )
            partitions, replication_factor = len(placed), len(placed[0])
        info = await self._create(name, partitions, replication_factor, configs, validate_only, placed)
        if info is not None:
            log.info("created topic=%s partitions=%d replication_factor=%d", name, partitions, replication_factor)
        return info

    async def create_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
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

    async def create_partitions(
        self, name: str, count: int, *, validate_only: bool = False, assignment: Sequence[Sequence[int]] | None = None
    ) -> None:
        """Grow ``name`` to ``count`` partitions, placed by the broker or (``assignment``: one
        replica list per new partition, in order) exactly as assigned."""
        info = self._topic(name)
        if info is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)  # Kafka: no message
        if count == info.partitions:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {count} partition(s).")
        if count < info.partitions:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {info.partitions} partition(s); {count} would not be an increase.",
            )
        if count > MAX_PARTITIONS:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Number of partitions must be at most {MAX_PARTITIONS}.")
        placed = None
        if assignment is not None:
            try:
                placed = added_assignment(
                    assignment, await self.registered_brokers(), info.partitions, count, self._replication_factor(name)
                )
            except PlacementError as exc:
                raise TopicError(exc.code, exc.message) from None
        old = info.partitions
        await self._add_partitions(info, count, placed, validate_only)
        if not validate_only:
            log.info("topic=%s partitions %d -> %d", name, old, count)


class StandaloneAdminManager(AdminChecks):
    """A single broker: the metadata file, and the logs created and deleted here at once."""

    def __init__(
        self,
        config: BrokerConfig,
        store: TopicStore,
        metadata: StandaloneMetadataCache,
        logs: LogManager,
        replicas: ReplicaManager,
        stats: BrokerStats,
        drop_partition: Callable[[str, int], None],
        topic_created: Callable[[str], None] = lambda name: None,
        broker_configs_changed: Callable[[], None] = lambda: None,
    ) -> None:
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

    async def _create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool,
        placed: dict[int, list[int]] | None,
    ) -> TopicInfo | None:
        if replication_factor > 1:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only 1 "
                "broker(s) are registered.",
            )
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

    async def _add_partitions(
        self, info: TopicInfo, count: int, placed: dict[int, list[int]] | None, validate_only: bool
    ) -> None:
        if validate_only:
            return
        old = info.partitions
        logs = self._create_logs(info.name, range(old, count), self.log_config(info.configs))
        try:
            self.store.set_partitions(info.name, count)
        except TopicError:
            self._discard_logs(info.name, range(old, count))
            raise
        for i, partition_log in zip(range(old, count), logs, strict=False):
            self.replicas.add(info.name, i, partition_log)

    def _create_logs(self, topic: str, indexes: range, config: LogConfig) -> list[Log]:
        """Create the partitions' logs; if one cannot be (full disk, no descriptors), remove
        the ones just made and raise TopicError(KAFKA_STORAGE_ERROR)."""
        made = []
        try:
            for i in indexes:
                made.append(self.logs.get_or_create_log(topic, i, config))
        except StorageError as exc:
            self._discard_logs(topic, indexes[: len(made)])
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
        log_broker_configs(name, configs)

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """The configs of group `group_id` replaced, in the metadata file."""
        self.store.set_group_configs(group_id, configs)
        log_group_configs(group_id, configs)

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
                results[(topic, index)] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"No such partition as {topic}-{index}",
                )
            else:
                results[(topic, index)] = (ErrorCode.ELECTION_NOT_NEEDED, None)
        return results

    async def alter_partition_reassignments(
        self, wanted: list[tuple[str, int, list[int] | None]]
    ) -> list[ReassignmentResult]:
        """The only replica there is: a target of just this broker changes nothing, any other is
        INVALID_REPLICA_ASSIGNMENT; there is never a move to cancel."""
        results: list[ReassignmentResult] = []
        for topic, index, target in wanted:
            info = self.store.topics.get(topic)
            if info is None:
                results.append(
                    (topic, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}.")
                )
            elif not 0 <= index < info.partitions:
                results.append(
                    (topic, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{index}.")
                )
            elif target is None:
                results.append((topic, index, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None))
            elif (problem := reassignment_target_error(target, {self.config.node_id})) is not None:
                results.append((topic, index, ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem))
            else:
                results.append((topic, index, ErrorCode.NONE, None))
        return results

    async def list_partition_reassignments(self) -> dict[str, TopicAssignment]:
        return {}  # nothing ever moves


def log_broker_configs(name: str, configs: Mapping[str, str]) -> None:
    log.info("dynamic configs of %s are now %s", f"broker {name}" if name else "the cluster default", configs or "none")


def log_group_configs(group_id: str, configs: Mapping[str, str]) -> None:
    log.info("configs of group %r are now %s", group_id, configs or "none")

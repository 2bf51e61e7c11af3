"""The ZooKeeper admin manager: topic, partition and config changes written to ZooKeeper's znodes
(as the ZooKeeper-era Kafka's ZkAdminManager), then awaited until this broker's member has applied
them. Imported only by a broker with `zookeeper.connect` (kazoo stays off a standalone start)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import trio

from strom.broker.config import BrokerConfig
from strom.broker.errors import TopicError
from strom.broker.metadata.admin import (
    TOPIC_WAIT_S,
    AdminChecks,
    ElectionResults,
    NotControllerError,
    ReassignmentResult,
    log_broker_configs,
    log_group_configs,
)
from strom.broker.metadata.cache import ClusterView, ZkMetadataCache
from strom.broker.metadata.placement import (
    PlacementError,
    assign_replicas,
)
from strom.broker.topics import TopicInfo
from strom.broker.zk.zkclient import KafkaZkClient, TopicExistsError, ZkClientError
from strom.broker.zk.zkdata import TopicAssignment, topic_id_to_text
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.zk.controller import Controller


class ClusterSync(Protocol):
    """What the ZooKeeper admin manager needs of the cluster member: to have it read the
    cluster again, to wait for that, and the controller role (held or not)."""

    controller: Controller

    def mark_dirty(self) -> None: ...

    async def changed(self) -> None: ...

    async def read_view(self) -> ClusterView: ...


class ZkAdminManager(AdminChecks):
    """A ZooKeeper cluster member: writes the znodes, then waits until its own metadata cache
    has seen the change (bounded: the change is in ZooKeeper either way)."""

    def __init__(
        self,
        config: BrokerConfig,
        zk: KafkaZkClient,
        metadata: ZkMetadataCache,
        sync: ClusterSync,
        broker_configs_changed: Callable[[], None] = lambda: None,
    ) -> None:
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

    async def _create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool,
        placed: dict[int, list[int]] | None,
    ) -> TopicInfo | None:
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
            await self.zk.create_topic(
                name, {p: tuple(r) for p, r in placed.items()}, configs, topic_id=topic_id_to_text(topic_id)
            )
        except TopicExistsError:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        await self.wait_for(self._has_states(name, partitions))
        return self.metadata.topic(name)

    async def _delete(self, name: str) -> None:
        await self.zk.mark_topic_for_deletion(name)
        await self.wait_for(lambda: self.metadata.topic(name) is None)

    async def _add_partitions(
        self, info: TopicInfo, count: int, placed: dict[int, list[int]] | None, validate_only: bool
    ) -> None:
        """Add partitions up to ``count`` with ``placed`` or placed over the registered brokers
        (``validate_only``: also whether the broker could place them)."""
        current = self.metadata.view.assignments[info.name]
        existing = len(current.partitions)
        if placed is None:
            try:
                racks = await self.registered_racks()
                placed = assign_replicas(
                    racks, count - existing, self._replication_factor(info.name), start_partition=existing, racks=racks
                )
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
        await self._write_entity_configs(self.zk.set_broker_config, "broker_configs", name, configs)
        self._broker_configs_changed()
        log_broker_configs(name, configs)

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Write /config/groups/<group id> (announced to every broker); this broker uses it at once."""
        await self._write_entity_configs(self.zk.set_group_config, "group_configs", group_id, configs)
        log_group_configs(group_id, configs)

    async def _write_entity_configs(
        self,
        write: Callable[[str, dict[str, str]], Awaitable[None]],
        cached: str,
        name: str,
        configs: dict[str, str],
    ) -> None:
        """``write`` one entity's configs to ZooKeeper, then into the metadata cache's ``cached``
        table at once (the other brokers read it on the change notice)."""
        try:
            await write(name, configs)
        except (ZkClientError, OSError) as exc:
            raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper: {exc}") from None
        stored = dict(getattr(self.metadata.cache, cached))
        if configs:
            stored[name] = dict(configs)
        else:
            stored.pop(name, None)
        setattr(self.metadata.cache, cached, stored)
        self.sync.mark_dirty()

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

    def _controller(self) -> Controller:
        if self.sync.controller.epoch is None:
            raise NotControllerError("This broker is not the controller.")
        return self.sync.controller

    async def elect_leaders(self, wanted: list[tuple[str, int]] | None, unclean: bool) -> ElectionResults:
        return await self._controller().elect_leaders(wanted, unclean)

    async def alter_partition_reassignments(
        self, wanted: list[tuple[str, int, list[int] | None]]
    ) -> list[ReassignmentResult]:
        return await self._controller().alter_reassignments(wanted)

    async def list_partition_reassignments(self) -> dict[str, TopicAssignment]:
        """Every topic's assignment as ZooKeeper has it now (with the replicas being added and
        removed); only the controller answers."""
        self._controller()
        return dict((await self.sync.read_view()).assignments)

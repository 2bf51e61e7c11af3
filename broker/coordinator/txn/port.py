"""What the transaction coordinator needs from the broker, and nothing more.

The coordinator is written against :class:`TxnBrokerPort` and never imports the Broker, so any
object with these members can host it (``broker/txn/tests`` drive it through an in-process broker
and replace ``now_ms`` to move its clock). :class:`BrokerPort` adapts the running `BrokerServer` to it.
"""
from __future__ import annotations

import time
from typing import Protocol


class TxnBrokerPort(Protocol):
    node_id: int
    is_cluster: bool

    def partition(self, topic: str, index: int):
        """The local replica (with ``log``, ``is_leader``, ``leader_epoch``, ``isr``,
        ``high_watermark``, ``append(data, headers)``) or None."""

    def leader_of(self, topic: str, index: int) -> int | None:
        """The broker id leading ``topic``-``index`` anywhere in the cluster, None if unknown."""

    def partition_count(self, topic: str) -> int | None: ...

    def topic_setting(self, topic: str, key: str): ...

    async def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> None: ...

    async def allocate_producer_id(self) -> int: ...

    def endpoint(self, broker_id: int) -> tuple[str, int] | None: ...

    def notify_data(self) -> None: ...

    async def wait_for_data(self) -> None: ...

    def markers_written(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        """A marker landed in a local partition (the group coordinator completes pending
        transactional offset commits of `__consumer_offsets`)."""

    def now_ms(self) -> int: ...


class BrokerPort:
    """The adapter the running BrokerServer gives its transaction coordinator."""

    def __init__(self, broker) -> None:
        self._broker = broker
        self.node_id = broker.node_id
        self.is_cluster = broker.metadata.is_cluster

    def partition(self, topic: str, index: int):
        return self._broker.replicas.get(topic, index)

    def leader_of(self, topic: str, index: int) -> int | None:
        view = self._broker.metadata.partition_view(topic, index)
        return None if view is None or view[0] < 0 else view[0]

    def partition_count(self, topic: str) -> int | None:
        info = self._broker.topics.topics.get(topic)
        return None if info is None else info.partitions

    def topic_setting(self, topic: str, key: str):
        return self._broker.metadata.topic_setting(topic, key)

    async def create_internal_topic(self, name, partitions, replication_factor, configs) -> None:
        await self._broker.admin.create_internal_topic(name, partitions, replication_factor, configs)

    async def allocate_producer_id(self) -> int:
        return await self._broker.admin.allocate_producer_id()

    def endpoint(self, broker_id: int):
        return self._broker.metadata.broker_endpoint(broker_id, self._broker.config.inter_broker_listener)

    def notify_data(self) -> None:
        self._broker.replicas.notify_data()

    async def wait_for_data(self) -> None:
        await self._broker.replicas.wait_for_data()

    def markers_written(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        groups = self._broker.groups
        if groups is not None:
            groups.complete_txn(topic, index, producer_id, commit)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

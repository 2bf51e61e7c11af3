"""The durable `Persister` (Kafka's DefaultStatePersister): share-partition state kept by the share
coordinator in `__share_group_state`.

A share-partition leader calls it once per share-partition. The call goes to the share coordinator
of ``group:topicId:partition``, the leader of that key's `__share_group_state` partition: a direct
call when that is this broker (always on a standalone broker), else the inter-broker API
(InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState v1, DeleteShareGroupState,
ReadShareGroupStateSummary v1) to the broker that leads it. The topic is created on first use, as
FindCoordinator does.

Retriable answers (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: a
leadership moving, a partition loading, replicas late, a broker unreachable) are retried with a
growing backoff until ``retry_timeout_s``; then, and for every other error, `PersisterError` with
Kafka's code and message.

In Kafka the group coordinator initializes a share-partition's state before it assigns the
partition to a member, and a read or write of an uninitialized one is INVALID_REQUEST. Until
Strom's group coordinator does so, a read or write that meets an uninitialized share-partition
initializes it (state epoch as asked, start offset -1: "start where share.auto.offset.reset says")
and goes on, so the leader sees what the port promises: start offset -1 and state epoch 0.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import trio

from strom.broker.coordinator.share.coordinator import (
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    StateResult,
)
from strom.broker.coordinator.share.persister import (
    UNKNOWN_DELIVERY_COMPLETE_COUNT,
    PartitionState,
    PartitionSummary,
    PersisterError,
    SharePartitionKey,
    StateBatch,
)
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

log = logging.getLogger("strom.share.persister")

RETRIABLE = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
UNINITIALIZED_MESSAGES = (
    "Read operation on uninitialized share partition not allowed.",
    "Write operation on uninitialized share partition not allowed.",
)
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0


class StateClient(Protocol):
    """A connection to another broker (`cluster.client.BrokerClient`)."""

    async def request(
        self, api_key: int, version: int, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> Any: ...

    async def close(self) -> None: ...


ClientFactory = Callable[[str, int], StateClient]


def _batches(raw: Any) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in raw or ())


class DefaultStatePersister:
    """A `Persister` over the share coordinator, here or on the broker that leads the key."""

    def __init__(
        self, coordinator: ShareCoordinator, client_factory: ClientFactory, retry_timeout_s: float = 30.0
    ) -> None:
        self.coordinator = coordinator
        self.client_factory = client_factory
        self.retry_timeout_s = retry_timeout_s
        self._clients: dict[tuple[str, int], tuple[StateClient, trio.Lock]] = {}

    # ------------------------------------------------------------------ the port
    async def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        await self._call(
            key,
            lambda c: c.initialize_state(key, state_epoch, start_offset),
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            0,
            {"partition": key.partition, "state_epoch": state_epoch, "start_offset": start_offset},
        )

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> PartitionState:
        result = await self._with_initialization(key, 0, lambda: self._read(key, leader_epoch))
        return PartitionState(result.state_epoch, result.start_offset, result.state_batches)

    async def _read(self, key: SharePartitionKey, leader_epoch: int) -> StateResult:
        return await self._call(
            key,
            lambda c: c.read_state(key, leader_epoch),
            ApiKey.READ_SHARE_GROUP_STATE,
            0,
            {"partition": key.partition, "leader_epoch": leader_epoch},
        )

    async def write_state(
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        delivery_complete_count: int = UNKNOWN_DELIVERY_COMPLETE_COUNT,
    ) -> None:
        body = {
            "partition": key.partition,
            "state_epoch": state_epoch,
            "leader_epoch": leader_epoch,
            "start_offset": start_offset,
            "delivery_complete_count": delivery_complete_count,
            "state_batches": [
                {
                    "first_offset": b.first_offset,
                    "last_offset": b.last_offset,
                    "delivery_state": b.delivery_state,
                    "delivery_count": b.delivery_count,
                }
                for b in batches
            ],
        }

        async def write() -> StateResult:
            return await self._call(
                key,
                lambda c: c.write_state(key, state_epoch, leader_epoch, start_offset, batches, delivery_complete_count),
                ApiKey.WRITE_SHARE_GROUP_STATE,
                1,
                body,
            )

        await self._with_initialization(key, state_epoch, write)

    async def delete_state(self, key: SharePartitionKey) -> None:
        await self._call(
            key, lambda c: c.delete_state(key), ApiKey.DELETE_SHARE_GROUP_STATE, 0, {"partition": key.partition}
        )

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int) -> PartitionSummary:
        async def local(c: ShareCoordinator) -> StateResult:
            return c.read_state_summary(key)

        result = await self._call(
            key,
            local,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
            1,
            {"partition": key.partition, "leader_epoch": leader_epoch},
        )
        return PartitionSummary(
            result.state_epoch, result.leader_epoch, result.start_offset, result.delivery_complete_count
        )

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client, _ in clients.values():
            await client.close()

    # ------------------------------------------------------------------ routing and retries
    async def _with_initialization(
        self, key: SharePartitionKey, state_epoch: int, operation: Callable[[], Awaitable[StateResult]]
    ) -> StateResult:
        try:
            return await operation()
        except PersisterError as exc:
            if exc.code != ErrorCode.INVALID_REQUEST or exc.message not in UNINITIALIZED_MESSAGES:
                raise
        log.info("initializing the share-partition state of %s:%d", key.group_id, key.partition)
        await self.initialize_state(key, state_epoch, -1)
        return await operation()

    async def _call(
        self,
        key: SharePartitionKey,
        local: Callable[[ShareCoordinator], Awaitable[StateResult]],
        api: int,
        version: int,
        partition_body: dict[str, Any],
    ) -> StateResult:
        deadline = trio.current_time() + self.retry_timeout_s
        backoff = FIRST_BACKOFF_S
        while True:
            result = await self._once(key, local, api, version, partition_body)
            if result.error == ErrorCode.NONE:
                return result
            if result.error not in RETRIABLE or trio.current_time() + backoff > deadline:
                raise PersisterError(result.error, result.message)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _once(
        self,
        key: SharePartitionKey,
        local: Callable[[ShareCoordinator], Awaitable[StateResult]],
        api: int,
        version: int,
        partition_body: dict[str, Any],
    ) -> StateResult:
        coordinator = self.coordinator
        runtime = coordinator.runtime
        try:
            await coordinator.ensure_topic()
        except TopicError as exc:
            log.warning("cannot create %s: %s", SHARE_GROUP_STATE_TOPIC, exc.message)
            return StateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, start_offset=0)
        index = coordinator.partition_of(key)
        leader = runtime.leader_of(SHARE_GROUP_STATE_TOPIC, index)
        if leader is None:
            return StateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, start_offset=0)
        if leader == runtime.node_id:
            if index not in coordinator.owned:  # led here, not loaded yet (or just lost)
                coordinator.follow_leadership()
            return await local(coordinator)
        address = runtime.endpoint(leader)
        if address is None:
            return StateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, start_offset=0)
        body = {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [partition_body]}]}
        client, lock = self._client(address)
        try:
            async with lock:
                answer = await client.request(api, version, body)
        except Exception as exc:  # the broker went away: ask again, maybe another one
            log.info("share coordinator %d at %s:%d unreachable: %s", leader, *address, exc)
            return StateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, start_offset=0)
        return self._result(answer)

    def _client(self, address: tuple[str, int]) -> tuple[StateClient, trio.Lock]:
        if address not in self._clients:
            self._clients[address] = (self.client_factory(*address), trio.Lock())
        return self._clients[address]

    @staticmethod
    def _result(answer: Any) -> StateResult:
        try:
            partition = answer.results[0].partitions[0]
        except (AttributeError, IndexError, TypeError):
            return StateResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no result for the share-partition", start_offset=0)
        code = ErrorCode(partition.error_code)
        return StateResult(
            code,
            partition.get("error_message"),
            state_epoch=partition.get("state_epoch", 0),
            leader_epoch=partition.get("leader_epoch", 0),
            start_offset=partition.get("start_offset", -1),
            state_batches=_batches(partition.get("state_batches")),
            delivery_complete_count=partition.get("delivery_complete_count", -1),
        )

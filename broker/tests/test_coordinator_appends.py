"""A coordinator's write (an offset commit, a transaction's state, a share-partition's state, a
transaction marker) is an acks=all append, as in Kafka: the broker's coordinator runtime refuses
it with fewer in-sync replicas than the topic's min.insync.replicas (nothing written), and a write
whose ISR shrank below that while it waited for its replicas is not counted as durable
(NOT_ENOUGH_REPLICAS_AFTER_APPEND, which the coordinators answer COORDINATOR_NOT_AVAILABLE).

The worst moment is the second: the write is in the leader's log, the follower leaves the ISR,
and the leader alone moves the high watermark past it. Before this check the commit was answered
NONE while only one replica had it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from strom.broker.coordinator.runtime import NotEnoughReplicas, replicated, replication_error
from strom.broker.replica.tests.test_manager import led_with_a_follower
from strom.broker.server.coordinator_runtime import BrokerCoordinatorRuntime
from strom.protocol.errors import ErrorCode
from strom.protocol.internal_records import build_records_batch


def runtime_over(manager) -> BrokerCoordinatorRuntime:
    return BrokerCoordinatorRuntime(
        node_id=1,
        is_cluster=True,
        config=None,  # type: ignore[arg-type]  # not read by appends
        replicas=manager,
        metadata=None,  # type: ignore[arg-type]
        admin=None,  # type: ignore[arg-type]
        topic_infos=dict,
    )


def commit_record() -> bytearray:
    return build_records_batch([(b"group-key", b"offset-value")], 1_700_000_000_000)


async def replication_while(runtime: BrokerCoordinatorRuntime, pending, step: Callable[[], None]) -> list[ErrorCode]:
    """What ``await_replication`` of ``pending`` answers when ``step`` runs while it waits."""
    codes: list[ErrorCode] = []

    async def wait() -> None:
        codes.extend(await runtime.await_replication([pending], 30))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert not codes  # it waits for the follower
        step()
    return codes


async def test_a_write_whose_isr_shrank_while_it_waited_is_not_durable(tmp_path) -> None:
    manager, partition = led_with_a_follower(tmp_path, min_insync_replicas=2)
    runtime = runtime_over(manager)
    pending = runtime.append("t", 0, commit_record())

    def follower_leaves_the_isr() -> None:  # the leader alone commits the write
        partition.isr = [1]
        partition.maybe_advance_high_watermark()
        manager.notify_data()

    codes = await replication_while(runtime, pending, follower_leaves_the_isr)
    assert partition.high_watermark == 1
    assert codes == [ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
    assert replication_error(codes[0]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # what a group coordinator asks before answering an OffsetCommit
    assert await replicated(runtime, "t", 0, 1) == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_a_write_with_too_few_in_sync_replicas_is_refused_and_nothing_is_written(tmp_path) -> None:
    manager, partition = led_with_a_follower(tmp_path, min_insync_replicas=2)
    runtime = runtime_over(manager)
    partition.isr = [1]
    with pytest.raises(NotEnoughReplicas):
        runtime.append("t", 0, commit_record())
    assert partition.log.log_end_offset == 0


async def test_a_write_the_in_sync_replicas_have_is_durable(tmp_path) -> None:
    manager, partition = led_with_a_follower(tmp_path, min_insync_replicas=2)
    runtime = runtime_over(manager)
    pending = runtime.append("t", 0, commit_record())
    codes = await replication_while(runtime, pending, lambda: manager.follower_fetched(partition, 2, 1))
    assert codes == [ErrorCode.NONE]

"""A transaction coordinator answers only from committed `__transaction_state` records.

Simulation seed 2104 (docs/simulation.md, "Findings"): the coordinator appended "partition p
joins the transaction", the write failed when its partition of `__transaction_state` got a new
leader epoch (same leader), the partition was loaded again up to its log end, and the retried
AddPartitionsToTxn was answered NONE from that record, which was never committed; the record was
lost when another replica was elected, so the next coordinator never wrote p's marker and p's
last stable offset stayed behind for good. Here the port is in memory and the test decides what
the replicas have."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from strom.broker.coordinator.tests.memory_runtime import MemoryRuntime
from strom.broker.coordinator.txn.coordinator import TransactionCoordinator
from strom.broker.coordinator.txn.state_manager import TRANSACTION_STATE_TOPIC, TxnSettings
from strom.protocol.errors import ErrorCode

TS = TRANSACTION_STATE_TOPIC
TP = ("t", 0)


async def _coordinator(runtime: MemoryRuntime, nursery: trio.Nursery) -> TransactionCoordinator:
    coordinator = TransactionCoordinator(runtime, TxnSettings(num_partitions=1, write_timeout_ms=60_000))
    await coordinator.state.ensure_topic()
    await runtime.create_internal_topic(TP[0], 1, 1, {})  # the transaction's partition, led here too
    coordinator.follow_leadership()
    await nursery.start(coordinator.run)
    return coordinator


async def _failed_add_left_in_the_log(runtime: MemoryRuntime, coordinator: TransactionCoordinator) -> tuple[int, int]:
    """An AddPartitionsToTxn whose record is appended but not replicated when the partition of
    `__transaction_state` gets a new leader epoch with the same leader: (producer id, epoch)."""
    init = await coordinator.init_producer_id("tid", 60_000)
    assert init.error == ErrorCode.NONE
    pid, epoch = init.producer_id, init.producer_epoch
    runtime.hold_replication(TS, 0)
    answers: list[ErrorCode] = []

    async def add() -> None:
        answers.append(await coordinator.add_partitions("tid", pid, epoch, {TP}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(add)
        await trio.testing.wait_all_tasks_blocked()
        runtime.lead(TS, 0)  # re-elected: a new leader epoch, this broker still leads
        coordinator.follow_leadership()
    assert answers == [ErrorCode.NOT_COORDINATOR]
    partition = runtime.partitions[(TS, 0)]
    assert partition.high_watermark < partition.log_end_offset  # the record is in the log, uncommitted
    return pid, epoch


async def _answers(coordinator: TransactionCoordinator, pid: int, epoch: int) -> tuple[ErrorCode, ErrorCode]:
    """What the coordinator answers about TP: a partition leader's verification, AddPartitionsToTxn."""
    return coordinator.verify_partitions("tid", pid, epoch, [TP])[TP], await coordinator.add_partitions(
        "tid", pid, epoch, {TP}
    )


@pytest.mark.parametrize(
    "then, answer",
    [
        ("replicate", ErrorCode.NONE),  # the replicas catch up: the record is committed
        ("follow", ErrorCode.NOT_COORDINATOR),  # another replica, without the record, is elected
    ],
)
async def test_an_uncommitted_record_loaded_at_a_re_election_is_not_vouched_for(then: str, answer: ErrorCode):
    runtime = MemoryRuntime(is_cluster=True)
    async with trio.open_nursery() as nursery:
        coordinator = await _coordinator(runtime, nursery)
        pid, epoch = await _failed_add_left_in_the_log(runtime, coordinator)

        # the retry must not be answered from the uncommitted record (a partition leader would
        # then accept the transaction's batch, and a coordinator elected elsewhere not know it)
        assert await _answers(coordinator, pid, epoch) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,) * 2
        assert coordinator.state.loading == {0}

        getattr(runtime, then)(TS, 0)
        coordinator.follow_leadership()
        await trio.testing.wait_all_tasks_blocked()
        assert coordinator.state.loading == set()
        assert await _answers(coordinator, pid, epoch) == (answer,) * 2
        nursery.cancel_scope.cancel()


async def test_a_prepared_transaction_loaded_uncommitted_gets_its_markers_once_committed():
    runtime = MemoryRuntime(is_cluster=True)
    async with trio.open_nursery() as nursery:
        coordinator = await _coordinator(runtime, nursery)
        init = await coordinator.init_producer_id("tid", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await coordinator.add_partitions("tid", pid, epoch, {TP}) == ErrorCode.NONE
        runtime.hold_replication(TS, 0)
        ending: list[ErrorCode] = []

        async def end() -> None:
            ending.append((await coordinator.end_txn("tid", pid, epoch, commit=True)).error)

        nursery.start_soon(end)
        await trio.testing.wait_all_tasks_blocked()
        runtime.lead(TS, 0)
        coordinator.follow_leadership()
        await trio.testing.wait_all_tasks_blocked()
        assert ending == [ErrorCode.NOT_COORDINATOR]
        assert runtime.markers == []  # PrepareCommit is not committed: no marker yet

        runtime.replicate(TS, 0)
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.markers == [("t", 0, pid, True)]
        nursery.cancel_scope.cancel()

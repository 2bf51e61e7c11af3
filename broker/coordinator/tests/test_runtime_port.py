"""The coordinators on the runtime port alone: an in-memory partition writer, no broker.

What a coordinator writes must reach its partition through the port (and come back when a new
coordinator loads it), a write counts only once replicated under the epoch it was written in, and
markers reach the group coordinator through the port. Wired wrong (a write that bypasses the
port, a load that reads elsewhere, an error turned into the wrong one), these fail."""

from __future__ import annotations

import dataclasses

import pytest
import trio
import trio.testing

from strom.broker.coordinator.group.config import GroupCoordinatorConfig
from strom.broker.coordinator.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from strom.broker.coordinator.group.records import CommittedOffset
from strom.broker.coordinator.group.state import GroupSettings, GroupState, JoinRequest
from strom.broker.coordinator.tests.memory_runtime import MemoryRuntime
from strom.broker.coordinator.txn.markers import append_marker
from strom.broker.coordinator.txn.metadata import TransactionMetadata, TxnState
from strom.broker.coordinator.txn.state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager, TxnSettings
from strom.protocol.errors import ErrorCode

CONFIG = GroupCoordinatorConfig(
    classic=GroupSettings(initial_rebalance_delay_ms=0),
    offsets_topic_partitions=3,
    offsets_topic_replication_factor=1,
    offset_commit_timeout_ms=200,
)


async def _coordinator(runtime: MemoryRuntime, config: GroupCoordinatorConfig = CONFIG) -> GroupCoordinator:
    coordinator = GroupCoordinator(runtime, config)
    runtime.listeners.append(coordinator.complete_txn)
    await coordinator.ensure_topic()
    coordinator.load()
    return coordinator


def _committed(coordinator: GroupCoordinator, group: str, topic: str, index: int) -> int | None:
    """The offset ``group`` has committed for ``topic``-``index`` (None: none)."""
    committed = coordinator.fetch_offsets(group, [(topic, [index])])[(topic, index)]
    return None if committed is None else committed.offset


def _offset(offset: int, metadata: str = "") -> CommittedOffset:
    return CommittedOffset(offset, -1, metadata)


async def test_commits_are_appended_through_the_port_and_loaded_back():
    runtime = MemoryRuntime(other_topics={"t": 2})
    coordinator = await _coordinator(runtime)
    assert runtime.topic_configs[OFFSETS_TOPIC]["cleanup.policy"] == "compact"
    results = coordinator.commit_offsets("g", "", None, -1, -1, [("t", 0, _offset(5, "m")), ("t", 1, _offset(7))])
    assert [r.error for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
    partition = runtime.partitions[(OFFSETS_TOPIC, coordinator.partition_of("g"))]
    assert len(partition.batches) == 1 and partition.log_end_offset == 2  # one batch, two records
    assert await coordinator.replicated("g") == ErrorCode.NONE

    again = await _coordinator(runtime)
    fetched = again.fetch_offsets("g", [("t", [0, 1])])
    assert {tp: (o.offset, o.metadata, o.commit_timestamp) for tp, o in fetched.items() if o is not None} == {
        ("t", 0): (5, "m", runtime.clock_ms),
        ("t", 1): (7, "", runtime.clock_ms),
    }


async def test_a_commit_to_a_partition_nobody_has_is_refused_before_any_write():
    runtime = MemoryRuntime(other_topics={"t": 1})
    coordinator = await _coordinator(runtime)
    results = coordinator.commit_offsets("g", "", None, -1, -1, [("t", 3, _offset(1))])
    assert [r.error for r in results] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert all(not p.batches for p in runtime.partitions.values())


async def test_a_commit_waits_for_the_replicas_under_its_leader_epoch():
    runtime = MemoryRuntime(other_topics={"t": 1})
    coordinator = await _coordinator(runtime)
    index = coordinator.partition_of("g")
    runtime.hold_replication(OFFSETS_TOPIC, index)
    coordinator.commit_offsets("g", "", None, -1, -1, [("t", 0, _offset(1))])
    assert await coordinator.replicated("g") == ErrorCode.COORDINATOR_NOT_AVAILABLE  # not in time

    async with trio.open_nursery() as nursery:
        answers: list[ErrorCode] = []

        async def wait() -> None:
            answers.append(await coordinator.replicated("g"))

        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        runtime.replicate(OFFSETS_TOPIC, index)
    assert answers == [ErrorCode.NONE]

    runtime.hold_replication(OFFSETS_TOPIC, index)
    coordinator.commit_offsets("g", "", None, -1, -1, [("t", 0, _offset(2))])
    async with trio.open_nursery() as nursery:
        answers.clear()
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        runtime.follow(OFFSETS_TOPIC, index)  # lost the leadership: the write may be truncated
    assert answers == [ErrorCode.NOT_COORDINATOR]
    assert await coordinator.replicated("g") == ErrorCode.NOT_COORDINATOR


async def test_transactional_offsets_settle_with_the_marker_written_through_the_port():
    runtime = MemoryRuntime(other_topics={"t": 1})
    coordinator = await _coordinator(runtime)
    index = coordinator.partition_of("g")
    results = coordinator.txn_commit_offsets("g", 42, 0, "", None, -1, [("t", 0, _offset(9))])
    assert [r.error for r in results] == [ErrorCode.NONE]
    assert coordinator.has_pending_txn_offset("g", "t", 0)
    assert coordinator.fetch_offsets("g", [("t", [0])]) == {("t", 0): None}

    reloaded = await _coordinator(runtime)  # an open transaction loads as pending
    assert reloaded.has_pending_txn_offset("g", "t", 0)
    runtime.listeners.remove(reloaded.complete_txn)

    code, pending = append_marker(runtime, OFFSETS_TOPIC, index, 42, 0, True, 0)
    assert code == ErrorCode.NONE and pending is not None
    assert runtime.markers == [(OFFSETS_TOPIC, index, 42, True)]
    assert not coordinator.has_pending_txn_offset("g", "t", 0)
    assert _committed(coordinator, "g", "t", 0) == 9
    assert (await runtime.await_replication([pending], 1)) == [ErrorCode.NONE]

    committed = await _coordinator(runtime)  # the marker follows the offsets in the log
    assert not committed.has_pending_txn_offset("g", "t", 0)
    assert _committed(committed, "g", "t", 0) == 9


async def test_a_classic_group_is_written_when_stable_and_loaded_stable():
    runtime = MemoryRuntime(other_topics={"t": 1})
    coordinator = await _coordinator(runtime)
    request = JoinRequest("", None, "client", "/127.0.0.1", 10_000, 10_000, "consumer", [("range", b"sub")], False)
    joined = await coordinator.join_group("g", request)
    assert joined.error == ErrorCode.NONE and joined.generation == 1
    synced = await coordinator.sync_group(
        "g", joined.member_id, None, 1, "consumer", "range", {joined.member_id: b"assignment"}
    )
    assert synced.error == ErrorCode.NONE and synced.assignment == b"assignment"
    assert runtime.partitions[(OFFSETS_TOPIC, coordinator.partition_of("g"))].batches, "group record written"

    loaded = await _coordinator(runtime)
    group = loaded.get("g")
    assert group is not None and group.state is GroupState.STABLE and group.generation == 1
    assert list(group.members) == [joined.member_id]


async def test_leadership_decides_which_groups_are_coordinated():
    runtime = MemoryRuntime(is_cluster=True, other_topics={"t": 1})
    coordinator = await _coordinator(runtime)
    index = coordinator.partition_of("g")
    coordinator.commit_offsets("g", "", None, -1, -1, [("t", 0, _offset(3))])
    coordinator.follow_leadership()
    runtime.follow(OFFSETS_TOPIC, index)
    assert coordinator.group_error("g") == ErrorCode.NOT_COORDINATOR
    coordinator.follow_leadership()
    assert coordinator.get("g") is None  # unloaded
    runtime.lead(OFFSETS_TOPIC, index)
    coordinator.follow_leadership()  # loaded again from the partition
    assert coordinator.group_error("g") is None
    assert _committed(coordinator, "g", "t", 0) == 3


async def test_offsets_expire_through_the_port():
    runtime = MemoryRuntime(other_topics={"t": 1})
    coordinator = await _coordinator(runtime, dataclasses.replace(CONFIG, offsets_retention_ms=1000))
    coordinator.commit_offsets("g", "", None, -1, -1, [("t", 0, _offset(3))])
    assert coordinator.expire_offsets(runtime.clock_ms + 1000) == 1
    assert coordinator.get("g") is None
    assert (await _coordinator(runtime)).get("g") is None  # the tombstones are in the log


async def test_the_transaction_state_is_written_and_loaded_through_the_port():
    runtime = MemoryRuntime()
    settings = TxnSettings(num_partitions=2, write_timeout_ms=200)
    state = TransactionStateManager(runtime, settings)
    await state.ensure_topic()
    assert runtime.topic_configs[TRANSACTION_STATE_TOPIC]["min.insync.replicas"] == "1"
    state.follow_leadership()
    meta = TransactionMetadata("tid", 7, 0, 60_000, TxnState.EMPTY, last_update_ms=runtime.clock_ms)
    assert await state.write("tid", meta) == ErrorCode.NONE

    index = state.partition_of("tid")
    runtime.hold_replication(TRANSACTION_STATE_TOPIC, index)
    assert await state.write("tid", meta) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    runtime.replicate(TRANSACTION_STATE_TOPIC, index)

    loaded = TransactionStateManager(runtime, settings)
    loaded.follow_leadership()
    assert loaded.txns["tid"].producer_id == 7 and loaded.coordinator_epoch("tid") == 0
    runtime.follow(TRANSACTION_STATE_TOPIC, index)
    assert await loaded.write("tid", meta) == ErrorCode.NOT_COORDINATOR


@pytest.mark.parametrize("leader", [True, False])
async def test_a_marker_for_a_partition_not_led_here_is_not_appended(leader: bool):
    runtime = MemoryRuntime(other_topics={})
    await runtime.create_internal_topic("x", 1, 1, {})
    if not leader:
        runtime.follow("x", 0)
    code, _ = append_marker(runtime, "x", 0, 1, 0, False, 0)
    assert code == (ErrorCode.NONE if leader else ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert len(runtime.partitions[("x", 0)].batches) == (1 if leader else 0)
    assert append_marker(runtime, "gone", 0, 1, 0, False, 0)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

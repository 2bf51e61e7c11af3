"""The share coordinator over the in-memory runtime: writes, snapshots, reload, fencing, leadership."""

from __future__ import annotations

import pytest

from strom.broker.coordinator.share.coordinator import (
    KAFKA_MESSAGES,
    SHARE_GROUP_STATE_TOPIC,
    ShareCoordinator,
    ShareCoordinatorSettings,
    combine_batches,
)
from strom.broker.coordinator.share.persister import SharePartitionKey, StateBatch
from strom.broker.coordinator.share.records import (
    SNAPSHOT_KEY_TYPE,
    UPDATE_KEY_TYPE,
    coordinator_key,
    decode_key,
)
from strom.broker.coordinator.tests.memory_runtime import MemoryRuntime
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records

AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4
TOPIC_ID = b"orders".ljust(16, b"-")[:16]  # MemoryRuntime's id of topic "orders"
KEY = SharePartitionKey("g1", TOPIC_ID, 0)


async def _coordinator(runtime: MemoryRuntime | None = None, per_snapshot: int = 3) -> ShareCoordinator:
    runtime = runtime or MemoryRuntime(other_topics={"orders": 2})
    coordinator = ShareCoordinator(
        runtime, ShareCoordinatorSettings(num_partitions=3, snapshot_update_records=per_snapshot)
    )
    await coordinator.ensure_topic()
    coordinator.load()
    return coordinator


def _record_types(runtime: MemoryRuntime, index: int) -> list[int]:
    out = []
    for batch in runtime.partitions[(SHARE_GROUP_STATE_TOPIC, index)].batches:
        for record in iter_records(memoryview(batch)):
            out.append(decode_key(record.key)[0])
    return out


@pytest.mark.parametrize(
    ("so_far", "new", "start", "expected"),
    [
        ([], [], 0, []),
        # a later acknowledgement of part of an available run splits it
        ([(0, 9, AVAILABLE, 1)], [(3, 4, ACKNOWLEDGED, 1)], 0, [(0, 2, 0, 1), (3, 4, 2, 1), (5, 9, 0, 1)]),
        # a higher delivery count wins over a lower one whatever the state
        ([(0, 4, ACKNOWLEDGED, 1)], [(2, 6, AVAILABLE, 2)], 0, [(0, 1, 2, 1), (2, 6, 0, 2)]),
        # the start offset cuts what is below it
        ([(0, 9, ARCHIVED, 1)], [(10, 12, ACKNOWLEDGED, 1)], 5, [(5, 9, 4, 1), (10, 12, 2, 1)]),
        # adjacent runs of one state and count are joined
        ([(0, 4, ACKNOWLEDGED, 1)], [(5, 9, ACKNOWLEDGED, 1)], 0, [(0, 9, 2, 1)]),
        ([(0, 4, AVAILABLE, 1)], [], 10, []),
    ],
)
def test_combine_batches(so_far, new, start, expected) -> None:
    got = combine_batches([StateBatch(*b) for b in so_far], [StateBatch(*b) for b in new], start)
    assert [tuple(vars(b).values()) for b in got] == expected


async def test_uninitialized_share_partitions_cannot_be_read_or_written() -> None:
    coordinator = await _coordinator()
    read = await coordinator.read_state(KEY, 0)
    assert (read.error, read.message) == (
        ErrorCode.INVALID_REQUEST,
        "Read operation on uninitialized share partition not allowed.",
    )
    assert (await coordinator.write_state(KEY, 0, 0, 0, [])).error == ErrorCode.INVALID_REQUEST
    summary = coordinator.read_state_summary(KEY)  # a summary answers "uninitialized"
    assert (summary.error, summary.state_epoch, summary.leader_epoch, summary.start_offset) == (
        ErrorCode.NONE,
        0,
        0,
        -1,
    )
    assert (await coordinator.delete_state(KEY)).error == ErrorCode.NONE


async def test_initialize_write_then_read_gives_the_state() -> None:
    coordinator = await _coordinator()
    assert (await coordinator.initialize_state(KEY, 0, 0)).error == ErrorCode.NONE
    assert (await coordinator.write_state(KEY, 0, 0, 0, [StateBatch(0, 4, ACKNOWLEDGED, 1)])).error == ErrorCode.NONE
    assert (await coordinator.write_state(KEY, 0, 0, 5, [StateBatch(5, 9, AVAILABLE, 1)])).error == ErrorCode.NONE
    read = await coordinator.read_state(KEY, 0)
    assert (read.error, read.start_offset, read.state_epoch) == (ErrorCode.NONE, 5, 0)
    assert read.state_batches == (StateBatch(5, 9, AVAILABLE, 1),)


async def test_overlapping_writes_merge_as_kafka_4_3_does() -> None:
    """The answer the reference broker gave to these three writes (see docs/share-coordinator.md)."""
    coordinator = await _coordinator()
    await coordinator.initialize_state(KEY, 0, 0)
    await coordinator.write_state(KEY, 0, 2, 0, [StateBatch(0, 9, AVAILABLE, 1)])
    await coordinator.write_state(KEY, 0, 2, -1, [StateBatch(3, 4, ACKNOWLEDGED, 1)])
    await coordinator.write_state(KEY, 0, 2, -1, [StateBatch(2, 6, AVAILABLE, 2), StateBatch(5, 5, ARCHIVED, 1)])
    read = await coordinator.read_state(KEY, 2)
    assert read.state_batches == (
        StateBatch(0, 1, AVAILABLE, 1),
        StateBatch(2, 6, AVAILABLE, 2),
        StateBatch(7, 9, AVAILABLE, 1),
    )
    # a start offset moved back keeps what lies past it, cut at the new start
    await coordinator.write_state(KEY, 0, 2, 4, [])
    assert (await coordinator.read_state(KEY, 2)).state_batches[0] == StateBatch(4, 6, AVAILABLE, 2)


async def test_snapshots_every_n_updates_and_reload_gives_the_same_state() -> None:
    coordinator = await _coordinator(per_snapshot=2)
    index = coordinator.partition_of(KEY)
    await coordinator.initialize_state(KEY, 0, 0)
    for i in range(5):
        result = await coordinator.write_state(KEY, 0, 0, i, [StateBatch(i, i, ACKNOWLEDGED, 1)])
        assert result.error == ErrorCode.NONE
    S, U = SNAPSHOT_KEY_TYPE, UPDATE_KEY_TYPE
    assert _record_types(coordinator.runtime, index) == [S, U, U, S, U, U]  # type: ignore[arg-type]
    before = coordinator.states[KEY]
    assert before.snapshot_epoch == 1 and before.start_offset == 4
    assert before.state_batches == (StateBatch(4, 4, ACKNOWLEDGED, 1),)
    again = await _coordinator(coordinator.runtime)  # type: ignore[arg-type]
    assert again.states == coordinator.states
    assert again.update_counts == coordinator.update_counts


async def test_reads_record_the_leader_epoch_and_fence_older_leaders() -> None:
    coordinator = await _coordinator()
    await coordinator.initialize_state(KEY, 1, 0)
    # writes leave the recorded leader epoch alone (Kafka 4.3: a write of epoch 3 then one of 2 pass)
    assert (await coordinator.write_state(KEY, 1, 3, 0, [])).error == ErrorCode.NONE
    assert (await coordinator.write_state(KEY, 1, 2, 0, [])).error == ErrorCode.NONE
    assert coordinator.read_state_summary(KEY).leader_epoch == 0
    assert (await coordinator.read_state(KEY, 5)).error == ErrorCode.NONE
    assert coordinator.read_state_summary(KEY).leader_epoch == 5
    assert (await coordinator.write_state(KEY, 1, 4, 0, [])).error == ErrorCode.FENCED_LEADER_EPOCH
    assert (await coordinator.read_state(KEY, 4)).error == ErrorCode.FENCED_LEADER_EPOCH
    assert (await coordinator.write_state(KEY, 0, 5, 0, [])).error == ErrorCode.FENCED_STATE_EPOCH
    assert (await _coordinator(coordinator.runtime)).states[KEY].leader_epoch == 5  # type: ignore[arg-type]


async def test_initialize_summary_and_delete() -> None:
    coordinator = await _coordinator()
    await coordinator.initialize_state(KEY, 0, 0)
    await coordinator.write_state(KEY, 0, 0, 0, [StateBatch(0, 3, ACKNOWLEDGED, 1)], 4)
    assert coordinator.read_state_summary(KEY).delivery_complete_count == 4
    assert (await coordinator.initialize_state(KEY, 2, 100)).error == ErrorCode.NONE
    summary = coordinator.read_state_summary(KEY)
    assert (summary.state_epoch, summary.start_offset, summary.delivery_complete_count) == (2, 100, 0)
    assert (await coordinator.initialize_state(KEY, 2, -1)).error == ErrorCode.NONE  # unknown start
    assert coordinator.read_state_summary(KEY).delivery_complete_count == -1
    assert (await coordinator.read_state(KEY, 0)).state_batches == ()
    fenced = await coordinator.initialize_state(KEY, 1, 0)
    assert (fenced.error, fenced.message) == (
        ErrorCode.FENCED_STATE_EPOCH,
        KAFKA_MESSAGES[ErrorCode.FENCED_STATE_EPOCH],
    )
    assert (await coordinator.delete_state(KEY)).error == ErrorCode.NONE
    assert coordinator.read_state_summary(KEY).start_offset == -1
    assert KEY not in (await _coordinator(coordinator.runtime)).states  # type: ignore[arg-type]


async def test_unknown_topic_and_bad_requests() -> None:
    coordinator = await _coordinator()
    unknown = SharePartitionKey("g1", b"x" * 16, 0)
    assert (await coordinator.initialize_state(unknown, 0, 0)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await coordinator.delete_state(unknown)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    past = SharePartitionKey("g1", TOPIC_ID, 2)  # orders has partitions 0 and 1
    assert coordinator.read_state_summary(past).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    negative = SharePartitionKey("g1", TOPIC_ID, -1)
    assert (await coordinator.read_state(negative, 0)).error == ErrorCode.INVALID_REQUEST


async def test_leadership_moves_away_and_back() -> None:
    coordinator = await _coordinator()
    runtime = coordinator.runtime
    index = coordinator.partition_of(KEY)
    await coordinator.initialize_state(KEY, 0, 3)
    await coordinator.write_state(KEY, 0, 0, 3, [StateBatch(3, 4, ACKNOWLEDGED, 1)])
    runtime.follow(SHARE_GROUP_STATE_TOPIC, index)  # type: ignore[attr-defined]
    coordinator.follow_leadership()
    assert KEY not in coordinator.states
    assert (await coordinator.read_state(KEY, 0)).error == ErrorCode.NOT_COORDINATOR
    runtime.lead(SHARE_GROUP_STATE_TOPIC, index)  # type: ignore[attr-defined]
    coordinator.follow_leadership()
    read = await coordinator.read_state(KEY, 0)
    assert (read.start_offset, read.state_batches) == (3, (StateBatch(3, 4, ACKNOWLEDGED, 1),))


async def test_a_write_not_replicated_in_time_leaves_memory_as_it_was(autojump_clock) -> None:
    coordinator = await _coordinator()
    runtime = coordinator.runtime
    index = coordinator.partition_of(KEY)
    await coordinator.initialize_state(KEY, 0, 0)
    runtime.hold_replication(SHARE_GROUP_STATE_TOPIC, index)  # type: ignore[attr-defined]
    result = await coordinator.write_state(KEY, 0, 0, 9, [])
    assert result.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert coordinator.states[KEY].start_offset == 0


def test_partition_of_hashes_the_coordinator_key() -> None:
    from strom.protocol.internal_records import partition_for

    coordinator = ShareCoordinator(MemoryRuntime(), ShareCoordinatorSettings())
    key = SharePartitionKey("group", bytes(16), 1)
    assert coordinator_key(key) == "group:AAAAAAAAAAAAAAAAAAAAAA:1"
    assert coordinator.partition_of(key) == partition_for("group:AAAAAAAAAAAAAAAAAAAAAA:1", 50)


async def test_pruning_keeps_what_a_reload_needs() -> None:
    runtime = MemoryRuntime(other_topics={"orders": 2})
    settings = ShareCoordinatorSettings(num_partitions=1, snapshot_update_records=2)
    coordinator = ShareCoordinator(runtime, settings)
    await coordinator.ensure_topic()
    coordinator.load()
    other = SharePartitionKey("g2", TOPIC_ID, 1)
    await coordinator.initialize_state(KEY, 0, 0)  # offset 0: KEY's first snapshot
    for i in range(4):  # 1 U, 2 U, 3 S, 4 U
        await coordinator.write_state(KEY, 0, 0, i, [StateBatch(i, i, ACKNOWLEDGED, 1)])
    assert coordinator.prune() == {0: 3}  # KEY needs its snapshot at 3 and what follows
    await coordinator.initialize_state(other, 0, 7)  # 5: S
    assert coordinator.prune() == {}  # still 3
    await coordinator.write_state(KEY, 0, 0, 4, [])  # 6: U
    await coordinator.write_state(KEY, 0, 0, 4, [])  # 7: S (two updates since 3)
    assert coordinator.prune() == {0: 5}  # other's snapshot at 5 is the oldest still needed
    again = ShareCoordinator(runtime, settings)
    again.load()
    assert again.states == coordinator.states and again.update_counts == coordinator.update_counts
    await coordinator.delete_state(KEY)
    await coordinator.delete_state(other)
    assert coordinator.prune() == {0: runtime.partitions[(SHARE_GROUP_STATE_TOPIC, 0)].log_end_offset}
    emptied = ShareCoordinator(runtime, settings)
    emptied.load()
    assert emptied.states == {}

"""The persister port's in-memory implementation: merge of deltas, epochs and fencing."""

from __future__ import annotations

import pytest

from strom.broker.coordinator.share.persister import (
    DeliveryState,
    InMemoryPersister,
    PersisterError,
    SharePartitionKey,
    StateBatch,
    merge_batches,
)
from strom.protocol.errors import ErrorCode

KEY = SharePartitionKey("g", b"\x01" * 16, 0)
AV, ACQ, ACK, ARC = DeliveryState.AVAILABLE, DeliveryState.ACQUIRED, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED


@pytest.mark.parametrize(
    ("current", "update", "start", "expected"),
    [
        # an update inside a batch splits it in three
        (
            [StateBatch(0, 9, AV, 1)],
            [StateBatch(3, 5, ACK, 1)],
            0,
            [StateBatch(0, 2, AV, 1), StateBatch(3, 5, ACK, 1), StateBatch(6, 9, AV, 1)],
        ),
        # the start offset cuts what lies below it, also inside a batch
        ([StateBatch(0, 9, AV, 1)], [], 4, [StateBatch(4, 9, AV, 1)]),
        # equal neighbours are joined
        ([StateBatch(0, 4, ACK, 1)], [StateBatch(5, 9, ACK, 1)], 0, [StateBatch(0, 9, ACK, 1)]),
        # a newer batch covering several older ones replaces them
        ([StateBatch(0, 1, AV, 1), StateBatch(2, 3, AV, 2)], [StateBatch(0, 3, ARC, 3)], 0, [StateBatch(0, 3, ARC, 3)]),
        # an update wholly below the start offset is dropped
        ([], [StateBatch(0, 3, ACK, 1)], 10, []),
    ],
)
def test_merge(current: list[StateBatch], update: list[StateBatch], start: int, expected: list[StateBatch]) -> None:
    assert list(merge_batches(current, update, start)) == expected


async def test_uninitialized_reads_minus_one() -> None:
    state = await InMemoryPersister().read_state(KEY, 0)
    assert (state.state_epoch, state.start_offset, state.batches) == (0, -1, ())


async def test_write_then_read_keeps_delta_merged() -> None:
    p = InMemoryPersister()
    await p.initialize_state(KEY, 0, 0)
    await p.write_state(KEY, 0, 1, 0, [StateBatch(0, 9, ACQ, 1)])
    await p.write_state(KEY, 0, 1, 5, [StateBatch(5, 6, ACK, 1)])
    state = await p.read_state(KEY, 1)
    assert state.start_offset == 5
    assert state.batches == (StateBatch(5, 6, ACK, 1), StateBatch(7, 9, ACQ, 1))
    summary = await p.read_summary(KEY, 1)
    assert (summary.start_offset, summary.leader_epoch) == (5, 1)


async def test_stale_epochs_are_fenced() -> None:
    p = InMemoryPersister()
    await p.initialize_state(KEY, 2, 0)
    await p.read_state(KEY, 5)
    with pytest.raises(PersisterError) as stale_leader:
        await p.write_state(KEY, 2, 4, 0, [])
    assert stale_leader.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(PersisterError) as stale_state:
        await p.write_state(KEY, 1, 5, 0, [])
    assert stale_state.value.code == ErrorCode.FENCED_STATE_EPOCH
    await p.delete_state(KEY)
    assert (await p.read_state(KEY, 0)).start_offset == -1

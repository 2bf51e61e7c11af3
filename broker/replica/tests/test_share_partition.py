"""The share-partition state machine: acquisition, acknowledgement, locks, delivery limits, SPSO."""

from __future__ import annotations

import pytest

from strom.broker.coordinator.share.persister import DeliveryState, InMemoryPersister, SharePartitionKey, StateBatch
from strom.broker.replica.share_partition import (
    AckBatch,
    AcquiredRange,
    LogBatch,
    RecordState,
    SharePartition,
    ShareSettings,
)
from strom.protocol.errors import ErrorCode

KEY = SharePartitionKey("g", b"\x07" * 16, 0)
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def new_partition(
    persister: InMemoryPersister | None = None, reset: int = 0, **settings: object
) -> tuple[SharePartition, InMemoryPersister, Clock]:
    persister = persister or InMemoryPersister()
    clock = Clock()
    sp = SharePartition(KEY, persister, clock, ShareSettings(**settings))  # type: ignore[arg-type]
    await sp.initialize(lambda policy: reset)
    return sp, persister, clock


async def test_initialized_at_the_reset_offset_and_persisted() -> None:
    sp, persister, _ = await new_partition(reset=7)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (7, 7, 7)
    assert (await persister.read_state(KEY, -1)).start_offset == 7


async def test_two_members_never_hold_the_same_record() -> None:
    sp, _, _ = await new_partition()
    a = sp.acquire("a", [LogBatch(0, 9)], max_records=4)
    assert a == [AcquiredRange(0, 3, 1)]
    assert sp.next_fetch_offset() == 4
    b = sp.acquire("b", [LogBatch(0, 9)], max_records=100)
    assert b == [AcquiredRange(4, 9, 1)]
    assert sp.acquire("c", [LogBatch(0, 9)], max_records=100) == []


@pytest.mark.parametrize(
    ("kind", "state_after", "start_after"),
    [(ACCEPT, None, 5), (REJECT, None, 5), (RELEASE, RecordState.AVAILABLE, 0)],
)
async def test_acknowledge_types(kind: int, state_after: RecordState | None, start_after: int) -> None:
    sp, persister, _ = await new_partition()
    sp.acquire("a", [LogBatch(0, 4)], 10)
    assert await sp.acknowledge("a", [AckBatch(0, 4, (kind,))]) == ErrorCode.NONE
    assert sp.start_offset == start_after
    if state_after is not None:
        assert sp.records[0].state is state_after
    assert (await persister.read_state(KEY, -1)).start_offset == start_after


async def test_per_offset_types_and_spso_stops_at_the_first_pending() -> None:
    sp, persister, _ = await new_partition()
    sp.acquire("a", [LogBatch(0, 3)], 10)
    code = await sp.acknowledge("a", [AckBatch(0, 3, (ACCEPT, REJECT, RELEASE, ACCEPT))])
    assert code == ErrorCode.NONE
    assert sp.start_offset == 2
    assert (await persister.read_state(KEY, -1)).batches == (
        StateBatch(2, 2, DeliveryState.AVAILABLE, 1),
        StateBatch(3, 3, DeliveryState.ACKNOWLEDGED, 1),
    )
    assert sp.acquire("b", [LogBatch(0, 3)], 10) == [AcquiredRange(2, 2, 2)]


@pytest.mark.parametrize(
    ("member", "batch", "code"),
    [
        ("b", AckBatch(0, 1, (ACCEPT,)), ErrorCode.INVALID_RECORD_STATE),  # not its records
        ("a", AckBatch(3, 6, (ACCEPT,)), ErrorCode.INVALID_RECORD_STATE),  # 5 and 6 never acquired
        ("a", AckBatch(0, 2, (ACCEPT, ACCEPT)), ErrorCode.INVALID_REQUEST),  # types do not fit
        ("a", AckBatch(0, 1, (9,)), ErrorCode.INVALID_REQUEST),  # no such type
        ("a", AckBatch(0, 1, (RENEW,)), ErrorCode.INVALID_REQUEST),  # renew not asked for
    ],
)
async def test_refused_acknowledgements_change_nothing(member: str, batch: AckBatch, code: ErrorCode) -> None:
    sp, persister, _ = await new_partition()
    sp.acquire("a", [LogBatch(0, 4)], 10)
    assert await sp.acknowledge(member, [batch]) == code
    assert all(r.state is RecordState.ACQUIRED for r in sp.records.values())
    assert persister.writes == 0


async def test_acknowledging_twice_is_invalid_record_state() -> None:
    sp, _, _ = await new_partition()
    sp.acquire("a", [LogBatch(0, 4)], 10)
    await sp.acknowledge("a", [AckBatch(2, 2, (ACCEPT,))])
    assert await sp.acknowledge("a", [AckBatch(2, 2, (ACCEPT,))]) == ErrorCode.INVALID_RECORD_STATE


async def test_expired_lock_redelivers_with_a_higher_count_then_archives_at_the_limit() -> None:
    sp, _, clock = await new_partition(record_lock_duration_ms=1000, delivery_count_limit=2)
    sp.acquire("a", [LogBatch(0, 1)], 10)
    clock.t += 0.5
    assert await sp.expire_locks() == 0
    clock.t += 0.6
    assert await sp.expire_locks() == 2
    assert sp.acquire("b", [LogBatch(0, 1)], 10) == [AcquiredRange(0, 1, 2)]
    assert await sp.acknowledge("a", [AckBatch(0, 1, (ACCEPT,))]) == ErrorCode.INVALID_RECORD_STATE
    clock.t += 1.1
    await sp.expire_locks()
    # the second delivery was the last: archived, and the start moves past them
    assert sp.start_offset == 2
    assert sp.acquire("c", [LogBatch(0, 1)], 10) == []


async def test_renew_extends_the_lock() -> None:
    sp, _, clock = await new_partition(record_lock_duration_ms=1000)
    sp.acquire("a", [LogBatch(0, 0)], 10)
    clock.t += 0.9
    assert await sp.acknowledge("a", [AckBatch(0, 0, (RENEW,))], renew_allowed=True) == ErrorCode.NONE
    clock.t += 0.9
    assert await sp.expire_locks() == 0
    assert sp.records[0].state is RecordState.ACQUIRED


async def test_release_member_frees_only_its_records() -> None:
    sp, _, _ = await new_partition()
    sp.acquire("a", [LogBatch(0, 1)], 2)
    sp.acquire("b", [LogBatch(0, 3)], 2)
    await sp.release_member("a")
    assert [sp.records[o].state for o in range(4)] == [RecordState.AVAILABLE] * 2 + [RecordState.ACQUIRED] * 2


async def test_in_flight_cap_and_skipped_batches() -> None:
    sp, _, _ = await new_partition(max_record_locks=5)
    got = sp.acquire("a", [LogBatch(0, 1), LogBatch(2, 2, skip=True), LogBatch(3, 9)], 100)
    assert got == [AcquiredRange(0, 1, 1), AcquiredRange(3, 4, 1)]
    assert sp.records[2].state is RecordState.ARCHIVED
    assert not sp.can_acquire()


async def test_state_survives_a_new_leader() -> None:
    sp, persister, _ = await new_partition()
    sp.acquire("a", [LogBatch(0, 5)], 10)
    await sp.acknowledge("a", [AckBatch(0, 1, (ACCEPT,)), AckBatch(3, 3, (REJECT,))])
    again, _, _ = await new_partition(persister, reset=99)
    assert again.start_offset == 2
    # 2, 4 and 5 were acquired by a member of the old leader (acquisitions are not written, as
    # in Kafka): delivered again; 0, 1 (accepted) and 3 (rejected) never
    assert again.acquire("b", [LogBatch(0, 5)], 10) == [AcquiredRange(2, 2, 1), AcquiredRange(4, 5, 1)]
    assert again.records[3].state is RecordState.ARCHIVED

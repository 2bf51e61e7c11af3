"""A coordinator's append (offsets, transaction state, a marker) wakes what waits on its own
partition and nothing else: with many consumers long-polling idle partitions, every offset
commit used to wake and re-read every one of them."""

from __future__ import annotations

import trio
import trio.testing

from strom.protocol.records.batch import Record, build_batch


async def test_a_coordinator_append_wakes_only_the_waiters_of_its_partition(broker, nursery):
    await broker.admin.create_topic("t", 2, 1, {})
    woken: list[tuple[str, int]] = []

    async def waiter(key: tuple[str, int]) -> None:
        await broker.replicas.wait_for_data([key])
        woken.append(key)

    nursery.start_soon(waiter, ("t", 0))
    nursery.start_soon(waiter, ("t", 1))
    await trio.testing.wait_all_tasks_blocked()
    broker.coordinator_runtime.append("t", 1, bytearray(build_batch([Record(0, 0, b"k", b"v")])))
    await trio.testing.wait_all_tasks_blocked()
    assert woken == [("t", 1)]

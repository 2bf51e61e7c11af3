"""strom.testing's waits on a broker over in-memory connections: woken by the broker's own
changes (an append, a commit), not by their once-a-second safety recheck, on a virtual clock."""

from __future__ import annotations

import trio
import trio.lowlevel

from strom.protocol.schema import ApiKey
from strom.testing.waits import RECHECK_S, watcher

from .test_apis import batch, create
from .test_consumer_group_apis import commit


def produce(topic: str, n: int) -> dict:
    return {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch(n)}]}],
    }


async def test_an_offset_wait_is_woken_by_the_append(connect, broker, nursery, autojump_clock):
    client = await connect()
    await create(client, "w")
    waits = watcher(broker)
    woken: list[float] = []
    done = trio.Event()

    async def wait() -> None:
        await waits.offset("w", 0, 3, timeout=60)
        woken.append(trio.current_time())
        done.set()

    nursery.start_soon(wait)
    await trio.sleep(5)  # the wait parks (virtual time: nothing happens meanwhile)
    assert not woken
    appended = trio.current_time()
    await client.request(ApiKey.PRODUCE, 9, produce("w", 3))
    with trio.fail_after(RECHECK_S * 10):
        while not woken:
            await trio.lowlevel.checkpoint()
    assert woken[0] - appended < RECHECK_S / 10


async def test_a_lag_wait_is_woken_by_the_commit(connect, broker, nursery, autojump_clock):
    client = await connect()
    await create(client, "l")
    await client.request(ApiKey.PRODUCE, 9, produce("l", 4))
    waits = watcher(broker)
    woken: list[float] = []
    done = trio.Event()

    async def wait() -> None:
        seen = await waits.lag("g", "l", timeout=60)
        assert seen["lag"] == 0
        woken.append(trio.current_time())
        done.set()

    nursery.start_soon(wait)
    await trio.sleep(5)
    assert not woken
    committed = trio.current_time()
    await client.request(ApiKey.OFFSET_COMMIT, 9, commit("g", "", -1, "l", 0, 4))
    with trio.fail_after(RECHECK_S * 10):
        while not woken:
            await trio.lowlevel.checkpoint()
    assert woken[0] - committed < RECHECK_S / 10

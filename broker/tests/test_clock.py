"""Pause freezes the broker's trio clock: no timer fires and no group session expires while paused."""

from __future__ import annotations

import time

import pytest
import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from strom.testing.clock import PausableClock
from strom.testing.faults import request_faults

from .helpers import make_broker, open_client


@pytest.fixture
def pausable_clock():
    return PausableClock()  # pytest-trio runs the test on a clock fixture


async def _real_sleep(seconds: float) -> None:
    await trio.to_thread.run_sync(time.sleep, seconds)


async def test_paused_clock_stands_still_and_goes_on_from_there(pausable_clock):
    fired = trio.Event()

    async def timer():
        await trio.sleep(0.2)
        fired.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer)
        await trio.sleep(0.05)
        pausable_clock.pause()
        frozen = trio.current_time()
        await _real_sleep(0.4)
        assert trio.current_time() == frozen and not fired.is_set()
        pausable_clock.resume()
        assert trio.current_time() - frozen < 0.1
        with trio.fail_after(1):
            await fired.wait()  # the remaining ~0.15 s, not at once


async def test_a_pause_longer_than_its_bound_ends_by_itself():
    clock = PausableClock(max_pause_s=0.1)
    clock.pause()
    before = clock.current_time()
    await _real_sleep(0.15)
    assert not clock.paused and clock.current_time() - before >= 0.15  # time jumped back to real time
    assert clock.deadline_to_sleep_time(clock.current_time() + 1) == pytest.approx(1, abs=0.05)


async def test_group_session_does_not_expire_while_the_broker_is_paused(pausable_clock, tmp_path, nursery):
    broker = make_broker(
        tmp_path / "data", **{"group.min.session.timeout.ms": 100, "group.initial.rebalance.delay.ms": 0}
    )
    try:
        nursery.start_soon(broker.groups.run)
        client = open_client(broker, nursery)
        join = {
            "group_id": "g",
            "session_timeout_ms": 300,
            "rebalance_timeout_ms": 300,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        }
        first = await client.request(ApiKey.JOIN_GROUP, 5, join)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = await client.request(ApiKey.JOIN_GROUP, 5, dict(join, member_id=first.member_id))
        assert joined.error_code == ErrorCode.NONE
        member = {
            "group_id": "g",
            "generation_id": joined.generation_id,
            "member_id": joined.member_id,
            "group_instance_id": None,
        }
        synced = await client.request(
            ApiKey.SYNC_GROUP, 3, dict(member, assignments=[{"member_id": joined.member_id, "assignment": b""}])
        )
        assert synced.error_code == ErrorCode.NONE

        request_faults(broker).pause()
        await _real_sleep(0.6)  # twice the session timeout with no heartbeat
        request_faults(broker).resume()
        beat = await client.request(ApiKey.HEARTBEAT, 3, member)
        assert beat.error_code == ErrorCode.NONE  # the member is still in its generation

        await _real_sleep(0.6)  # not paused: the session expires as usual
        with trio.fail_after(2):
            while (await client.request(ApiKey.HEARTBEAT, 3, member)).error_code == ErrorCode.NONE:
                await trio.sleep(0.05)
    finally:
        broker.close()

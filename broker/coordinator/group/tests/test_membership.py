"""Joining, syncing, heartbeats, leaving, timeouts and static membership, as a client sees them.

Timeouts run on trio's autojump clock: the coordinator's timers fire as soon as every task waits.
"""

from __future__ import annotations

import pytest
import trio

from strom.broker.coordinator.group.tests.helpers import heartbeat, join, join_fully, sync
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey


async def test_member_id_required_then_join_sync_heartbeat(gconnect, autojump_clock):
    client = await gconnect()
    first = await join(client, "g", version=5)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("test-")
    joined = await join(client, "g", first.member_id, version=5)
    assert joined.error_code == ErrorCode.NONE
    assert joined.generation_id == 1 and joined.leader == first.member_id and joined.protocol_name == "range"
    assert [m.member_id for m in joined.members] == [first.member_id]
    synced = await sync(client, "g", first.member_id, 1, {first.member_id: b"assignment"})
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"assignment"
    assert await heartbeat(client, "g", first.member_id, 1) == ErrorCode.NONE
    assert await heartbeat(client, "g", first.member_id, 7) == ErrorCode.ILLEGAL_GENERATION
    assert await heartbeat(client, "g", "nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_old_join_versions_get_a_member_id_at_once(gconnect, autojump_clock):
    client = await gconnect()
    joined = await join(client, "g", version=3)
    assert joined.error_code == ErrorCode.NONE and joined.member_id and joined.generation_id == 1


async def _member(gconnect, group="g", **kw):
    client = await gconnect()
    return client, await join_fully(client, group, **kw)


async def test_second_member_triggers_rebalance_and_both_get_the_new_generation(gconnect, autojump_clock):
    a = await gconnect()
    first = await join_fully(a, "g")
    await sync(a, "g", first.member_id, 1, {first.member_id: b"all"})
    results = {}

    async def second():
        b = await gconnect()
        results["b"] = await join_fully(b, "g")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.sleep(0.5)
        assert await heartbeat(a, "g", first.member_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        results["a"] = await join(a, "g", first.member_id)
    assert results["a"].generation_id == results["b"].generation_id == 2
    assert results["a"].leader == first.member_id
    assert len(results["a"].members) == 2 and results["b"].members == []


async def test_session_expiry_removes_a_silent_member(gconnect, autojump_clock):
    a, first = await _member(gconnect, session_ms=6000)
    await sync(a, "g", first.member_id, 1, {first.member_id: b"x"})
    b = await gconnect()
    results = {}

    async def second():
        results["b"] = await join_fully(b, "g", session_ms=6000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
    # `a` never rejoins: the join phase ends at the rebalance timeout without it.
    assert results["b"].generation_id == 2
    assert [m.member_id for m in results["b"].members] == [results["b"].member_id]
    assert await heartbeat(a, "g", first.member_id, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    synced = await sync(b, "g", results["b"].member_id, 2, {results["b"].member_id: b"all"})
    assert synced.assignment == b"all"
    start = trio.current_time()
    await trio.sleep(7)
    assert trio.current_time() - start >= 7
    # `b` stayed silent longer than its session: gone, group empty.
    assert await heartbeat(b, "g", results["b"].member_id, 2) == ErrorCode.UNKNOWN_MEMBER_ID
    described = await b.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"]})
    assert described.groups[0].group_state == "Empty" and described.groups[0].members == []


async def test_heartbeats_keep_a_member_alive(gconnect, autojump_clock):
    a, first = await _member(gconnect, session_ms=6000)
    await sync(a, "g", first.member_id, 1, {})
    for _ in range(10):
        await trio.sleep(3)
        assert await heartbeat(a, "g", first.member_id, 1) == ErrorCode.NONE


async def test_pending_member_that_never_rejoins_expires(gconnect, autojump_clock, group_broker):
    a = await gconnect()
    first = await join(a, "g", session_ms=6000)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert group_broker.groups.get("g").pending_members
    await trio.sleep(7)
    assert not group_broker.groups.get("g").pending_members


async def test_leave_group_rebalances_the_rest(gconnect, autojump_clock):
    a, first = await _member(gconnect)
    await sync(a, "g", first.member_id, 1, {})
    b = await gconnect()
    results = {}

    async def second():
        results["b"] = await join_fully(b, "g")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(second)
        await trio.sleep(0.1)
        results["a"] = await join(a, "g", first.member_id)
    gen = results["a"].generation_id
    await sync(a, "g", first.member_id, gen, {})
    left = await a.request(
        ApiKey.LEAVE_GROUP, 4, {"group_id": "g", "members": [{"member_id": first.member_id}, {"member_id": "ghost"}]}
    )
    assert [m.error_code for m in left.members] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    assert await heartbeat(b, "g", results["b"].member_id, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = await join(b, "g", results["b"].member_id)
    assert rejoined.generation_id == gen + 1 and rejoined.leader == results["b"].member_id


async def test_initial_rebalance_delay_collects_members(tmp_path, nursery, autojump_clock):
    import trio.testing

    from strom.broker.server.connection import ConnectionHandler
    from strom.broker.tests.helpers import Client, make_broker

    b = make_broker(tmp_path / "d", group_initial_rebalance_delay_ms=3000)
    try:
        assert b.groups is not None
        nursery.start_soon(b.groups.run)

        async def client():
            c, s = trio.testing.memory_stream_pair()
            nursery.start_soon(ConnectionHandler(b), s)
            return Client(c)

        results = []

        async def member(delay):
            c = await client()
            await trio.sleep(delay)
            results.append((await join_fully(c, "g"), trio.current_time()))

        start = trio.current_time()
        async with trio.open_nursery() as inner:
            for delay in (0, 1, 2.5, 4):
                inner.start_soon(member, delay)
        assert {r.generation_id for r, _ in results} == {1}
        assert len(results) == 4 and max(len(r.members) for r, _ in results) == 4
        assert all(t - start >= 3 for _, t in results)
    finally:
        b.close()


async def test_validation_errors(gconnect, autojump_clock):
    client = await gconnect()
    assert (await join(client, "g", session_ms=10)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await join(client, "g", session_ms=10**8)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await join(client, "", version=3)).error_code == ErrorCode.INVALID_GROUP_ID
    assert (await join(client, "g", protocols=())).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(client, "g", "made-up")).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    first = await join_fully(client, "g")
    other = await gconnect()
    refused = await join(other, "g", version=3, protocols=(("roundrobin", b""),))
    assert refused.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    refused = await join(other, "g", version=3, protocol_type="connect")
    assert refused.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await sync(client, "g", first.member_id, 99)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert (await sync(client, "nope", first.member_id, 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_protocol_chosen_by_the_members_votes():
    from strom.broker.coordinator.group.state import Group, GroupSettings, Member

    group = Group("g", GroupSettings(), lambda: 0)
    prefs = [["roundrobin", "range"], ["range", "roundrobin", "sticky"], ["range", "roundrobin"]]
    for i, names in enumerate(prefs):
        group.members[f"m{i}"] = Member(f"m{i}", None, "c", "", 10000, 10000, [(n, b"") for n in names])
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "range"


async def test_static_member_rejoins_without_rebalance_and_fences_the_old_id(gconnect, autojump_clock):
    a = await gconnect()
    first = await join(a, "g", instance="i-1")
    assert first.error_code == ErrorCode.NONE and first.generation_id == 1
    await sync(a, "g", first.member_id, 1, {first.member_id: b"mine"}, instance="i-1")
    restarted = await gconnect()
    again = await join(restarted, "g", instance="i-1")
    assert again.error_code == ErrorCode.NONE
    assert again.generation_id == 1 and again.member_id != first.member_id
    synced = await sync(restarted, "g", again.member_id, 1, instance="i-1")
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"mine"
    assert await heartbeat(a, "g", first.member_id, 1, instance="i-1") == ErrorCode.FENCED_INSTANCE_ID
    left = await a.request(
        ApiKey.LEAVE_GROUP,
        4,
        {"group_id": "g", "members": [{"member_id": first.member_id, "group_instance_id": "i-1"}]},
    )
    assert left.members[0].error_code == ErrorCode.FENCED_INSTANCE_ID


async def test_static_member_outlives_a_rebalance_timeout_but_not_its_session(gconnect, autojump_clock):
    a = await gconnect()
    first = await join(a, "g", instance="s", session_ms=6000)
    await sync(a, "g", first.member_id, 1, {first.member_id: b"x"}, instance="s")
    await trio.sleep(10)
    assert await heartbeat(a, "g", first.member_id, 1, instance="s") == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    "join_v,sync_v,hb_v,leave_v",
    [
        (0, 0, 0, 0),
        (1, 1, 1, 1),
        (2, 1, 1, 2),
        (3, 2, 2, 2),
        (4, 3, 3, 3),
        (5, 3, 3, 3),
        (6, 4, 4, 4),
        (7, 5, 4, 4),
        (8, 5, 4, 5),
        (9, 5, 4, 5),
    ],
)
async def test_every_version_joins_syncs_heartbeats_and_leaves(gconnect, autojump_clock, join_v, sync_v, hb_v, leave_v):
    client = await gconnect()
    joined = await join_fully(client, "g", version=join_v)
    assert joined.error_code == ErrorCode.NONE
    synced = await sync(client, "g", joined.member_id, joined.generation_id, {joined.member_id: b"a"}, version=sync_v)
    assert synced.error_code == ErrorCode.NONE and synced.assignment == b"a"
    assert await heartbeat(client, "g", joined.member_id, joined.generation_id, version=hb_v) == ErrorCode.NONE
    if leave_v >= 3:
        body = {"group_id": "g", "members": [{"member_id": joined.member_id}]}
    else:
        body = {"group_id": "g", "member_id": joined.member_id}
    left = await client.request(ApiKey.LEAVE_GROUP, leave_v, body)
    assert left.error_code == ErrorCode.NONE
    described = await client.request(ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["g"]})
    assert described.groups[0].group_state == "Empty"

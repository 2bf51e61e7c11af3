"""Share groups (KIP-932) over ShareGroupHeartbeat and ShareGroupDescribe, as Kafka 4.3 answers:
join, the initialization of share partitions before they are assigned, the simple assignor,
epochs and fencing, leaving, session expiry, ListGroups, DescribeGroups, DeleteGroups."""

from __future__ import annotations

import base64
import uuid

import pytest
import trio

from strom.broker.coordinator.group.share_groups import simple_assign
from strom.broker.coordinator.group.tests.helpers import create_topic
from strom.broker.coordinator.runtime import TopicMetadata
from strom.broker.tests.helpers import GROUP_TEST_CONFIG, make_broker, open_client
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

SHARE_CONFIG = {
    **GROUP_TEST_CONFIG,
    "group_share_heartbeat_interval_ms": 5000,
    "group_share_session_timeout_ms": 45000,
}


def member_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@pytest.fixture
async def share_client(tmp_path, nursery):
    broker = make_broker(tmp_path / "data", **SHARE_CONFIG)
    assert broker.groups is not None
    nursery.start_soon(broker.groups.run)
    nursery.start_soon(broker.share.run)
    client = open_client(broker, nursery)
    await create_topic(client, "t", 3)
    yield broker, client
    broker.close()


async def heartbeat(client, member: str, epoch: int, topics: list[str] | None = None, group: str = "g", rack=None):
    return await client.request(
        ApiKey.SHARE_GROUP_HEARTBEAT,
        1,
        {
            "group_id": group,
            "member_id": member,
            "member_epoch": epoch,
            "rack_id": rack,
            "subscribed_topic_names": topics,
        },
    )


def assigned(response) -> list[int] | None:
    if response.assignment is None:
        return None
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


async def test_join_initializes_then_assigns_and_a_second_member_splits(share_client, autojump_clock) -> None:
    _, client = share_client
    a, b = sorted([member_id(), member_id()], reverse=True)  # the first to join sorts last
    first = await heartbeat(client, a, 0, ["t"])
    # as Kafka 4.3: epoch 2 with nothing assigned until the share partitions are initialized
    assert (first.error_code, first.member_epoch, assigned(first), first.heartbeat_interval_ms) == (0, 2, [], 5000)
    await trio.sleep(1.1)  # the assignment interval (share.assignment.interval.ms, 1 s)
    second = await heartbeat(client, a, 2)
    assert (second.member_epoch, assigned(second)) == (3, [0, 1, 2])
    await trio.sleep(1.1)
    joined = await heartbeat(client, b, 0, ["t"])
    assert (joined.member_epoch, assigned(joined)) == (4, [2])
    again = await heartbeat(client, a, 3)
    assert (again.member_epoch, assigned(again)) == (4, [0, 1])
    quiet = await heartbeat(client, a, 4)
    assert (quiet.member_epoch, quiet.assignment) == (4, None)  # nothing changed: no assignment sent
    left = await heartbeat(client, a, -1)
    assert (left.error_code, left.member_epoch, left.member_id) == (0, -1, a)
    await trio.sleep(1.1)
    alone = await heartbeat(client, b, 4)
    assert (alone.member_epoch, assigned(alone)) == (5, [0, 1, 2])


@pytest.mark.parametrize(
    ("member", "epoch", "topics", "rack", "group", "code", "message"),
    [
        ("", 0, ["t"], None, "g", ErrorCode.INVALID_REQUEST, None),
        ("M", 0, None, None, "g", ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."),
        ("M", 0, ["t"], None, "", ErrorCode.INVALID_REQUEST, "GroupId can't be empty."),
        ("M", -2, ["t"], None, "g", ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
        ("M", 0, ["t"], "", "g", ErrorCode.INVALID_REQUEST, "RackId can't be empty."),
        ("M", -1, None, None, "nosuch", ErrorCode.GROUP_ID_NOT_FOUND, "Group nosuch not found."),
    ],
)
async def test_refused_heartbeats(share_client, member, epoch, topics, rack, group, code, message) -> None:
    _, client = share_client
    response = await heartbeat(client, member_id() if member == "M" else member, epoch, topics, group, rack)
    assert (response.error_code, response.error_message, response.member_id) == (code, message, None)


async def test_unknown_members_and_fenced_epochs(share_client, autojump_clock) -> None:
    _, client = share_client
    a, stranger = member_id(), member_id()
    await heartbeat(client, a, 0, ["t"])
    unknown = await heartbeat(client, stranger, 1)
    assert (unknown.error_code, unknown.error_message) == (
        ErrorCode.UNKNOWN_MEMBER_ID,
        f"Member {stranger} is not a member of group g.",
    )
    ahead = await heartbeat(client, a, 5)
    assert ahead.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert ahead.error_message.startswith("The share group member has a greater member epoch (5)")
    behind = await heartbeat(client, a, 1)
    assert behind.error_message == (
        "The share group member has a smaller member epoch (1) than the one known by the group coordinator (2), "
        "and it does not match the previous member epoch (0). The member must abandon all its partitions and rejoin."
    )
    await trio.sleep(1.1)
    assert (await heartbeat(client, a, 2)).member_epoch == 3
    assert (await heartbeat(client, a, 2)).error_code == ErrorCode.NONE  # the previous epoch is still accepted
    await heartbeat(client, a, -1)
    gone = await heartbeat(client, a, -1)
    assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_session_timeout_removes_a_silent_member(share_client, autojump_clock) -> None:
    broker, client = share_client
    a = member_id()
    await heartbeat(client, a, 0, ["t"])
    await trio.sleep(46)
    group = broker.groups.share.get("g")
    assert group is not None and not group.members
    assert (await heartbeat(client, a, 2)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_share_group_in_list_describe_and_delete(share_client, autojump_clock) -> None:
    broker, client = share_client
    a = member_id()
    await heartbeat(client, a, 0, ["t"])
    listed = await client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
    assert [(g.group_id, g.group_state, g.group_type, g.protocol_type) for g in listed.groups] == [
        ("g", "Stable", "share", "share")
    ]
    classic = await client.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["g"], "include_authorized_operations": False})
    assert (classic.groups[0].error_code, classic.groups[0].error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group g is not a classic group.",
    )
    consumer = await client.request(
        ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": False}
    )
    assert consumer.groups[0].error_message == "Group g is not a consumer group."
    described = await client.request(
        ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["g", "nosuch"], "include_authorized_operations": False}
    )
    g, nosuch = described.groups
    # the share partitions were initialized after the join: the group epoch moved on, the
    # assignment follows at the member's next heartbeat
    assert (g.group_state, g.assignor_name, g.group_epoch, g.assignment_epoch) == ("Stable", "simple", 3, 2)
    assert [m.member_id for m in g.members] == [a]
    assert g.members[0].subscribed_topic_names == ["t"]
    assert (nosuch.error_code, nosuch.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nosuch not found.")
    busy = await client.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert busy.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    await heartbeat(client, a, -1)
    assert [k for k in broker.share_coordinator.states if k.group_id == "g"]  # initialized at the join
    deleted = await client.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert deleted.results[0].error_code == ErrorCode.NONE
    assert broker.groups.share.get("g") is None
    # the share partitions' state went with the group (deleted in __share_group_state)
    assert not [k for k in broker.share_coordinator.states if k.group_id == "g"]


T = b"T" * 16


@pytest.mark.parametrize(
    ("partitions", "members", "current", "expected"),
    [
        # fresh: consecutive ranges in join order, the first ones one more
        (5, "ab", {}, {"a": [0, 1, 2], "b": [3, 4]}),
        # sticky: the member holding everything keeps its share, the newcomer takes the rest
        (3, "ab", {"a": [0, 1, 2]}, {"a": [0, 1], "b": [2]}),
        (4, "abc", {"a": [0, 1], "b": [2, 3]}, {"a": [0, 1], "b": [2], "c": [3]}),
        # more members than partitions: each gets one, shared, balanced
        (2, "abc", {}, {"a": [0], "b": [1], "c": [0]}),
        (2, "abc", {"a": [1], "b": [1]}, {"a": [1], "b": [1], "c": [0]}),
        (2, "abcd", {"a": [1], "b": [1], "c": [1]}, {"a": [1], "b": [1], "c": [0], "d": [0]}),
    ],
)
def test_simple_assignor(
    partitions: int, members: str, current: dict[str, list[int]], expected: dict[str, list[int]]
) -> None:
    out = simple_assign(
        {m: frozenset({"t"}) for m in members},
        {"t": TopicMetadata("t", T, partitions)},
        current={m: {T: set(p)} for m, p in current.items()},
    )
    assert {m: sorted(a.get(T, ())) for m, a in out.items()} == expected


def test_simple_assignor_skips_partitions_not_initialized() -> None:
    out = simple_assign({"a": frozenset({"t"})}, {"t": TopicMetadata("t", T, 3)}, lambda t, p: p != 1)
    assert sorted(out["a"][T]) == [0, 2]

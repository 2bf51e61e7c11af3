"""Online migration between classic and consumer groups, as a state machine: the ConsumerProtocol
codec, an upgrade carrying classic members over, classic members rejoining inside a consumer group
(revoke before assign through JoinGroup/SyncGroup/Heartbeat), their timers, and the downgrade when
only classic members remain."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from strom.broker.coordinator.group.assignors import TopicMeta
from strom.broker.coordinator.group.consumer import ConsumerGroupSettings, GroupError, MemberState
from strom.broker.coordinator.group.migration import (
    ClassicMeta,
    CustomAssignorError,
    MigrationPolicy,
    ProtocolError,
    classic_group_from_consumer,
    consumer_group_from_classic,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    upgrade_refusal,
)
from strom.broker.coordinator.group.state import Group, GroupSettings, GroupState, Member
from strom.protocol.errors import ErrorCode

A = b"A" * 16
TOPICS = {"a": TopicMeta("a", A, 4)}
IDS = {"a": A}
NAMES = {A: "a"}


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _tps(tps: dict[str, list[int]]) -> bytes:
    out = struct.pack(">i", len(tps))
    for t, parts in tps.items():
        out += _str(t) + struct.pack(">i", len(parts)) + b"".join(struct.pack(">i", p) for p in parts)
    return out


def subscription(topics, owned=None, version=3, rack=None, user_data=None) -> bytes:
    out = struct.pack(">h", version) + struct.pack(">i", len(topics)) + b"".join(_str(t) for t in topics)
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    if version >= 1:
        out += _tps(owned or {})
    if version >= 2:
        out += struct.pack(">i", -1)
    if version >= 3:
        out += struct.pack(">h", -1) if rack is None else _str(rack)
    return out


def classic_group(assignments: dict[str, list[int]], generation=5, protocol_type="consumer") -> Group:
    g = Group("g", GroupSettings(), lambda: 1000)
    g.state, g.generation, g.protocol_type, g.protocol_name = GroupState.STABLE, generation, protocol_type, "range"
    for member_id, parts in assignments.items():
        m = Member(
            member_id,
            None,
            "client-" + member_id,
            "/127.0.0.1",
            10_000,
            60_000,
            [("range", subscription(["a"], rack="r1")), ("cooperative-sticky", subscription(["a"]))],
        )
        m.assignment = encode_assignment({"a": set(parts)}, 3)
        g.members[member_id] = m
    g.leader_id = next(iter(g.members), None)
    return g


def hb(member_id, epoch, topics=None, owned=None):
    return SimpleNamespace(
        member_id=member_id,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=60000 if epoch == 0 else -1,
        subscribed_topic_names=topics,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=None
        if owned is None
        else [SimpleNamespace(topic_id=t, partitions=sorted(p)) for t, p in owned.items()],
    )


def rejoin(group, member_id, owned, now):
    """A classic member's JoinGroup inside the consumer group."""
    member = group.members[member_id]
    sub = decode_subscription(member.classic.protocols[0][1])
    return group.classic_join(
        member_id,
        None,
        member.classic,
        sub,
        {A: set(owned)} if owned else {},
        60_000,
        member.client_id,
        member.client_host,
        now,
        TOPICS,
    )


def test_consumer_protocol_codec():
    sub = decode_subscription(subscription(["a", "b"], owned={"a": [1, 2]}, rack="r1", user_data=b"u"))
    assert (sub.version, sub.topics, sub.user_data, sub.owned_partitions, sub.rack_id) == (
        3,
        ["a", "b"],
        b"u",
        [("a", [1, 2])],
        "r1",
    )
    assert decode_subscription(subscription(["a"], version=0)).owned_partitions == []
    newer = subscription(["a"], owned={"a": [0]}) + b"future fields"
    assert decode_subscription(struct.pack(">h", 9) + newer[2:]).topics == ["a"], "newer versions read as v3"
    assert decode_assignment(b"") == []
    data = encode_assignment({"a": {2, 0}, "b": set()}, 1)
    assert data[:2] == b"\x00\x01" and decode_assignment(data) == [("a", [0, 2])]
    with pytest.raises(CustomAssignorError):
        decode_assignment(data[:-4] + struct.pack(">i", 2) + b"xy")
    for bad in (b"\x00", subscription(["a"])[:7], struct.pack(">hi", 0, 1 << 30)):
        with pytest.raises(ProtocolError):
            decode_subscription(bad)


def test_upgrade_refusals_and_policy():
    g = classic_group({"m1": [0, 1, 2, 3]})
    assert upgrade_refusal(g, MigrationPolicy.BIDIRECTIONAL, 10) is None
    assert upgrade_refusal(g, MigrationPolicy.parse("UPGRADE"), 10) is None
    assert "online upgrade is disabled" in str(upgrade_refusal(g, MigrationPolicy.DOWNGRADE, 10))
    assert "online upgrade is disabled" in str(upgrade_refusal(g, MigrationPolicy.DISABLED, 10))
    assert "maximum size" in str(upgrade_refusal(g, MigrationPolicy.UPGRADE, 0))
    connect = classic_group({"m1": []}, protocol_type="connect")
    assert "does not use the consumer embedded protocol" in str(upgrade_refusal(connect, MigrationPolicy.UPGRADE, 10))
    with pytest.raises(ValueError):
        MigrationPolicy.parse("sideways")


def test_upgrade_carries_members_over_then_classic_members_rejoin_revoke_before_assign():
    classic = classic_group({"m1": [0, 1], "m2": [2, 3]}, generation=5)
    g = consumer_group_from_classic(classic, ConsumerGroupSettings(), IDS, now=0.0)
    assert (g.group_epoch, g.assignment_epoch) == (5, 5)
    m1 = g.members["m1"]
    assert (m1.member_epoch, m1.previous_member_epoch, m1.state) == (5, 5, MemberState.STABLE)
    assert m1.assigned == {A: {0, 1}} and g.target["m1"] == {A: {0, 1}} and m1.subscribed_topic_names == ["a"]
    assert m1.classic is not None
    assert m1.rack_id == "r1" and m1.classic.session_timeout_ms == 10_000 and m1.classic.protocol_name == "range"
    assert m1.session_deadline == 10.0
    assert g.state == "Stable"
    assert g.classic_heartbeat("m1", None, 5, 1.0) is ErrorCode.NONE

    # a consumer-protocol member joins: the epoch goes up, it waits for partitions the others release
    c, _ = g.heartbeat(hb("c", 0, ["a"], owned={}), 1.0, TOPICS)
    assert g.group_epoch == 6 and c.member_epoch == 6 and c.state is MemberState.UNRELEASED_PARTITIONS
    assert sum(len(p) for t in g.target.values() for p in t.values()) == 4
    # classic members learn it from their heartbeat and must rejoin within their rebalance timeout
    assert g.classic_heartbeat("m1", None, 5, 2.0) is ErrorCode.REBALANCE_IN_PROGRESS
    assert g.members["m1"].join_deadline == 62.0
    with pytest.raises(GroupError) as err:
        g.classic_heartbeat("m1", None, 4, 2.0)
    assert err.value.code is ErrorCode.ILLEGAL_GENERATION
    with pytest.raises(GroupError) as err:
        g.classic_sync("m1", None, 5, "consumer", "range", 2.0)
    assert err.value.code is ErrorCode.REBALANCE_IN_PROGRESS

    # m1 (eager: it owns nothing when it rejoins) must first give up what the target moves away
    target1 = g.target["m1"][A]
    m1 = rejoin(g, "m1", [], 3.0)
    assert m1.join_deadline is None and m1.sync_deadline == 63.0
    if target1 != {0, 1}:
        assert m1.state is MemberState.UNREVOKED_PARTITIONS and m1.member_epoch == 5
        assert g.classic_sync("m1", None, 5, "consumer", "range", 3.5).assigned == {A: target1 & {0, 1}}
        assert g.classic_heartbeat("m1", None, 5, 4.0) is ErrorCode.REBALANCE_IN_PROGRESS
        m1 = rejoin(g, "m1", [], 4.5)
    assert m1.member_epoch == 6 and m1.sync_deadline is not None
    synced = g.classic_sync("m1", None, 6, "consumer", None, 5.0)
    assert synced.sync_deadline is None
    m2 = rejoin(g, "m2", [], 5.0)
    if m2.state is MemberState.UNREVOKED_PARTITIONS:
        m2 = rejoin(g, "m2", [], 5.5)
    # the consumer member now gets everything its target holds
    c, _ = g.heartbeat(hb("c", 6, owned={}), 6.0, TOPICS)
    assert c.assigned == g.target["c"] and c.state is MemberState.STABLE
    owners = [(t, p) for m in g.members.values() for t, parts in m.owns().items() for p in parts]
    assert sorted(owners) == [(A, p) for p in range(4)], "each partition owned exactly once"
    with pytest.raises(GroupError) as err:
        g.classic_sync("m1", None, 6, "consumer", "roundrobin", 6.0)
    assert err.value.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    with pytest.raises(GroupError) as err:
        g.classic_heartbeat("c", None, 6, 6.0)
    assert err.value.code is ErrorCode.UNKNOWN_MEMBER_ID, "a consumer-protocol member has no classic heartbeat"


def test_last_consumer_member_leaving_asks_for_a_downgrade():
    classic = classic_group({"m1": [0, 1], "m2": [2, 3]}, generation=5)
    g = consumer_group_from_classic(classic, ConsumerGroupSettings(), IDS, now=0.0)
    g.heartbeat(hb("c", 0, ["a"], owned={}), 1.0, TOPICS)
    assert g.supports_classic("consumer", {"range"}) and not g.supports_classic("consumer", {"roundrobin"})
    assert not g.supports_classic("connect", {"range"})
    g.heartbeat(hb("c", -1), 2.0, TOPICS)
    assert g.downgrade_pending == {"c"} and "c" in g.members, "kept for the conversion, not removed"
    back = classic_group_from_consumer(g, g.downgrade_pending, GroupSettings(), lambda: 1000, NAMES, 2.0)
    assert back.state is GroupState.STABLE and back.generation == g.group_epoch == 6
    assert back.protocol_type == "consumer" and back.protocol_name == "range" and set(back.members) == {"m1", "m2"}
    for member_id in ("m1", "m2"):
        expected = sorted(g.target[member_id].get(A, ()))
        assert decode_assignment(back.members[member_id].assignment) == ([("a", expected)] if expected else [])
        assert back.members[member_id].assignment[:2] == b"\x00\x03", "in the member's own protocol version"
    assert back.members["m1"].session_timeout_ms == 10_000 and back.leader_id == "m1"


def test_no_downgrade_when_disabled_or_when_a_consumer_member_remains():
    classic = classic_group({"m1": [0, 1, 2, 3]})
    g = consumer_group_from_classic(classic, ConsumerGroupSettings(downgrade_enabled=False), IDS, now=0.0)
    g.heartbeat(hb("c", 0, ["a"], owned={}), 1.0, TOPICS)
    epoch = g.group_epoch
    g.heartbeat(hb("c", -1), 2.0, TOPICS)
    assert g.downgrade_pending is None and set(g.members) == {"m1"} and g.group_epoch == epoch + 1

    g = consumer_group_from_classic(classic_group({"m1": [0, 1, 2, 3]}), ConsumerGroupSettings(), IDS, now=0.0)
    g.heartbeat(hb("c", 0, ["a"], owned={}), 1.0, TOPICS)
    g.heartbeat(hb("d", 0, ["a"], owned={}), 1.0, TOPICS)
    g.heartbeat(hb("c", -1), 2.0, TOPICS)
    assert g.downgrade_pending is None and set(g.members) == {"m1", "d"}
    # LeaveGroup may name consumer-protocol members too (Kafka 4.0); nobody left: no downgrade
    assert g.classic_leave([("m1", None), ("zz", None), ("d", None)]) == [
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.NONE,
    ]
    assert g.downgrade_pending is None
    assert not g.members and g.state == "Empty"


def test_classic_member_timers_fence_it():
    classic = classic_group({"m1": [0, 1], "m2": [2, 3]})
    g = consumer_group_from_classic(classic, ConsumerGroupSettings(), IDS, now=0.0)
    c, _ = g.heartbeat(hb("c", 0, ["a"], owned={}), 1.0, TOPICS)
    assert g.classic_heartbeat("m1", None, 5, 2.0) is ErrorCode.REBALANCE_IN_PROGRESS
    g.classic_heartbeat("m2", None, 5, 2.0)
    g.heartbeat(hb("c", c.member_epoch), 5.0, TOPICS)
    assert g.next_deadline() == 12.0  # the classic session timeouts (10 s) come before the join deadlines
    g.classic_heartbeat("m2", None, 5, 11.0)
    g.heartbeat(hb("c", c.member_epoch), 11.0, TOPICS)
    g.expire(12.5)
    assert "m1" not in g.members and "m2" in g.members, "m1's classic session expired"
    m2 = rejoin(g, "m2", [], 13.0)
    if m2.state is MemberState.UNREVOKED_PARTITIONS:
        m2 = rejoin(g, "m2", [], 13.0)
    assert m2.sync_deadline == 73.0
    g.members["m2"].session_deadline = g.members["c"].session_deadline = 1000.0
    g.expire(74.0)
    assert "m2" not in g.members, "a classic member that joined but never synced is fenced"


def test_classic_join_refuses_a_fenced_static_member_and_replaces_a_returning_one():
    classic = classic_group({"m1": [0, 1, 2, 3]})
    classic.members["m1"].group_instance_id = "i1"
    classic.static_members["i1"] = "m1"
    g = consumer_group_from_classic(classic, ConsumerGroupSettings(), IDS, now=0.0)
    assert g.static_members == {"i1": "m1"}
    meta = g.members["m1"].classic
    assert meta is not None
    sub = decode_subscription(meta.protocols[0][1])
    with pytest.raises(GroupError) as err:
        g.classic_member("other", "i1")
    assert err.value.code is ErrorCode.FENCED_INSTANCE_ID
    m = g.classic_join("new", "i1", ClassicMeta(10_000, meta.protocols), sub, {}, 60_000, "c", "h", 1.0, TOPICS)
    assert m.member_id == "new" and set(g.members) == {"new"} and g.static_members == {"i1": "new"}
    assert m.assigned == {A: {0, 1, 2, 3}} and m.member_epoch == g.assignment_epoch


def test_a_classic_static_member_replacing_the_last_consumer_one_downgrades_without_a_rebalance():
    classic = classic_group({"m1": [0, 1]})
    g = consumer_group_from_classic(classic, ConsumerGroupSettings(), IDS, now=0.0)
    static = hb("c", 0, ["a"], owned={})
    static.instance_id = "i-c"
    g.heartbeat(static, 1.0, TOPICS)
    target_c = g.target["c"]
    meta = g.members["m1"].classic
    assert meta is not None
    sub = decode_subscription(meta.protocols[0][1])
    m = g.classic_join("c2", "i-c", ClassicMeta(10_000, meta.protocols), sub, {}, 60_000, "c", "h", 2.0, TOPICS)
    assert g.downgrade_pending == set() and not g.downgrade_rebalance
    assert m.member_id == "c2" and g.target["c2"] == target_c and "c" not in g.members
    back = classic_group_from_consumer(g, set(), GroupSettings(), lambda: 1000, NAMES, 2.0)
    assert back.state is GroupState.STABLE and set(back.members) == {"m1", "c2"}
    assert back.static_members == {"i-c": "c2"}
    expected = sorted(target_c.get(A, ()))
    assert decode_assignment(back.members["c2"].assignment) == ([("a", expected)] if expected else [])


def test_a_downgrade_with_unreadable_protocol_bytes_is_refused():
    classic = classic_group({"m1": [0, 1]})
    classic.members["m1"].protocols.append(("odd", b"\x00"))
    g = consumer_group_from_classic(classic, ConsumerGroupSettings(), IDS, now=0.0)
    g.heartbeat(hb("c", 0, ["a"], owned={}), 1.0, TOPICS)
    g.heartbeat(hb("c", -1), 2.0, TOPICS)
    assert g.downgrade_pending == {"c"}
    back = classic_group_from_consumer(g, {"c"}, GroupSettings(), lambda: 1000, NAMES, 2.0)
    assert back.protocol_name == "range", "the protocol every member supports"
    meta = g.members["m1"].classic
    assert meta is not None
    meta.protocols[:] = [("range", b"\x00")]
    with pytest.raises(ProtocolError):
        classic_group_from_consumer(g, {"c"}, GroupSettings(), lambda: 1000, NAMES, 2.0)

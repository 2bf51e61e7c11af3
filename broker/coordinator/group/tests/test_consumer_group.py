"""KIP-848 consumer groups as a state machine: assignors, revoke-before-assign, epochs, fencing,
leaving, static members, timeouts, regex subscriptions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strom.broker.coordinator.group.assignors import TopicMeta, parse_assignors, range_assign, uniform_assign
from strom.broker.coordinator.group.consumer import ConsumerGroup, ConsumerGroupSettings, GroupError, MemberState
from strom.protocol.errors import ErrorCode

A, B = b"A" * 16, b"B" * 16
TOPICS = {"a": TopicMeta("a", A, 4), "b": TopicMeta("b", B, 2)}


def hb(member_id, epoch, topics=None, owned=None, regex=None, instance=None, assignor=None, rebalance_ms=60000):
    return SimpleNamespace(
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance,
        rack_id=None,
        rebalance_timeout_ms=rebalance_ms if epoch == 0 else -1,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=None
        if owned is None
        else [SimpleNamespace(topic_id=t, partitions=sorted(p)) for t, p in owned.items()],
    )


def flat(assignment) -> set[tuple[bytes, int]]:
    return {(t, p) for t, parts in assignment.items() for p in parts}


def test_uniform_balances_members_whose_subscriptions_differ():
    # m1 held everything while alone; m2 joins subscribing to "b" only: it gets one of b's two
    # partitions (found by librdkafka 0045 in consumer-protocol mode: m2 got nothing)
    alone = uniform_assign({"m1": {"a", "b"}}, {"a": TopicMeta("a", A, 1), "b": TopicMeta("b", B, 2)}, {})
    both = uniform_assign(
        {"m1": {"a", "b"}, "m2": {"b"}}, {"a": TopicMeta("a", A, 1), "b": TopicMeta("b", B, 2)}, alone
    )
    assert sorted(len(flat(a)) for a in both.values()) == [1, 2]
    assert flat(both["m2"]) <= {(B, 0), (B, 1)} and (A, 0) in flat(both["m1"])
    assert flat(both["m1"]) <= flat(alone["m1"]), "m1 only gives up partitions"
    # many members on one topic, one on two: loads differ by at most one wherever a move is possible
    subs = {"x": {"a", "b"}, "y": {"a"}, "z": {"a"}}
    out = uniform_assign(subs, TOPICS, {"x": {A: {0, 1, 2, 3}, B: {0, 1}}})
    assert sorted(len(flat(a)) for a in out.values()) == [2, 2, 2]
    assert flat(out["x"]) | flat(out["y"]) | flat(out["z"]) == {(A, p) for p in range(4)} | {(B, p) for p in range(2)}
    assert all(t == A for m in ("y", "z") for t in out[m]), "only x subscribes to b"


def test_assignors_balance_and_keep_what_they_can():
    subs = {"m1": {"a", "b"}, "m2": {"a", "b"}}
    out = uniform_assign(subs, TOPICS, {})
    assert sorted(len(flat(a)) for a in out.values()) == [3, 3]
    assert flat(out["m1"]) | flat(out["m2"]) == {(A, p) for p in range(4)} | {(B, p) for p in range(2)}
    again = uniform_assign({**subs, "m3": {"a", "b"}}, TOPICS, out)
    assert sorted(len(flat(a)) for a in again.values()) == [2, 2, 2]
    assert all(flat(again[m]) <= flat(out[m]) for m in ("m1", "m2")), "existing owners keep partitions"
    ranged = range_assign({"m1": {"a"}, "m2": {"a", "b"}}, TOPICS, {})
    assert ranged == {"m1": {A: {0, 1}}, "m2": {A: {2, 3}, B: {0, 1}}}
    assert parse_assignors("org.apache.kafka.coordinator.group.assignor.RangeAssignor, uniform") == ["range", "uniform"]
    with pytest.raises(ValueError):
        parse_assignors("sticky")


def test_join_then_a_second_member_revoke_before_assign():
    g = ConsumerGroup("g", ConsumerGroupSettings())
    m1, send = g.heartbeat(hb("m1", 0, ["a"], owned={}), 0.0, TOPICS)
    assert send and m1.member_epoch == 1 and flat(m1.assigned) == {(A, p) for p in range(4)}
    assert g.state == "Stable"
    m2, _ = g.heartbeat(hb("m2", 0, ["a"], owned={}), 1.0, TOPICS)
    assert g.group_epoch == 2 and m2.member_epoch == 2
    assert m2.assigned == {} and m2.state is MemberState.UNRELEASED_PARTITIONS, "m1 still owns everything"
    # m1 heartbeats: it must give up two partitions first, keeping its epoch
    m1, send = g.heartbeat(hb("m1", 1, owned={A: {0, 1, 2, 3}}), 2.0, TOPICS)
    assert send and m1.member_epoch == 1 and m1.state is MemberState.UNREVOKED_PARTITIONS
    kept = flat(m1.assigned)
    assert len(kept) == 2 and g.state == "Reconciling"
    # still owning them: nothing moves
    m2, send = g.heartbeat(hb("m2", 2, owned={}), 3.0, TOPICS)
    assert m2.assigned == {} and not send
    # m1 reports it revoked: it moves to epoch 2, and m2 gets the released partitions
    m1, _ = g.heartbeat(hb("m1", 1, owned={A: {p for _, p in kept}}), 4.0, TOPICS)
    assert m1.member_epoch == 2 and m1.state is MemberState.STABLE
    m2, send = g.heartbeat(hb("m2", 2, owned={}), 5.0, TOPICS)
    assert send and flat(m2.assigned) == {(A, p) for p in range(4)} - kept
    assert g.state == "Stable"


def test_a_member_that_revokes_gets_its_new_partitions_in_the_same_answer():
    # A subscription change from one topic to another: revoke all of a, then receive all of b (found
    # by librdkafka 0045_subscribe_many_updates in consumer-protocol mode: b never came).
    g = ConsumerGroup("g", ConsumerGroupSettings())
    m, _ = g.heartbeat(hb("m", 0, ["a"], owned={}), 0.0, TOPICS)
    m, send = g.heartbeat(hb("m", 1, ["b"], owned={A: {0, 1, 2, 3}}), 1.0, TOPICS)
    assert send and m.member_epoch == 1 and m.assigned == {} and m.state is MemberState.UNREVOKED_PARTITIONS
    m, send = g.heartbeat(hb("m", 1, owned={}), 2.0, TOPICS)
    assert send and m.member_epoch == 2 and m.state is MemberState.STABLE
    assert flat(m.assigned) == {(B, 0), (B, 1)}
    assert g.state == "Stable"


def test_fencing_lost_responses_and_leaving():
    g = ConsumerGroup("g", ConsumerGroupSettings())
    m1, _ = g.heartbeat(hb("m1", 0, ["a"], owned={}), 0.0, TOPICS)
    with pytest.raises(GroupError) as unknown:
        g.heartbeat(hb("nobody", 1), 0.0, TOPICS)
    assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    # epoch 0 again under the same id: its first answer was lost (previous epoch 0): accepted as is
    again, send = g.heartbeat(hb("m1", 0, ["a", "b"], owned={}), 1.0, TOPICS)
    assert again is m1 and send and list(g.members) == ["m1"]
    m1 = g.members["m1"]
    epoch = m1.member_epoch
    g.group_epoch += 1  # something else changed (say, a topic grew): a new target, same partitions
    _, send = g.heartbeat(hb("m1", epoch, owned={t: set(p) for t, p in m1.assigned.items()}), 2.0, TOPICS)
    assert m1.member_epoch == epoch + 1 and m1.previous_member_epoch == epoch
    assert not send, "as Kafka: a new epoch with the same partitions carries no assignment"
    # the answer was lost: the member still sends its previous epoch with what it owns: accepted
    g.heartbeat(hb("m1", epoch, owned={t: set(p) for t, p in m1.assigned.items()}), 3.0, TOPICS)
    m2, _ = g.heartbeat(hb("m2", 0, ["a"], owned={}), 5.0, TOPICS)
    g.heartbeat(hb("m2", -1), 6.0, TOPICS)
    assert list(g.members) == ["m1"] and g.state == "Assigning"


def test_a_fenced_heartbeat_changes_nothing_and_the_member_stays_until_its_session_ends():
    # Kafka 4.0 (differential scenario consumer_group_heartbeat-v1-fenced-member-epoch): a wrong epoch
    # is refused with FENCED_MEMBER_EPOCH and nothing else happens; so is a rejoin with epoch 0 of a
    # member that moved past its first epoch. The refused member's session is not renewed.
    g = ConsumerGroup("g", ConsumerGroupSettings(session_timeout_ms=10_000))
    m1, _ = g.heartbeat(hb("m1", 0, ["a"], owned={}), 0.0, TOPICS)
    m2, _ = g.heartbeat(hb("m2", 0, ["a"], owned={}), 1.0, TOPICS)
    g.heartbeat(hb("m1", 1, owned={A: {0, 1, 2, 3}}), 2.0, TOPICS)
    g.heartbeat(hb("m1", 1, owned={t: set(p) for t, p in m1.assigned.items()}), 3.0, TOPICS)
    before = (g.group_epoch, g.assignment_epoch, m1.member_epoch, flat(m1.assigned), g.state)
    assert m1.member_epoch == 2 and m1.previous_member_epoch == 1
    for epoch, owned in ((7, {}), (1, {A: {0, 1, 2, 3}}), (0, {})):
        with pytest.raises(GroupError) as fenced:
            g.heartbeat(hb("m1", epoch, ["a"] if epoch == 0 else None, owned=owned), 4.0, TOPICS)
        assert fenced.value.code == ErrorCode.FENCED_MEMBER_EPOCH, epoch
        assert g.members["m1"] is m1
        assert (g.group_epoch, g.assignment_epoch, m1.member_epoch, flat(m1.assigned), g.state) == before
    # m2 keeps heartbeating; m1's session, last renewed at 3.0, ends at 13.0
    g.heartbeat(hb("m2", 2, owned={}), 12.0, TOPICS)
    assert not g.expire(12.9) and "m1" in g.members
    assert g.expire(13.0) and list(g.members) == ["m2"]
    # now the same id joins afresh
    back, _ = g.heartbeat(hb("m1", 0, ["a"], owned={}), 14.0, TOPICS)
    assert back is not m1 and back.member_epoch == g.group_epoch


def test_static_member_ids_are_checked_as_kafka_checks_them():
    g = ConsumerGroup("g", ConsumerGroupSettings())
    m1, _ = g.heartbeat(hb("m1", 0, ["a"], owned={}, instance="i1"), 0.0, TOPICS)
    for member_id in ("m1", "m1b"):  # the instance id is held, also for the same member id
        with pytest.raises(GroupError) as held:
            g.heartbeat(hb(member_id, 0, ["a"], owned={}, instance="i1"), 1.0, TOPICS)
        assert held.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
    with pytest.raises(GroupError) as other:
        g.heartbeat(hb("m1b", 1, instance="i1"), 1.0, TOPICS)
    assert other.value.code == ErrorCode.FENCED_INSTANCE_ID
    with pytest.raises(GroupError) as unknown:
        g.heartbeat(hb("m1", 1, instance="i9"), 1.0, TOPICS)
    assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    g.heartbeat(hb("m1", -2, instance="i1"), 2.0, TOPICS)
    with pytest.raises(GroupError) as away:
        g.heartbeat(hb("m1", 1, instance="i1"), 2.5, TOPICS)
    assert away.value.code == ErrorCode.FENCED_MEMBER_EPOCH, "away (epoch -2) until it rejoins with epoch 0"
    back, send = g.heartbeat(hb("m1", 0, ["a"], owned={}, instance="i1"), 3.0, TOPICS)
    assert back is m1 and send and m1.member_epoch == 1 and g.group_epoch == 1


def test_session_and_rebalance_timeouts_remove_members():
    g = ConsumerGroup("g", ConsumerGroupSettings(session_timeout_ms=10_000))
    g.heartbeat(hb("m1", 0, ["a"], owned={}, rebalance_ms=5000), 0.0, TOPICS)
    g.heartbeat(hb("m2", 0, ["a"], owned={}), 1.0, TOPICS)
    g.heartbeat(hb("m1", 1, owned={A: {0, 1, 2, 3}}), 2.0, TOPICS)
    assert g.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert g.next_deadline() == 7.0
    assert g.expire(7.0) and "m1" not in g.members, "revocation not done within the rebalance timeout"
    m2, _ = g.heartbeat(hb("m2", 2, owned={}), 8.0, TOPICS)
    assert flat(m2.assigned) == {(A, p) for p in range(4)}
    assert not g.expire(17.9)
    assert g.expire(18.0) and g.members == {}


def test_static_member_comes_back_with_its_assignment():
    g = ConsumerGroup("g", ConsumerGroupSettings())
    m1, _ = g.heartbeat(hb("m1", 0, ["a"], owned={}, instance="i1"), 0.0, TOPICS)
    before = (m1.member_epoch, flat(m1.assigned))
    with pytest.raises(GroupError) as taken:
        g.heartbeat(hb("other", 0, ["a"], owned={}, instance="i1"), 0.5, TOPICS)
    assert taken.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
    g.heartbeat(hb("m1", -2, instance="i1"), 1.0, TOPICS)
    assert "m1" in g.members and g.group_epoch == before[0], "a static member's temporary leave changes nothing"
    back, send = g.heartbeat(hb("m1b", 0, ["a"], owned={}, instance="i1"), 2.0, TOPICS)
    assert send and (back.member_epoch, flat(back.assigned)) == before and list(g.members) == ["m1b"]


def test_regex_subscription_follows_new_topics():
    g = ConsumerGroup("g", ConsumerGroupSettings())
    topics = {"orders-1": TopicMeta("orders-1", A, 2), "other": TopicMeta("other", B, 1)}
    m, _ = g.heartbeat(hb("m", 0, None, owned={}, regex="orders-.*"), 0.0, topics)
    assert m.assigned == {}, "as Kafka: a new regex is resolved after the answer to the heartbeat naming it"
    m, send = g.heartbeat(hb("m", m.member_epoch, owned={}), 0.5, topics)
    assert send and flat(m.assigned) == {(A, 0), (A, 1)}
    c = b"C" * 16
    topics["orders-2"] = TopicMeta("orders-2", c, 1)
    m, send = g.heartbeat(hb("m", m.member_epoch, owned={A: {0, 1}}), 1.0, topics)
    assert send and flat(m.assigned) == {(A, 0), (A, 1), (c, 0)}


def test_a_new_regex_is_resolved_after_the_answer_literal_topics_at_once():
    # librdkafka 0045_resubscribe_with_regex (consumer protocol) against Kafka 4.0: subscribing to a
    # regex and a literal topic assigns the literal topic first, the regex's topics a heartbeat later.
    g = ConsumerGroup("g", ConsumerGroupSettings())
    topics = {"re-1": TopicMeta("re-1", A, 2), "lit": TopicMeta("lit", B, 1)}
    m, _ = g.heartbeat(hb("m", 0, ["lit"], owned={}, regex="re-.*"), 0.0, topics)
    assert flat(m.assigned) == {(B, 0)}
    m, send = g.heartbeat(hb("m", m.member_epoch, owned={B: {0}}), 1.0, topics)
    assert send and flat(m.assigned) == {(B, 0), (A, 0), (A, 1)}
    # a second member naming a regex the group already resolved gets its share at once
    m2, _ = g.heartbeat(hb("m2", 0, [], owned={}, regex="re-.*"), 2.0, topics)
    assert g.subscribed_topics(topics)["m2"] == {"re-1"}, "no wait for a regex the group resolved already"
    assert g.assignment_epoch == g.group_epoch == 3

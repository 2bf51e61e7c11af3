"""ConsumerGroupHeartbeat / ConsumerGroupDescribe and the APIs that see consumer groups beside
classic ones (ListGroups, DescribeGroups, OffsetCommit/OffsetFetch with member epochs, JoinGroup)."""

from __future__ import annotations

import dataclasses
import time

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_apis import create


def heartbeat(group, member, epoch, topics=None, owned=None, **kw) -> dict:
    body = {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000 if epoch == 0 else -1,
        "subscribed_topic_names": topics,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": owned,
    }
    body.update(kw)
    return body


def commit(group, member, epoch, topic, partition, offset) -> dict:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": epoch,
        "member_id": member,
        "group_instance_id": None,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }


async def test_heartbeat_join_assign_commit_describe_and_leave(connect, broker):
    client = await connect()
    await create(client, "cgt", partitions=3)
    topic_id = broker.topics.topics["cgt"].topic_id
    joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("g1", "member-1", 0, ["cgt"], []))
    assert joined.error_code == ErrorCode.NONE and joined.member_id == "member-1" and joined.member_epoch == 1
    assert joined.heartbeat_interval_ms == 5000
    assert [(t.topic_id, t.partitions) for t in joined.assignment.topic_partitions] == [(topic_id, [0, 1, 2])]
    steady = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("g1", "member-1", 1))
    assert steady.error_code == ErrorCode.NONE and steady.member_epoch == 1 and steady.assignment is None

    # Commits carry the member epoch (OffsetCommit v9); any other epoch is stale (Kafka 4.0's answer,
    # compared in the differential scenario offset_commit-v9-consumer-group-member-epochs).
    ok = await client.request(ApiKey.OFFSET_COMMIT, 9, commit("g1", "member-1", 1, "cgt", 0, 42))
    assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE
    for epoch, code in ((0, ErrorCode.STALE_MEMBER_EPOCH), (5, ErrorCode.STALE_MEMBER_EPOCH)):
        bad = await client.request(ApiKey.OFFSET_COMMIT, 9, commit("g1", "member-1", epoch, "cgt", 0, 1))
        assert bad.topics[0].partitions[0].error_code == code
    stranger = await client.request(ApiKey.OFFSET_COMMIT, 9, commit("g1", "", -1, "cgt", 0, 1))
    assert stranger.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID, "not while it has members"
    fetched = await client.request(
        ApiKey.OFFSET_FETCH,
        9,
        {
            "groups": [
                {
                    "group_id": "g1",
                    "member_id": "member-1",
                    "member_epoch": 1,
                    "topics": [{"name": "cgt", "partition_indexes": [0]}],
                }
            ],
            "require_stable": False,
        },
    )
    assert fetched.groups[0].error_code == ErrorCode.NONE
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 42
    stale = await client.request(
        ApiKey.OFFSET_FETCH,
        9,
        {
            "groups": [{"group_id": "g1", "member_id": "member-1", "member_epoch": 3, "topics": None}],
            "require_stable": False,
        },
    )
    assert stale.groups[0].error_code == ErrorCode.STALE_MEMBER_EPOCH

    described = await client.request(
        ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["g1", "nope"], "include_authorized_operations": False}
    )
    g1, nope = described.groups
    assert (g1.error_code, g1.group_state, g1.group_epoch, g1.assignment_epoch, g1.assignor_name) == (
        ErrorCode.NONE,
        "Stable",
        1,
        1,
        "uniform",
    )
    member = g1.members[0]
    assert (member.member_id, member.member_epoch, member.subscribed_topic_names) == ("member-1", 1, ["cgt"])
    assert [(t.topic_name, t.partitions) for t in member.assignment.topic_partitions] == [("cgt", [0, 1, 2])]
    assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND

    # A classic JoinGroup joins the consumer group (first asked for a member id, as Kafka 4.0 does);
    # classic DescribeGroups says Dead, ListGroups says consumer.
    join = await client.request(
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": "g1",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    assert join.error_code == ErrorCode.MEMBER_ID_REQUIRED and join.member_id
    other = await client.request(
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": "g1",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "connect",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    assert other.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    old = await client.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g1"], "include_authorized_operations": False})
    assert old.groups[0].group_state == "Dead"
    listed = await client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in listed.groups] == [
        ("g1", "consumer", "Stable", "consumer")
    ]

    left = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("g1", "member-1", -1))
    assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -1)
    empty = await client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": ["empty"], "types_filter": []})
    assert [g.group_id for g in empty.groups] == ["g1"]
    gone = await client.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g1"]})
    assert gone.results[0].error_code == ErrorCode.NONE


async def test_heartbeat_request_errors(connect):
    client = await connect()
    await create(client, "cge")
    cases = [
        (heartbeat("", "m", 0, ["cge"], []), ErrorCode.INVALID_REQUEST),
        (heartbeat("g", "", 0, ["cge"], []), ErrorCode.INVALID_REQUEST),
        (heartbeat("g", "m", 0, None, []), ErrorCode.INVALID_REQUEST),
        (heartbeat("g", "m", 0, ["cge"], None), ErrorCode.INVALID_REQUEST),
        (heartbeat("g", "m", 0, ["cge"], [], rebalance_timeout_ms=-1), ErrorCode.INVALID_REQUEST),
        (heartbeat("g", "m", 0, ["cge"], [], server_assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR),
        (heartbeat("g", "m", 0, None, [], subscribed_topic_regex="(unclosed"), ErrorCode.INVALID_REGULAR_EXPRESSION),
        (heartbeat("g", "m", 4), ErrorCode.GROUP_ID_NOT_FOUND),
        (heartbeat("g", "m", -5), ErrorCode.INVALID_REQUEST),
    ]
    for body, code in cases:
        answer = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)
        assert answer.error_code == code, (body, answer)
        assert answer.member_id is None and answer.assignment is None
    v0 = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, heartbeat("g0", "", 0, ["cge"], []))
    assert v0.error_code == ErrorCode.NONE and len(v0.member_id) == 22, "v0: the coordinator names the member"
    known = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("g0", "someone-else", 1))
    assert known.error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_consumer_groups_come_back_after_a_restart(tmp_path, nursery):
    from .helpers import make_broker, open_client

    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        await create(client, "cgr", partitions=2)
        for member in ("m1", "m2"):
            await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gr", member, 0, ["cgr"], []))
        m1 = await client.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            heartbeat("gr", "m1", 1, owned=[{"topic_id": b.topics.topics["cgr"].topic_id, "partitions": [0, 1]}]),
        )
        owned = [(t.topic_id, list(t.partitions)) for t in m1.assignment.topic_partitions]
        assert len(owned[0][1]) == 1, "m1 gave one partition up"
        m1 = await client.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            heartbeat("gr", "m1", 1, owned=[{"topic_id": t, "partitions": p} for t, p in owned]),
        )
        m2 = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gr", "m2", 2, owned=[]))
        assert (m1.member_epoch, m2.member_epoch) == (2, 2)
        before = (
            await client.request(
                ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["gr"], "include_authorized_operations": False}
            )
        ).groups[0]
    finally:
        b.close()
    b2 = make_broker(tmp_path)
    try:
        client = open_client(b2, nursery)
        after = (
            await client.request(
                ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["gr"], "include_authorized_operations": False}
            )
        ).groups[0]
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
            before.group_epoch,
            before.assignment_epoch,
            "Stable",
        )
        assert sorted(
            (m.member_id, m.member_epoch, [list(t.partitions) for t in m.assignment.topic_partitions])
            for m in after.members
        ) == sorted(
            (m.member_id, m.member_epoch, [list(t.partitions) for t in m.assignment.topic_partitions])
            for m in before.members
        )
        again = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gr", "m2", 2))
        assert again.error_code == ErrorCode.NONE and again.member_epoch == 2, "members go on after a restart"
        left = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gr", "m1", -1))
        assert left.error_code == ErrorCode.NONE
    finally:
        b2.close()
    b3 = make_broker(tmp_path)
    try:
        client = open_client(b3, nursery)
        after = (
            await client.request(
                ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["gr"], "include_authorized_operations": False}
            )
        ).groups[0]
        assert [m.member_id for m in after.members] == ["m2"], "a member that left stays gone (tombstones)"
    finally:
        b3.close()


async def test_empty_groups_change_protocol_keeping_their_offsets(tmp_path, nursery):
    from .helpers import make_broker, open_client

    broker = make_broker(tmp_path, group_initial_rebalance_delay_ms=0)
    try:
        await _convert(broker, open_client(broker, nursery))
    finally:
        broker.close()


async def _convert(broker, client):
    await create(client, "conv")
    join = {
        "group_id": "conv",
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    # a consumer group commits, empties, and classic members take the id over
    await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("conv", "m", 0, ["conv"], []))
    await client.request(ApiKey.OFFSET_COMMIT, 9, commit("conv", "m", 1, "conv", 0, 7))
    await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("conv", "m", -1))
    joined = await client.request(ApiKey.JOIN_GROUP, 3, join)
    assert joined.error_code == ErrorCode.NONE
    assert broker.groups.consumer.get("conv") is None
    listed = await client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    assert [(g.group_id, g.group_type) for g in listed.groups] == [("conv", "classic")]
    fetched = await client.request(
        ApiKey.OFFSET_FETCH,
        8,
        {
            "groups": [{"group_id": "conv", "topics": [{"name": "conv", "partition_indexes": [0]}]}],
            "require_stable": False,
        },
    )
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 7
    # a heartbeat cannot take over a classic group whose member's subscription is no ConsumerProtocol
    refused = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("conv", "n", 0, ["conv"], []))
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Cannot upgrade classic group conv to consumer group because the embedded consumer protocol is malformed.",
    )


async def test_offset_delete_refuses_topics_a_consumer_group_member_subscribes_to(connect, broker):
    # As Kafka 4.0 (librdkafka 0081 DeleteConsumerGroupOffsets in consumer-protocol mode): a KIP-848
    # group's offsets may be deleted while it has members, except for topics a member subscribes to.
    client = await connect()
    for name in ("sub-a", "sub-b", "free"):
        await create(client, name, partitions=1)
    joined = await client.request(
        ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gd", "m-1", 0, ["sub-a"], [], subscribed_topic_regex="sub-b")
    )
    assert joined.error_code == ErrorCode.NONE
    steady = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gd", "m-1", joined.member_epoch))
    epoch = steady.member_epoch
    for topic in ("sub-a", "sub-b", "free"):
        ok = await client.request(ApiKey.OFFSET_COMMIT, 9, commit("gd", "m-1", epoch, topic, 0, 7))
        assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE, topic

    async def delete(topic):
        response = await client.request(
            ApiKey.OFFSET_DELETE,
            0,
            {"group_id": "gd", "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]},
        )
        return response.error_code, [p.error_code for t in response.topics for p in t.partitions]

    assert await delete("sub-a") == (ErrorCode.NONE, [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC])
    assert await delete("sub-b") == (ErrorCode.NONE, [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC]), "by its regex"
    assert await delete("free") == (ErrorCode.NONE, [ErrorCode.NONE])
    fetched = await client.request(
        ApiKey.OFFSET_FETCH,
        9,
        {
            "groups": [{"group_id": "gd", "member_id": None, "member_epoch": -1, "topics": None}],
            "require_stable": False,
        },
    )
    assert sorted(t.name for t in fetched.groups[0].topics) == ["sub-a", "sub-b"]


def _subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v1 (no owned partitions), as the Java client writes it."""
    name = topic.encode()
    return b"\x00\x01\x00\x00\x00\x01" + len(name).to_bytes(2, "big") + name + b"\xff\xff\xff\xff\x00\x00\x00\x00"


async def _classic_member(client, group: str, topic: str, partitions: list[int]) -> tuple[str, int]:
    from strom.broker.coordinator.group.migration import encode_assignment

    join = {
        "group_id": group,
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": _subscription(topic)}],
    }
    first = await client.request(ApiKey.JOIN_GROUP, 5, join)
    joined = await client.request(ApiKey.JOIN_GROUP, 5, {**join, "member_id": first.member_id})
    assert joined.error_code == ErrorCode.NONE
    synced = await client.request(
        ApiKey.SYNC_GROUP,
        5,
        {
            "group_id": group,
            "generation_id": joined.generation_id,
            "member_id": joined.member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": joined.member_id, "assignment": encode_assignment({topic: partitions}, 1)}],
        },
    )
    assert synced.error_code == ErrorCode.NONE
    return joined.member_id, joined.generation_id


async def test_a_live_classic_group_upgrades_is_written_as_kafka_writes_it_and_comes_back(tmp_path, nursery):
    from strom.broker.coordinator.group.coordinator import OFFSETS_TOPIC
    from strom.broker.coordinator.group.records import ConsumerGroupKey, GroupKey, decode_consumer_value, decode_key
    from strom.protocol.records.batch import iter_batches, iter_records

    from .helpers import make_broker, open_client

    b = make_broker(tmp_path, group_initial_rebalance_delay_ms=0)
    try:
        client = open_client(b, nursery)
        await create(client, "mig", partitions=2)
        classic_id, generation = await _classic_member(client, "mg", "mig", [0, 1])
        joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("mg", "new", 0, ["mig"], []))
        assert (joined.error_code, joined.member_epoch) == (ErrorCode.NONE, generation + 1)
        partition = b.replicas.partition(OFFSETS_TOPIC, b.groups.partition_of("mg"))
        data = partition.log.read(0, 1 << 20, max_offset=partition.high_watermark).records.read()
        records = [
            (decode_key(r.key), r.value)
            for pos, h in iter_batches(data)
            for r in iter_records(memoryview(data)[pos : pos + h.size])
        ]
        tombstone = records.index((GroupKey("mg"), None))
        converted = [k.version for k, _ in records[tombstone + 1 : tombstone + 6]]
        assert converted == [5, 3, 7, 6, 8], "Kafka's conversion: member, epoch, target, target epoch, current"
        member = decode_consumer_value("ConsumerGroupMemberMetadata", records[tombstone + 1][1])
        assert member.classic_member_metadata.session_timeout_ms == 10000
        assert [p.name for p in member.classic_member_metadata.supported_protocols] == ["range"]
        assert ConsumerGroupKey(5, "mg", "new") in [k for k, _ in records]
    finally:
        b.close()
    b2 = make_broker(tmp_path, group_initial_rebalance_delay_ms=0)
    try:
        client = open_client(b2, nursery)
        group = b2.groups.consumer.get("mg")
        assert group is not None and group.members[classic_id].classic.session_timeout_ms == 10000
        assert b2.groups.get("mg") is None or not b2.groups.get("mg").members, "no classic group beside it"
        # the classic member goes on through the classic APIs after the restart
        beat = await client.request(
            ApiKey.HEARTBEAT,
            4,
            {"group_id": "mg", "generation_id": generation, "member_id": classic_id, "group_instance_id": None},
        )
        assert beat.error_code == ErrorCode.REBALANCE_IN_PROGRESS
        left = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("mg", "new", -1))
        assert left.error_code == ErrorCode.NONE
        described = await client.request(
            ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["mg"], "include_authorized_operations": False}
        )
        assert (described.groups[0].group_state, [m.member_id for m in described.groups[0].members]) == (
            "PreparingRebalance",
            [classic_id],
        ), "back to a classic group"
    finally:
        b2.close()


async def test_migration_policy_disabled_refuses_the_upgrade(tmp_path, nursery):
    from .helpers import make_broker, open_client

    b = make_broker(tmp_path, group_initial_rebalance_delay_ms=0, group_consumer_migration_policy="DISABLED")
    try:
        client = open_client(b, nursery)
        await create(client, "mig", partitions=1)
        await _classic_member(client, "md", "mig", [0])
        refused = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("md", "new", 0, ["mig"], []))
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Cannot upgrade classic group md to consumer group because online upgrade is disabled.",
        )
    finally:
        b.close()


async def test_an_upgrade_during_a_rebalance_answers_the_waiting_join(tmp_path, nursery):
    import trio

    from .helpers import make_broker, open_client

    b = make_broker(tmp_path, group_initial_rebalance_delay_ms=0)
    try:
        client, other = open_client(b, nursery), open_client(b, nursery)
        await create(client, "mig", partitions=2)
        first, generation = await _classic_member(client, "mr", "mig", [0, 1])
        join = {
            "group_id": "mr",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": _subscription("mig")}],
        }
        answers = []

        async def second_member():  # JoinGroup v3: waits for the first member to rejoin
            answers.append(await other.request(ApiKey.JOIN_GROUP, 3, join))

        nursery.start_soon(second_member)
        await trio.sleep(0.2)
        assert b.groups.get("mr").state.value == "PreparingRebalance" and not answers
        joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("mr", "new", 0, ["mig"], []))
        assert joined.error_code == ErrorCode.NONE
        with trio.fail_after(5):
            while not answers:
                await trio.sleep(0.05)
        assert answers[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS, "the waiting JoinGroup is told to rejoin"
        described = await client.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["mr"], "include_authorized_operations": False}
        )
        assert len(described.groups[0].members) == 3, "both classic members were carried over"
        rejoined = await other.request(ApiKey.JOIN_GROUP, 3, {**join, "member_id": answers[0].member_id})
        assert rejoined.error_code == ErrorCode.NONE and rejoined.generation_id == described.groups[0].group_epoch
        assert first in {m.member_id for m in described.groups[0].members} and generation == 1
    finally:
        b.close()


async def test_transactional_offsets_of_consumer_group_members(env):
    from strom.broker.coordinator.txn.tests.test_coordinator import TID, init

    _, client, _ = env
    await create(client, "t")
    joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("g", "m", 0, ["t"], []))
    pid = (await init(client)).producer_id
    added = await client.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": TID, "producer_id": pid, "producer_epoch": 0, "group_id": "g"},
    )
    assert added.error_code == ErrorCode.NONE

    async def txn_commit(member: str, epoch: int) -> ErrorCode:
        response = await client.request(
            ApiKey.TXN_OFFSET_COMMIT,
            3,
            {
                "transactional_id": TID,
                "group_id": "g",
                "producer_id": pid,
                "producer_epoch": 0,
                "generation_id": epoch,
                "member_id": member,
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 7,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
        return ErrorCode(response.topics[0].partitions[0].error_code)

    assert await txn_commit("m", joined.member_epoch + 1) == ErrorCode.ILLEGAL_GENERATION
    assert await txn_commit("nobody", joined.member_epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert await txn_commit("m", joined.member_epoch) == ErrorCode.NONE, "a KIP-848 member's groupMetadata()"


async def test_offsets_of_topics_a_consumer_group_subscribes_to_do_not_expire(connect, broker):
    client = await connect()
    await create(client, "kept")
    await create(client, "old")
    joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("ge", "m", 0, ["kept"], []))
    for topic in ("kept", "old"):
        committed = await client.request(ApiKey.OFFSET_COMMIT, 9, commit("ge", "m", joined.member_epoch, topic, 0, 5))
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
    later = int(time.time() * 1000) + broker.groups.config.offsets_retention_ms + 60_000
    assert broker.groups.expire_offsets(later) == 1
    assert set(broker.groups.fetch_offsets("ge", None)) == {("kept", 0)}, "the subscribed topic's offset stays"


def _offsets_records(broker, group_id: str) -> list:
    from strom.broker.coordinator.group.coordinator import OFFSETS_TOPIC
    from strom.broker.coordinator.group.records import decode_key
    from strom.protocol.records.batch import iter_batches, iter_records

    partition = broker.replicas.partition(OFFSETS_TOPIC, broker.groups.partition_of(group_id))
    data = partition.log.read(0, 1 << 20, max_offset=partition.high_watermark).records.read()
    return [
        [(decode_key(r.key), r.value) for r in iter_records(memoryview(data)[pos : pos + h.size])]
        for pos, h in iter_batches(data)
    ]


async def test_empty_consumer_groups_whose_offsets_expired_are_deleted_and_stay_deleted(tmp_path, nursery):
    # Kafka 4.0 (offsets.retention.minutes=1, checked by hand 2026-11-23 with kafka-dump-log.sh): an
    # empty consumer group whose offsets all expired, or that has none, is deleted by the offset
    # expiry: one batch of its offset tombstones and the group's own (target assignment epoch,
    # subscription metadata, group epoch); ListGroups no longer lists it, ConsumerGroupDescribe
    # answers GROUP_ID_NOT_FOUND. A group with members, or with offsets not yet expired, stays.
    from strom.broker.coordinator.group.records import ConsumerGroupKey, OffsetKey

    from .helpers import make_broker, open_client

    describe = {"group_ids": ["gone", "never", "young", "live"], "include_authorized_operations": False}
    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        await create(client, "exp")
        for group in ("gone", "never", "live"):
            joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(group, "m", 0, ["exp"], []))
            if group != "never":
                committed = await client.request(
                    ApiKey.OFFSET_COMMIT, 9, commit(group, "m", joined.member_epoch, "exp", 0, 5)
                )
                assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
            if group != "live":
                await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(group, "m", -1))
        later = int(time.time() * 1000) + b.groups.config.offsets_retention_ms + 60_000
        young = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("young", "m", 0, ["exp"], []))
        await client.request(ApiKey.OFFSET_COMMIT, 9, commit("young", "m", young.member_epoch, "exp", 0, 1))
        await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("young", "m", -1))
        b.groups.groups["young"].offsets[("exp", 0)] = dataclasses.replace(
            b.groups.groups["young"].offsets[("exp", 0)], commit_timestamp=later
        )  # committed "just now"

        assert b.groups.expire_offsets(later) == 1, "gone's offset (live's topic is subscribed, young's is new)"
        last = _offsets_records(b, "gone")[-1]
        assert last == [
            (OffsetKey("gone", "exp", 0), None),
            (ConsumerGroupKey(6, "gone"), None),
            (ConsumerGroupKey(4, "gone"), None),
            (ConsumerGroupKey(3, "gone"), None),
        ]
        assert _offsets_records(b, "never")[-1] == [
            (ConsumerGroupKey(6, "never"), None),
            (ConsumerGroupKey(4, "never"), None),
            (ConsumerGroupKey(3, "never"), None),
        ]
        before = await client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, describe)
    finally:
        b.close()
    b2 = make_broker(tmp_path)
    try:
        client = open_client(b2, nursery)
        for answer in (before, await client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, describe)):
            assert [(g.group_id, g.error_code, g.group_state) for g in answer.groups] == [
                ("gone", ErrorCode.GROUP_ID_NOT_FOUND, ""),
                ("never", ErrorCode.GROUP_ID_NOT_FOUND, ""),
                ("young", ErrorCode.NONE, "Empty"),
                ("live", ErrorCode.NONE, "Stable"),
            ]
        listed = await client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        assert sorted((g.group_id, g.group_type) for g in listed.groups) == [
            ("live", "consumer"),
            ("young", "consumer"),
        ]
        classic = await client.request(
            ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["gone"], "include_authorized_operations": False}
        )
        assert (classic.groups[0].error_code, classic.groups[0].group_state) == (ErrorCode.NONE, "Dead")
        assert b2.groups.fetch_offsets("gone", None) == {}
        assert set(b2.groups.fetch_offsets("live", None)) == {("exp", 0)}
    finally:
        b2.close()


async def test_resolved_regexes_are_written_as_kafka_writes_them_and_come_back(tmp_path, nursery):
    # Kafka 4.0 writes a ConsumerGroupRegularExpression record (key version 16: group, regex; value:
    # the topic names, a version, a timestamp) once it resolved a regex a member subscribes with, a
    # new one when the regex matches other topics, and a tombstone when no member uses it any more
    # (after the leaving member's own tombstones); the coordinator loads them back.
    from strom.broker.coordinator.group.records import ConsumerGroupKey, decode_consumer_value

    from .helpers import make_broker, open_client

    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        for name in ("re-a", "re-b", "other"):
            await create(client, name)
        m1 = await client.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("rx", "m1", 0, [], [], subscribed_topic_regex="re-.*")
        )
        key = ConsumerGroupKey(16, "rx", regex="re-.*")
        written = [(k, v) for batch in _offsets_records(b, "rx") for k, v in batch if k == key]
        assert len(written) == 1, "resolved after the answer to the heartbeat naming it"
        first = decode_consumer_value("ConsumerGroupRegularExpression", written[0][1])
        assert (first.topics, first.version) == (["re-a", "re-b"], 1)
        assert abs(first.timestamp - time.time() * 1000) < 60_000
        await client.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("rx", "m2", 0, [], [], subscribed_topic_regex="re-.*")
        )
        m1 = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("rx", "m1", m1.member_epoch))
        assert m1.error_code == ErrorCode.NONE
        assert len([k for batch in _offsets_records(b, "rx") for k, _ in batch if k == key]) == 1, (
            "the same topics: no new resolution"
        )
        await create(client, "re-c")
        m1 = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("rx", "m1", m1.member_epoch))
        assert m1.error_code == ErrorCode.NONE
        latest = [v for batch in _offsets_records(b, "rx") for k, v in batch if k == key][-1]
        second = decode_consumer_value("ConsumerGroupRegularExpression", latest)
        assert (second.topics, second.version) == (["re-a", "re-b", "re-c"], 2)
        await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("rx", "m1", -1))
        assert (key, None) not in _offsets_records(b, "rx")[-1], "m2 still uses it"
    finally:
        b.close()
    b2 = make_broker(tmp_path)
    try:
        client = open_client(b2, nursery)
        group = b2.groups.consumer.get("rx")
        assert {r: (v.topics, v.version) for r, v in group.resolved_regexes.items()} == {
            "re-.*": (("re-a", "re-b", "re-c"), 2)
        }
        m2 = group.members["m2"]
        await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("rx", "m2", m2.member_epoch))
        assert [k for batch in _offsets_records(b2, "rx") for k, _ in batch].count(key) == 2, "nothing rewritten"
        await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("rx", "m2", -1))
        last = _offsets_records(b2, "rx")[-1]
        # as Kafka 4.0 writes a last member's leave: its tombstones, the regex's, the subscription
        # metadata (no topics now) and the group epoch
        assert [(k.version, v is None) for k, v in last] == [
            (8, True),
            (7, True),
            (5, True),
            (16, True),
            (4, False),
            (3, False),
        ]
        assert last[3][0] == key
        assert decode_consumer_value("ConsumerGroupPartitionMetadata", last[4][1]).topics == []
    finally:
        b2.close()
    b3 = make_broker(tmp_path)
    try:
        assert b3.groups.consumer.get("rx").resolved_regexes == {}
    finally:
        b3.close()


async def test_member_states_are_written_with_kafkas_codes_and_old_codes_still_load(tmp_path, nursery):
    # Kafka 4.0's ConsumerGroupCurrentMemberAssignment records (read with its kafka-dump-log): state 0
    # stable, 1 unrevoked partitions, 2 unreleased partitions. Strom wrote 1, 2, 3 before.
    from strom.broker.coordinator.group.consumer import MemberState
    from strom.broker.coordinator.group.records import ConsumerGroupKey, decode_consumer_value, encode_consumer_value

    from .helpers import make_broker, open_client

    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        await create(client, "st", partitions=2)
        tid = b.topics.topics["st"].topic_id
        await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gs", "m1", 0, ["st"], []))
        await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("gs", "m2", 0, ["st"], []))
        await client.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            heartbeat("gs", "m1", 1, owned=[{"topic_id": tid, "partitions": [0, 1]}]),
        )
        states = [
            (k.member, decode_consumer_value("ConsumerGroupCurrentMemberAssignment", v).state)
            for batch in _offsets_records(b, "gs")
            for k, v in batch
            if k.version == 8
        ]
        assert states == [("m1", 0), ("m2", 2), ("m1", 1)], "stable, unreleased (m1 holds both), unrevoked"

        def current(state, pending):
            return encode_consumer_value(
                "ConsumerGroupCurrentMemberAssignment",
                {
                    "member_epoch": 3,
                    "previous_member_epoch": 2,
                    "state": state,
                    "assigned_partitions": [{"topic_id": tid, "partitions": [0]}],
                    "partitions_pending_revocation": [{"topic_id": tid, "partitions": [1]}] if pending else [],
                },
            )

        for code, pending, expected in (
            (1, False, MemberState.STABLE),
            (2, True, MemberState.UNREVOKED_PARTITIONS),
            (3, False, MemberState.UNRELEASED_PARTITIONS),  # Strom's old codes
            (0, False, MemberState.STABLE),
            (1, True, MemberState.UNREVOKED_PARTITIONS),
            (2, False, MemberState.UNRELEASED_PARTITIONS),
        ):  # Kafka's
            b.groups.consumer.replay(ConsumerGroupKey(8, "old", "m"), current(code, pending))
            assert b.groups.consumer.get("old").members["m"].state is expected, (code, pending)
    finally:
        b.close()

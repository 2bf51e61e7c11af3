"""The newest versions Kafka 4.0 serves: Metadata v13, DescribeGroups v6, DescribeCluster v2 and
ConsumerGroupDescribe v1 (their answers are also compared with Kafka 4.0's in
compat_tests/differential)."""

from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_apis import create
from .test_consumer_group_apis import _classic_member, heartbeat

NOT_REQUESTED = -2147483648  # authorized operations: none asked for / none to give


async def test_api_versions_advertises_the_kafka_4_0_versions(connect):
    client = await connect()
    answer = await client.request(ApiKey.API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"})
    highest = {k.api_key: k.max_version for k in answer.api_keys}
    assert (
        highest[ApiKey.METADATA],
        highest[ApiKey.DESCRIBE_GROUPS],
        highest[ApiKey.DESCRIBE_CLUSTER],
        highest[ApiKey.CONSUMER_GROUP_DESCRIBE],
    ) == (13, 6, 2, 1)


async def test_metadata_v13_answers_as_v12_with_a_top_level_error_code(connect):
    client = await connect()
    await create(client, "m13", partitions=2)
    body = {
        "topics": [{"name": "m13", "topic_id": bytes(16)}, {"name": "absent", "topic_id": bytes(16)}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    v12 = await client.request(ApiKey.METADATA, 12, body)
    v13 = await client.request(ApiKey.METADATA, 13, body)
    assert v13.error_code == ErrorCode.NONE
    assert (
        [(t.name, t.error_code, len(t.partitions)) for t in v13.topics]
        == [(t.name, t.error_code, len(t.partitions)) for t in v12.topics]
        == [("m13", ErrorCode.NONE, 2), ("absent", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0)]
    )
    assert [b.node_id for b in v13.brokers] == [b.node_id for b in v12.brokers]


async def test_describe_groups_v6_says_group_id_not_found_where_v5_says_dead(tmp_path, nursery):
    from .helpers import make_broker, open_client

    b = make_broker(tmp_path, group_initial_rebalance_delay_ms=0)
    try:
        client = open_client(b, nursery)
        await create(client, "dg", partitions=1)
        classic_id, _ = await _classic_member(client, "classic", "dg", [0])
        joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("kip848", "m", 0, ["dg"], []))
        assert joined.error_code == ErrorCode.NONE
        groups = ["classic", "no-such-group", "kip848"]
        v5 = await client.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": groups, "include_authorized_operations": True})
        v6 = await client.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": groups, "include_authorized_operations": True})
        assert [(g.group_id, g.error_code, g.group_state) for g in v5.groups] == [
            ("classic", ErrorCode.NONE, "Stable"),
            ("no-such-group", ErrorCode.NONE, "Dead"),
            ("kip848", ErrorCode.NONE, "Dead"),
        ]
        assert [(g.group_id, g.error_code, g.error_message, g.group_state) for g in v6.groups] == [
            ("classic", ErrorCode.NONE, None, "Stable"),
            ("no-such-group", ErrorCode.GROUP_ID_NOT_FOUND, "Group no-such-group not found.", "Dead"),
            ("kip848", ErrorCode.GROUP_ID_NOT_FOUND, "Group kip848 is not a classic group.", "Dead"),
        ]
        assert [m.member_id for m in v6.groups[0].members] == [classic_id]
        # as Kafka 4.0: a group not found has no authorized operations, a found one its own
        assert [g.authorized_operations for g in v6.groups] == [
            v5.groups[0].authorized_operations,
            NOT_REQUESTED,
            NOT_REQUESTED,
        ]
        assert v5.groups[1].authorized_operations != NOT_REQUESTED
    finally:
        b.close()


async def test_describe_cluster_v2_marks_every_registered_broker_unfenced(connect, broker):
    client = await connect()
    for include_fenced in (False, True):
        answer = await client.request(
            ApiKey.DESCRIBE_CLUSTER,
            2,
            {
                "include_cluster_authorized_operations": False,
                "endpoint_type": 1,
                "include_fenced_brokers": include_fenced,
            },
        )
        assert answer.error_code == ErrorCode.NONE
        assert [(b.broker_id, b.is_fenced) for b in answer.brokers] == [(broker.node_id, False)]
    v1 = await client.request(
        ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    )
    assert [b.broker_id for b in v1.brokers] == [broker.node_id]
    controllers = await client.request(
        ApiKey.DESCRIBE_CLUSTER,
        2,
        {"include_cluster_authorized_operations": False, "endpoint_type": 2, "include_fenced_brokers": True},
    )
    assert controllers.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE


async def test_consumer_group_describe_v1_gives_each_members_type(tmp_path, nursery):
    from .helpers import make_broker, open_client

    b = make_broker(tmp_path, group_initial_rebalance_delay_ms=0)
    try:
        client = open_client(b, nursery)
        await create(client, "cgd", partitions=2)
        # a live classic group upgraded by a consumer-protocol member: both kinds in one consumer group
        classic_id, _ = await _classic_member(client, "mixed", "cgd", [0, 1])
        joined = await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("mixed", "new", 0, ["cgd"], []))
        assert joined.error_code == ErrorCode.NONE
        body = {"group_ids": ["mixed", "no-such-group"], "include_authorized_operations": False}
        v1 = await client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body)
        mixed, missing = v1.groups
        assert sorted((m.member_id, m.member_type) for m in mixed.members) == sorted([(classic_id, 0), ("new", 1)])
        assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND and not missing.members
        v0 = await client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, body)
        assert sorted(m.member_id for m in v0.groups[0].members) == sorted([classic_id, "new"])
        assert {m.member_type for m in v0.groups[0].members} == {-1}, "not in v0: decoded as its default, unknown"
    finally:
        b.close()

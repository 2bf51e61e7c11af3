"""DescribeTopicPartitions, DeleteRecords and ElectLeaders on a standalone broker, over raw frames."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client
from .test_apis import batch, create, fetch_body, produce_body


def dtp(topics, limit=2000, cursor=None) -> dict:
    return {"topics": [{"name": t} for t in topics], "response_partition_limit": limit, "cursor": cursor}


def pages(response) -> list[tuple[str, list[int]]]:
    return [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics]


async def test_describe_topic_partitions_pages_through_topics_in_name_order(connect, broker):
    client = await connect()
    for name, count in (("pc", 1), ("pa", 3), ("pb", 2)):
        await create(client, name, partitions=count)
    first = await client.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp(["pc", "pa", "pb"], limit=2))
    assert pages(first) == [("pa", [0, 1])]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("pa", 2)
    part = first.topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.replica_nodes, part.isr_nodes) == (
        0,
        broker.node_id,
        [broker.node_id],
        [broker.node_id],
    )
    assert first.topics[0].topic_id == broker.topics.topics["pa"].topic_id
    cursor = {"topic_name": "pa", "partition_index": 2}
    second = await client.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp(["pc", "pa", "pb"], limit=3, cursor=cursor))
    assert pages(second) == [("pa", [2]), ("pb", [0, 1])]
    assert (second.next_cursor.topic_name, second.next_cursor.partition_index) == ("pc", 0), (
        "a page that ends with a topic points at the start of the next one"
    )
    third = await client.request(
        ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp(["pc", "pa", "pb"], cursor={"topic_name": "pc", "partition_index": 0})
    )
    assert pages(third) == [("pc", [0])] and third.next_cursor is None
    everything = await client.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp([]))
    assert pages(everything) == [("pa", [0, 1, 2]), ("pb", [0, 1]), ("pc", [0])]


async def test_describe_topic_partitions_errors(connect):
    client = await connect()
    await create(client, "known")
    answer = await client.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp(["known", "missing", "bad name!"]))
    codes = {t.name: t.error_code for t in answer.topics}
    assert codes == {
        "known": ErrorCode.NONE,
        "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "bad name!": ErrorCode.INVALID_TOPIC_EXCEPTION,
    }
    for cursor in ({"topic_name": "other", "partition_index": 0}, {"topic_name": "known", "partition_index": -1}):
        refused = await client.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp(["known"], cursor=cursor))
        assert [(t.name, t.error_code, t.partitions) for t in refused.topics] == [
            ("known", ErrorCode.INVALID_REQUEST, [])
        ]


async def test_describe_topic_partitions_limit_is_capped_by_the_broker(tmp_path, nursery):
    b = make_broker(tmp_path, max_request_partition_size_limit=2)
    try:
        client = open_client(b, nursery)
        await create(client, "many", partitions=5)
        answer = await client.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp(["many"], limit=100))
        assert pages(answer) == [("many", [0, 1])] and answer.next_cursor.partition_index == 2
    finally:
        b.close()


def delete_body(topic: str, offsets: dict[int, int], timeout_ms: int = 1000) -> dict:
    return {
        "topics": [{"name": topic, "partitions": [{"partition_index": p, "offset": o} for p, o in offsets.items()]}],
        "timeout_ms": timeout_ms,
    }


async def list_earliest(client, topic: str, partition: int = 0) -> int:
    response = await client.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -2}]}],
        },
    )
    return response.topics[0].partitions[0].offset


async def test_delete_records_moves_the_low_watermark_and_survives_a_restart(tmp_path, nursery):
    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        await create(client, "del", partitions=2)
        await client.request(ApiKey.PRODUCE, 9, produce_body("del", batch(10)))
        await client.request(ApiKey.PRODUCE, 9, produce_body("del", batch(4), partition=1))
        answer = await client.request(ApiKey.DELETE_RECORDS, 2, delete_body("del", {0: 6, 1: -1}))
        results = {p.partition_index: (p.error_code, p.low_watermark) for p in answer.topics[0].partitions}
        assert results == {0: (ErrorCode.NONE, 6), 1: (ErrorCode.NONE, 4)}, "-1 means the high watermark"
        assert await list_earliest(client, "del") == 6
        below = await client.request(ApiKey.FETCH, 12, fetch_body("del", 2))
        assert below.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        at = await client.request(ApiKey.FETCH, 12, fetch_body("del", 6))
        assert [r.offset for r in iter_records(at.responses[0].partitions[0].records) if r.offset >= 6] == [6, 7, 8, 9]
        backwards = await client.request(ApiKey.DELETE_RECORDS, 1, delete_body("del", {0: 3}))
        assert (backwards.topics[0].partitions[0].error_code, backwards.topics[0].partitions[0].low_watermark) == (
            ErrorCode.NONE,
            6,
        ), "an offset below the low watermark changes nothing"
        bad = await client.request(ApiKey.DELETE_RECORDS, 0, delete_body("del", {0: 11, 7: 0}))
        codes = {p.partition_index: p.error_code for p in bad.topics[0].partitions}
        assert codes == {0: ErrorCode.OFFSET_OUT_OF_RANGE, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        missing = await client.request(ApiKey.DELETE_RECORDS, 2, delete_body("nothere", {0: 0}))
        assert missing.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        twice = await client.request(
            ApiKey.DELETE_RECORDS,
            2,
            {
                "topics": [
                    {
                        "name": "del",
                        "partitions": [{"partition_index": 0, "offset": 7}, {"partition_index": 0, "offset": 8}],
                    }
                ],
                "timeout_ms": 1000,
            },
        )
        assert [(p.partition_index, p.low_watermark) for p in twice.topics[0].partitions] == [(0, 8)], (
            "a partition named twice is answered once, the last offset counting (as Kafka)"
        )
    finally:
        b.close()
    b2 = make_broker(tmp_path)
    try:
        client = open_client(b2, nursery)
        assert await list_earliest(client, "del") == 8
    finally:
        b2.close()


@pytest.mark.parametrize(
    "policy, expected", [("compact", ErrorCode.POLICY_VIOLATION), ("compact,delete", ErrorCode.NONE)]
)
async def test_delete_records_on_a_topic_without_the_delete_policy_is_a_policy_violation(
    tmp_path, nursery, policy, expected
):
    """As Kafka: a compacted topic's records go only by compaction (checked before the offset's range)."""
    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        await create(client, "kept", configs={"cleanup.policy": policy})
        await client.request(ApiKey.PRODUCE, 9, produce_body("kept", batch(4)))
        answer = (await client.request(ApiKey.DELETE_RECORDS, 2, delete_body("kept", {0: 2}))).topics[0].partitions[0]
        assert answer.error_code == expected
        assert await list_earliest(client, "kept") == (0 if expected else 2)
        if expected:
            past = await client.request(ApiKey.DELETE_RECORDS, 2, delete_body("kept", {0: 99}))
            assert past.topics[0].partitions[0].error_code == ErrorCode.POLICY_VIOLATION
    finally:
        b.close()


async def test_elect_leaders_on_a_single_broker(connect):
    client = await connect()
    await create(client, "el", partitions=2)
    body = {
        "election_type": 0,
        "topic_partitions": [{"topic": "el", "partitions": [0, 1, 9]}, {"topic": "none", "partitions": [0]}],
        "timeout_ms": 1000,
    }
    answer = await client.request(ApiKey.ELECT_LEADERS, 2, body)
    assert answer.error_code == ErrorCode.NONE
    got = {
        (t.topic, p.partition_id): (p.error_code, p.error_message)
        for t in answer.replica_election_results
        for p in t.partition_result
    }
    assert got == {
        ("el", 0): (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        ("el", 1): (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        ("el", 9): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as el-9"),
        ("none", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as none"),
    }
    unclean = await client.request(ApiKey.ELECT_LEADERS, 1, {**body, "election_type": 1})
    assert unclean.replica_election_results[0].partition_result[0].error_code == ErrorCode.ELECTION_NOT_NEEDED
    every = await client.request(
        ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": None, "timeout_ms": 1000}
    )
    assert [(t.topic, t.partition_result) for t in every.replica_election_results] == [("el", [])]
    odd = await client.request(ApiKey.ELECT_LEADERS, 2, {**body, "election_type": 3})
    assert odd.error_code == ErrorCode.INVALID_REQUEST
    assert {p.error_code for t in odd.replica_election_results for p in t.partition_result} == {
        ErrorCode.INVALID_REQUEST
    }


async def test_kafka4_apis_ask_the_authorizer(tmp_path, nursery):
    from strom.broker.auth.acl import Operation as Op
    from strom.broker.auth.acl import ResourceType as R
    from strom.broker.config import BrokerConfig
    from strom.broker.server.root import BrokerServer

    from .test_auth import JAAS, creation, login

    broker = BrokerServer(
        BrokerConfig(
            {
                "log.dirs": str(tmp_path),
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:admin",
                "connection.failed.authentication.delay.ms": "0",
            }
        )
    )
    broker.open_storage()
    try:
        admin, alice = await login(broker, nursery, "admin"), await login(broker, nursery, "alice")
        await create(admin, "seen")
        await create(admin, "unseen")
        await admin.request(ApiKey.CREATE_ACLS, 3, {"creations": [creation(R.TOPIC, "seen", Op.DESCRIBE)]})
        described = await alice.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp(["seen", "unseen"]))
        assert {t.name: t.error_code for t in described.topics} == {
            "seen": ErrorCode.NONE,
            "unseen": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        }
        everything = await alice.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, dtp([]))
        assert [t.name for t in everything.topics] == ["seen"]
        deleted = await alice.request(ApiKey.DELETE_RECORDS, 2, delete_body("seen", {0: 0}))
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elected = await alice.request(
            ApiKey.ELECT_LEADERS,
            2,
            {"election_type": 0, "timeout_ms": 1000, "topic_partitions": [{"topic": "seen", "partitions": [0]}]},
        )
        assert elected.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        heartbeat = {
            "group_id": "g",
            "member_id": "m",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 1000,
            "subscribed_topic_names": ["seen"],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        }
        denied = await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)
        assert denied.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        group = await alice.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False}
        )
        assert group.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        # with READ on the group, Kafka 4.0 also wants DESCRIBE on every subscribed topic name
        await admin.request(ApiKey.CREATE_ACLS, 3, {"creations": [creation(R.GROUP, "g", Op.READ)]})
        heartbeat["subscribed_topic_names"] = ["seen", "unseen"]
        refused = await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)
        assert (refused.error_code, refused.member_id) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
        heartbeat["subscribed_topic_names"] = ["seen", "seen"]
        joined = await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat)
        assert (joined.error_code, joined.member_epoch) == (ErrorCode.NONE, 1)
        # a regex is not narrowed by ACLs: Kafka 4.0 resolves it to every matching topic (checked
        # against it in compat_tests/differential/test_security_differential.py)
        regex = {**heartbeat, "member_id": "m2", "subscribed_topic_names": None, "subscribed_topic_regex": ".*seen"}
        first = await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, regex)
        assert first.error_code == ErrorCode.NONE
        again = await alice.request(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            {
                **regex,
                "member_epoch": first.member_epoch,
                "rebalance_timeout_ms": -1,
                "subscribed_topic_regex": None,
                "topic_partitions": None,
            },
        )
        assert again.error_code == ErrorCode.NONE
        group = broker.groups.consumer.get("g")
        assert group.subscribed_topics(broker.groups.consumer.topics())["m2"] == {"seen", "unseen"}
        ok = await admin.request(ApiKey.DELETE_RECORDS, 2, delete_body("seen", {0: 0}))
        assert ok.topics[0].partitions[0].error_code == ErrorCode.NONE
    finally:
        broker.close()


async def test_partition_reassignments_on_a_single_broker(connect, broker):
    client = await connect()
    await create(client, "ra", partitions=2)
    me = broker.node_id
    answer = await client.request(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        {
            "timeout_ms": 1000,
            "topics": [
                {
                    "name": "ra",
                    "partitions": [
                        {"partition_index": 0, "replicas": [me]},
                        {"partition_index": 1, "replicas": [7]},
                        {"partition_index": 1, "replicas": None},
                        {"partition_index": 0, "replicas": [me, me]},
                        {"partition_index": 0, "replicas": []},
                    ],
                },
                {"name": "nope", "partitions": [{"partition_index": 0, "replicas": [me]}]},
            ],
        },
    )
    got = [(t.name, p.partition_index, p.error_code, p.error_message) for t in answer.responses for p in t.partitions]
    assert got == [
        ("ra", 0, ErrorCode.NONE, None),
        (
            "ra",
            1,
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes broker 7, but no such broker is registered.",
        ),
        ("ra", 1, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None),
        (
            "ra",
            0,
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes the broker {me} more than once.",
        ),
        (
            "ra",
            0,
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        ),
        ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
    ]
    listed = await client.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None})
    assert (listed.error_code, listed.topics) == (ErrorCode.NONE, [])
    # kafka-reassign-partitions.sh --verify clears replication throttles (none set here): no error
    cleared = await client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "validate_only": False,
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": str(me),
                    "configs": [{"name": "leader.replication.throttled.rate", "config_operation": 1, "value": None}],
                },
                {
                    "resource_type": 2,
                    "resource_name": "ra",
                    "configs": [
                        {"name": "follower.replication.throttled.replicas", "config_operation": 1, "value": None}
                    ],
                },
            ],
        },
    )
    assert [r.error_code for r in cleared.responses] == [ErrorCode.NONE, ErrorCode.NONE]

"""Manual replica assignments in CreateTopics and CreatePartitions: Kafka 4.0's checks, in its
order, with its error codes and messages (asked of the reference broker); an assignment that
passes is what gets written, and validate_only creates nothing."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey


async def create_topic(
    client, name: str, assignments, *, partitions: int = -1, rf: int = -1, configs=None, validate_only: bool = False
):
    response = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": rf,
                    "assignments": [{"partition_index": p, "broker_ids": ids} for p, ids in assignments],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": validate_only,
        },
    )
    return response.topics[0]


async def create_partitions(client, name: str, count: int, assignments, *, validate_only: bool = False):
    response = await client.request(
        ApiKey.CREATE_PARTITIONS,
        3,
        {
            "topics": [
                {
                    "name": name,
                    "count": count,
                    "assignments": None if assignments is None else [{"broker_ids": ids} for ids in assignments],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": validate_only,
        },
    )
    return response.results[0]


async def metadata(client, name: str):
    response = await client.request(
        ApiKey.METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False}
    )
    return response.topics[0]


async def test_a_manual_assignment_of_the_only_broker_creates_the_topic(connect, broker):
    client = await connect()
    me = broker.node_id
    created = await create_topic(client, "m", [(1, [me]), (0, [me])])
    assert (created.error_code, created.num_partitions, created.replication_factor) == (ErrorCode.NONE, 2, 1)
    topic = await metadata(client, "m")
    assert sorted((p.partition_index, list(p.replica_nodes), p.leader_id) for p in topic.partitions) == [
        (0, [me], me),
        (1, [me], me),
    ]
    grown = await create_partitions(client, "m", 3, [[me]])
    assert grown.error_code == ErrorCode.NONE
    assert len((await metadata(client, "m")).partitions) == 3


@pytest.mark.parametrize(
    "label, assignments, counts, code, message",
    [
        (
            "unknown-broker",
            [(0, [77])],
            (-1, -1),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes broker 77, but no such broker is registered.",
        ),
        (
            "duplicate-broker",
            [(0, ["me", "me"])],
            (-1, -1),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes the broker {me} more than once.",
        ),
        (
            "empty-replicas",
            [(0, [])],
            (-1, -1),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        ),
        (
            "gap",
            [(0, ["me"]), (2, ["me"])],
            (-1, -1),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        ),
        (
            "partition-twice",
            [(0, ["me"]), (0, ["me"])],
            (-1, -1),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Found multiple manual partition assignments for partition 0",
        ),
        (
            "with-partition-count",
            [(0, ["me"])],
            (2, -1),
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ),
        (
            "with-replication-factor",
            [(0, ["me"])],
            (1, 1),
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        ),
    ],
)
async def test_create_topics_refuses_bad_assignments_as_kafka(
    connect, broker, label, assignments, counts, code, message
):
    client = await connect()
    me = broker.node_id
    assignments = [(p, [me if b == "me" else b for b in ids]) for p, ids in assignments]
    refused = await create_topic(client, label, assignments, partitions=counts[0], rf=counts[1])
    assert (refused.error_code, refused.error_message) == (code, message.format(me=me))
    assert (await metadata(client, label)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_name_and_configs_are_checked_before_the_assignment(connect, broker):
    client = await connect()
    await create_topic(client, "there", [(0, [broker.node_id])])
    assert (await create_topic(client, "there", [(0, [77])])).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert (await create_topic(client, "bad name!", [(0, [77])])).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    bad_config = await create_topic(client, "c", [(0, [77])], configs={"cleanup.policy": "sometimes"})
    assert bad_config.error_code == ErrorCode.INVALID_CONFIG


async def test_validate_only_checks_a_manual_assignment_and_creates_nothing(connect, broker):
    client = await connect()
    me = broker.node_id
    fine = await create_topic(client, "v", [(0, [me]), (1, [me])], validate_only=True)
    assert (fine.error_code, fine.num_partitions, fine.replication_factor) == (ErrorCode.NONE, 2, 1)
    bad = await create_topic(client, "v", [(0, [77])], validate_only=True)
    assert bad.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert (await metadata(client, "v")).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    await create_topic(client, "g", [(0, [me])])
    assert (await create_partitions(client, "g", 3, [[me], [me]], validate_only=True)).error_code == ErrorCode.NONE
    assert (
        await create_partitions(client, "g", 2, [[77]], validate_only=True)
    ).error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert len((await metadata(client, "g")).partitions) == 1


@pytest.mark.parametrize(
    "count, assignments, code, message",
    [
        (
            3,
            [["me"]],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        (
            2,
            [["me"], ["me"]],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Attempted to add 1 additional partition(s), but only 2 assignment(s) were specified.",
        ),
        (
            2,
            [],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,  # an empty list is an assignment of nothing, not none
            "Attempted to add 1 additional partition(s), but only 0 assignment(s) were specified.",
        ),
        (
            2,
            [[77]],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes broker 77, but no such broker is registered.",
        ),
        (
            2,
            [["me", "me"]],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes the broker {me} more than once.",
        ),
        (
            2,
            [[]],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        ),
        (1, [["me"]], ErrorCode.INVALID_PARTITIONS, "Topic already has 1 partition(s)."),
        (
            0,
            [["me"]],
            ErrorCode.INVALID_PARTITIONS,
            "The topic g currently has 1 partition(s); 0 would not be an increase.",
        ),
    ],
)
async def test_create_partitions_refuses_bad_assignments_as_kafka(connect, broker, count, assignments, code, message):
    client = await connect()
    me = broker.node_id
    await create_topic(client, "g", [(0, [me])])
    assignments = [[me if b == "me" else b for b in ids] for ids in assignments]
    refused = await create_partitions(client, "g", count, assignments)
    assert (refused.error_code, refused.error_message) == (code, message.format(me=me))
    assert len((await metadata(client, "g")).partitions) == 1


async def test_a_reassignment_target_is_checked_as_a_manual_assignment(connect, broker):
    """As Kafka: the lowest offending broker id is reported, unknown or repeated."""
    client = await connect()
    me = broker.node_id
    await create_topic(client, "r", [(0, [me])])
    for target, message in (
        ([77, 77, me], "The manual partition assignment includes broker 77, but no such broker is registered."),
        ([me, me, 77], f"The manual partition assignment includes the broker {me} more than once."),
        ([], "The manual partition assignment includes an empty replica list."),
    ):
        response = await client.request(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            0,
            {"timeout_ms": 1000, "topics": [{"name": "r", "partitions": [{"partition_index": 0, "replicas": target}]}]},
        )
        answer = response.responses[0].partitions[0]
        assert (answer.error_code, answer.error_message) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)

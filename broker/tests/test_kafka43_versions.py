"""The versions Kafka 4.1-4.4 added to existing APIs: Produce v13, Fetch v18, ListOffsets v11,
OffsetCommit v10 and OffsetFetch v10 (topics by id), TxnOffsetCommit v6 (topics by id, Kafka 4.4)
and ApiVersions v5 (KIP-1242, Kafka 4.4). Their answers are also compared with Kafka 4.3.1's in
compat_tests/differential (the 4.3 target)."""

from __future__ import annotations

import pytest

from strom.broker.apis import SUPPORTED_RANGE
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from strom.testing.faults import request_faults

from .test_apis import batch, create

UNKNOWN_ID = bytes(range(1, 17))
SOFTWARE = {"client_software_name": "t", "client_software_version": "1"}


async def test_api_versions_advertises_the_kafka_4_3_and_4_4_versions(connect):
    client = await connect()
    answer = await client.request(ApiKey.API_VERSIONS, 5, {**SOFTWARE, "cluster_id": None, "node_id": -1})
    assert answer.error_code == ErrorCode.NONE
    highest = {k.api_key: k.max_version for k in answer.api_keys}
    assert [
        highest[k]
        for k in (
            ApiKey.PRODUCE,
            ApiKey.FETCH,
            ApiKey.LIST_OFFSETS,
            ApiKey.OFFSET_COMMIT,
            ApiKey.OFFSET_FETCH,
            ApiKey.TXN_OFFSET_COMMIT,
            ApiKey.API_VERSIONS,
        )
    ] == [13, 18, 11, 10, 10, 6, 5]


async def test_api_versions_v5_checks_the_cluster_and_node_the_client_means(connect):
    client = await connect()
    meta = await client.request(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
    me = {"cluster_id": meta.cluster_id, "node_id": meta.brokers[0].node_id}
    right = await client.request(ApiKey.API_VERSIONS, 5, {**SOFTWARE, **me})
    assert right.error_code == ErrorCode.NONE and right.api_keys
    for wrong in ({**me, "node_id": me["node_id"] + 1}, {**me, "cluster_id": "another-cluster"}):
        answer = await client.request(ApiKey.API_VERSIONS, 5, {**SOFTWARE, **wrong})
        assert (answer.error_code, answer.api_keys) == (ErrorCode.REBOOTSTRAP_REQUIRED, [])
    for half in ({"cluster_id": me["cluster_id"], "node_id": -1}, {"cluster_id": None, "node_id": me["node_id"]}):
        answer = await client.request(ApiKey.API_VERSIONS, 5, {**SOFTWARE, **half})
        assert answer.error_code == ErrorCode.INVALID_REQUEST


async def test_produce_v13_and_fetch_v18_name_topics_by_id(connect):
    client = await connect()
    topic_id = (await create(client, "by-id")).topic_id
    body = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [
            {"topic_id": topic_id, "partition_data": [{"index": 0, "records": batch(3)}]},
            {"topic_id": UNKNOWN_ID, "partition_data": [{"index": 0, "records": batch(1)}]},
        ],
    }
    produced = await client.request(ApiKey.PRODUCE, 13, body)
    assert [
        (t.topic_id, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
        for t in produced.responses
    ] == [
        (topic_id, [(0, ErrorCode.NONE, 0)]),
        (UNKNOWN_ID, [(0, ErrorCode.UNKNOWN_TOPIC_ID, -1)]),
    ]
    fetched = await client.request(
        ApiKey.FETCH,
        18,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    [topic] = fetched.responses
    assert topic.topic_id == topic_id
    assert [(p.error_code, p.high_watermark) for p in topic.partitions] == [(ErrorCode.NONE, 3)]


def _list_offsets(topic: str, timestamp: int) -> dict:
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}
        ],
        "timeout_ms": 1000,
    }


async def test_list_offsets_v11_earliest_pending_upload_and_latest_tiered_without_tiered_storage(connect):
    client = await connect()
    await create(client, "tiers")
    await client.request(
        ApiKey.PRODUCE,
        9,
        {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "tiers", "partition_data": [{"index": 0, "records": batch(2)}]}],
        },
    )

    async def ask(version: int, timestamp: int) -> tuple[int, int, int]:
        answer = await client.request(ApiKey.LIST_OFFSETS, version, _list_offsets("tiers", timestamp))
        p = answer.topics[0].partitions[0]
        return p.error_code, p.offset, p.leader_epoch

    # as Kafka 4.3.1 answers on a topic without remote storage: nothing uploaded, nothing pending
    assert await ask(11, -6) == (ErrorCode.NONE, -1, -1)
    assert await ask(10, -6) == (ErrorCode.UNSUPPORTED_VERSION, -1, -1)  # -6 is v11's (KIP-1023)
    assert await ask(9, -5) == (ErrorCode.NONE, -1, -1)
    assert await ask(11, -7) == (ErrorCode.UNSUPPORTED_VERSION, -1, -1)
    assert await ask(11, -2) == (ErrorCode.NONE, 0, 0)


async def test_offset_commit_and_fetch_v10_name_topics_by_id(connect):
    client = await connect()
    topic_id = (await create(client, "committed", partitions=2)).topic_id
    committed = await client.request(
        ApiKey.OFFSET_COMMIT,
        10,
        {
            "group_id": "g10",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 1, "committed_offset": 7, "committed_metadata": "m"}],
                },
                {
                    "topic_id": UNKNOWN_ID,
                    "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}],
                },
            ],
        },
    )
    assert sorted(
        (t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in committed.topics
    ) == sorted([(topic_id, [(1, ErrorCode.NONE)]), (UNKNOWN_ID, [(0, ErrorCode.UNKNOWN_TOPIC_ID)])])

    def fetch(topics: list | None) -> dict:
        group = {"group_id": "g10", "member_id": None, "member_epoch": -1, "topics": topics}
        return {"groups": [group], "require_stable": False}

    asked = await client.request(
        ApiKey.OFFSET_FETCH,
        10,
        fetch(
            [{"topic_id": topic_id, "partition_indexes": [0, 1]}, {"topic_id": UNKNOWN_ID, "partition_indexes": [0]}]
        ),
    )
    [group] = asked.groups
    assert group.error_code == ErrorCode.NONE
    found = {
        (t.topic_id, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
        for t in group.topics
        for p in t.partitions
    }
    assert found == {
        (topic_id, 0): (-1, "", ErrorCode.NONE),
        (topic_id, 1): (7, "m", ErrorCode.NONE),
        (UNKNOWN_ID, 0): (-1, "", ErrorCode.UNKNOWN_TOPIC_ID),
    }
    everything = (await client.request(ApiKey.OFFSET_FETCH, 10, fetch(None))).groups[0]
    assert [
        (t.topic_id, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in everything.topics
    ] == [(topic_id, [(1, 7)])]


async def test_txn_offset_commit_v6_answers_an_unknown_topic_id_by_id(connect):
    client = await connect()
    topic_id = (await create(client, "txn-by-id")).topic_id
    answer = await client.request(
        ApiKey.TXN_OFFSET_COMMIT,
        6,
        {
            "transactional_id": "no-such-txn",
            "group_id": "g6",
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "topic_id": UNKNOWN_ID,
                    "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}],
                },
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}],
                },
            ],
        },
    )
    codes = {t.topic_id: [p.error_code for p in t.partitions] for t in answer.topics}
    assert codes[UNKNOWN_ID] == [ErrorCode.UNKNOWN_TOPIC_ID]
    assert codes[topic_id] != [ErrorCode.UNKNOWN_TOPIC_ID] and codes[topic_id] != [
        ErrorCode.NONE
    ]  # no such transaction


NEW_APIS = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.API_VERSIONS,
)


@pytest.mark.parametrize(
    "release, highest",
    [
        ("4.0", [12, 17, 10, 9, 9, 5, 4]),
        ("4.1", [13, 18, 10, 9, 9, 5, 4]),
        ("4.2", [13, 18, 11, 10, 10, 5, 4]),
        ("4.3", [13, 18, 11, 10, 10, 5, 4]),
        ("4.4", [13, 18, 11, 10, 10, 6, 5]),
    ],
)
async def test_a_broker_capped_at_a_4_x_release_negotiates_its_versions(connect, broker, release, highest):
    client = await connect()
    request_faults(broker).cap_versions(release)
    answer = await client.request(ApiKey.API_VERSIONS, 3, SOFTWARE)
    advertised = {k.api_key: k.max_version for k in answer.api_keys}
    assert [advertised[k] for k in NEW_APIS] == highest
    # a version the release lacks is refused as that Kafka refuses it: the connection closes
    newer = [(k, advertised[k] + 1) for k in NEW_APIS[:-1] if advertised[k] < SUPPORTED_RANGE[k][1]]
    if not newer:
        assert release == "4.4"  # Strom serves nothing newer than Kafka 4.4's versions of these
        return
    await client.send(*newer[0], {})
    with pytest.raises(EOFError):
        await client.receive_frame()

"""Answers changed to match the reference Kafka 4.0 (found by compat_tests/differential)."""

from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_apis import create


async def test_api_versions_v3_refuses_an_invalid_client_software_name(connect):
    client = await connect()
    bad = await client.request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "bad name!", "client_software_version": "1.0"}
    )
    assert bad.error_code == ErrorCode.INVALID_REQUEST and list(bad.api_keys) == []
    good = await client.request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "apache-kafka-java", "client_software_version": "4.0.0"}
    )
    assert good.error_code == ErrorCode.NONE and good.api_keys


async def test_describe_cluster_for_controllers_is_a_mismatched_endpoint_type(connect):
    client = await connect()
    reply = await client.request(
        ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}
    )
    assert (reply.error_code, reply.endpoint_type, reply.cluster_id) == (ErrorCode.MISMATCHED_ENDPOINT_TYPE, 1, "")
    ok = await client.request(
        ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    )
    assert ok.error_code == ErrorCode.NONE and ok.brokers


async def _topic(client, name: str) -> None:
    reply = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 1000,
        },
    )
    assert reply.topics[0].error_code == ErrorCode.NONE


async def _produce(client, version: int, topic: str, records: bytes):
    reply = await client.request(
        ApiKey.PRODUCE,
        version,
        {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return reply.responses[0].partition_responses[0]


def _batch(codec: int = 0) -> bytes:
    from strom.protocol.records.batch import Record, build_batch

    return build_batch([Record(0, 0, b"k", b"v")], compression=codec, base_timestamp=1_700_000_000_000)


async def test_zstd_batches_need_produce_v7(connect):
    from strom.protocol.records.compression import Compression

    client = await connect()
    await _topic(client, "zstd-versions")
    old = await _produce(client, 3, "zstd-versions", _batch(Compression.ZSTD))
    assert (old.error_code, old.base_offset) == (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1)
    new = await _produce(client, 7, "zstd-versions", _batch(Compression.ZSTD))
    assert (new.error_code, new.base_offset) == (ErrorCode.NONE, 0)
    gzip_v3 = await _produce(client, 3, "zstd-versions", _batch(Compression.GZIP))
    assert (gzip_v3.error_code, gzip_v3.base_offset) == (ErrorCode.NONE, 1)


async def test_a_produce_without_record_batches_is_an_invalid_record(connect):
    client = await connect()
    await _topic(client, "no-batches")
    assert (await _produce(client, 9, "no-batches", b"")).error_code == ErrorCode.INVALID_RECORD
    assert (await _produce(client, 9, "no-batches", _batch())).base_offset == 0


async def test_incremental_alter_configs_refuses_a_key_named_twice(connect):
    client = await connect()
    await _topic(client, "twice")
    reply = await client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "twice",
                    "configs": [
                        {"name": "retention.ms", "config_operation": 0, "value": "1000"},
                        {"name": "retention.ms", "config_operation": 0, "value": "2000"},
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    assert reply.responses[0].error_code == ErrorCode.INVALID_REQUEST
    described = await client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {"resources": [{"resource_type": 2, "resource_name": "twice", "configuration_keys": ["retention.ms"]}]},
    )
    assert described.results[0].configs[0].value == "604800000"


async def test_offset_for_leader_epoch_of_an_empty_partition_is_its_current_epoch_at_zero(connect):
    client = await connect()
    await _topic(client, "empty-epochs")

    async def ask(epoch: int):
        reply = await client.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": "empty-epochs",
                        "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}],
                    }
                ],
            },
        )
        p = reply.topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    assert await ask(0) == (ErrorCode.NONE, 0, 0)
    assert await ask(3) == (ErrorCode.NONE, -1, -1)
    await _produce(client, 9, "empty-epochs", _batch())
    assert await ask(0) == (ErrorCode.NONE, 0, 1)


async def test_create_topics_refuses_min_insync_replicas_zero_and_answers_failures_with_no_configs(connect):
    client = await connect()
    reply = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": "isr-zero",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": "min.insync.replicas", "value": "0"}],
                }
            ],
            "timeout_ms": 1000,
        },
    )
    (topic,) = reply.topics
    assert topic.error_code == ErrorCode.INVALID_CONFIG and list(topic.configs) == []
    ok = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": "isr-one",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": "min.insync.replicas", "value": "1"}],
                }
            ],
            "timeout_ms": 1000,
        },
    )
    assert ok.topics[0].error_code == ErrorCode.NONE and ok.topics[0].configs


async def test_create_topics_refuses_a_name_given_twice_and_resolves_default_replication(connect):
    client = await connect()
    entry = {"name": "given-twice", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    reply = await client.request(ApiKey.CREATE_TOPICS, 7, {"topics": [entry, entry], "timeout_ms": 1000})
    assert [(t.name, t.error_code) for t in reply.topics] == [("given-twice", ErrorCode.INVALID_REQUEST)]
    meta = await client.request(
        ApiKey.METADATA, 12, {"topics": [{"name": "given-twice"}], "allow_auto_topic_creation": False}
    )
    assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    defaults = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {"name": "by-default", "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 1000,
        },
    )
    assert (defaults.topics[0].error_code, defaults.topics[0].replication_factor) == (ErrorCode.NONE, 1)


async def test_create_partitions_refuses_a_name_given_twice_and_grows_nothing(connect):
    client = await connect()
    await create(client, "grown-twice", 2)
    other = {"name": "grown-once", "count": 2, "assignments": None}
    await create(client, "grown-once", 1)
    twice = {"name": "grown-twice", "count": 3, "assignments": None}
    reply = await client.request(
        ApiKey.CREATE_PARTITIONS,
        3,
        {"topics": [twice, other, dict(twice, count=4)], "timeout_ms": 1000, "validate_only": False},
    )
    assert sorted((r.name, r.error_code) for r in reply.results) == [
        ("grown-once", ErrorCode.NONE),
        ("grown-twice", ErrorCode.INVALID_REQUEST),
    ]
    meta = await client.request(
        ApiKey.METADATA,
        12,
        {"topics": [{"name": "grown-twice"}, {"name": "grown-once"}], "allow_auto_topic_creation": False},
    )
    assert {t.name: len(t.partitions) for t in meta.topics} == {"grown-twice": 2, "grown-once": 2}


async def test_create_topics_validate_only_answers_the_topic_as_it_would_be(connect, broker):
    client = await connect()
    reply = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": "only-checked",
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "1234"}],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": True,
        },
    )
    (topic,) = reply.topics
    assert topic.error_code == ErrorCode.NONE and topic.num_partitions == 2
    assert bytes(topic.topic_id) != bytes(16), "the id it would have"
    configs = {c.name: (c.value, c.config_source) for c in topic.configs}
    assert configs["retention.ms"] == ("1234", 1) and configs["cleanup.policy"] == ("delete", 5)
    assert "only-checked" not in broker.topics.topics

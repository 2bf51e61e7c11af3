"""Error messages in Kafka's words, where clients and stream-processing libraries match on them.
Every expected text below is what the reference Kafka 4.0 answered to the same request
(compat_tests/differential compares them on every run)."""

from __future__ import annotations

import pytest

from strom.broker.config import ConfigError, parse_topic_config
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

# (key, value, Kafka 4.0's CreateTopics message)
KAFKA_CONFIG_MESSAGES = [
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    (
        "cleanup.policy",
        "sometimes",
        "Invalid value sometimes for configuration cleanup.policy: String must be one of: compact, delete",
    ),
    (
        "cleanup.policy",
        "delete,bogus",
        "Invalid value bogus for configuration cleanup.policy: String must be one of: compact, delete",
    ),
    (
        "cleanup.policy",
        " , ",
        "Invalid value  for configuration cleanup.policy: String must be one of: compact, delete",
    ),
    (
        "compression.type",
        "x",
        "Invalid value x for configuration compression.type: "
        "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
    ),
    (
        "message.timestamp.type",
        "x",
        "Invalid value x for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime",
    ),
    ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ("retention.ms", "-5", "Invalid value -5 for configuration retention.ms: Value must be at least -1"),
    ("retention.bytes", "1.5", "Invalid value 1.5 for configuration retention.bytes: Not a number of type LONG"),
    ("segment.bytes", "x", "Invalid value x for configuration segment.bytes: Not a number of type INT"),
    (
        "segment.bytes",
        "99999999999",
        "Invalid value 99999999999 for configuration segment.bytes: Not a number of type INT",
    ),
    (
        "segment.bytes",
        "1048575",
        "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576",
    ),
    (
        "internal.segment.bytes",
        "1",
        "Invalid value 1 for configuration internal.segment.bytes: Value must be at least 14",
    ),
    ("segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
    ("max.compaction.lag.ms", "0", "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"),
    ("delete.retention.ms", "-1", "Invalid value -1 for configuration delete.retention.ms: Value must be at least 0"),
    ("min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    (
        "min.cleanable.dirty.ratio",
        "x",
        "Invalid value x for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE",
    ),
    (
        "min.cleanable.dirty.ratio",
        "2",
        "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
    ),
    (
        "min.cleanable.dirty.ratio",
        "-0.5",
        "Invalid value -0.5 for configuration min.cleanable.dirty.ratio: Value must be at least 0",
    ),
    (
        "unclean.leader.election.enable",
        "x",
        "Invalid value x for configuration unclean.leader.election.enable: Expected value to be either true or false",
    ),
    (
        "message.timestamp.after.max.ms",
        "-1",
        "Invalid value -1 for configuration message.timestamp.after.max.ms: Value must be at least 0",
    ),
]


@pytest.mark.parametrize("key,value,message", KAFKA_CONFIG_MESSAGES)
def test_topic_config_refusals_are_worded_as_kafka_words_them(key, value, message):
    with pytest.raises(ConfigError) as refused:
        parse_topic_config(key, value)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "key,value",
    [
        ("retention.bytes", "-5"),
        ("cleanup.policy", ""),
        ("cleanup.policy", "compact, delete"),
        ("segment.index.bytes", "8"),
    ],
)
def test_values_kafka_accepts_are_accepted(key, value):
    parse_topic_config(key, value)


async def _create(client, name: str, partitions: int = 1, rf: int = 1, configs: list | None = None):
    answer = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": rf,
                    "assignments": [],
                    "configs": configs or [],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": False,
        },
    )
    return answer.topics[0].error_code, answer.topics[0].error_message


async def test_admin_answers_carry_kafkas_messages(connect, broker):
    client = await connect()
    assert await _create(client, "t", configs=[{"name": "x", "value": "1"}]) == (
        ErrorCode.INVALID_CONFIG,
        "Unknown topic config name: x",
    )
    assert await _create(client, "t", configs=[{"name": "retention.bytes", "value": "-5"}]) == (ErrorCode.NONE, None)
    assert "t" in broker.topics.topics  # a value Kafka takes is stored and the log opens with it
    assert await _create(client, "bad name!") == (
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        "Topic name is invalid: 'bad name!' contains one or more characters "
        "other than ASCII alphanumerics, '.', '_' and '-'",
    )
    assert await _create(client, "..") == (
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        "Topic name is invalid: '..' is not allowed",
    )
    assert await _create(client, "zero", partitions=0) == (
        ErrorCode.INVALID_PARTITIONS,
        "Number of partitions was set to an invalid non-positive value.",
    )
    assert await _create(client, "wide", rf=3) == (
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 3 time(s): The target replication "
        "factor of 3 cannot be reached because only 1 broker(s) are registered.",
    )
    altered = await client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [{"name": "retention.ms", "config_operation": 2, "value": "1"}],
                },
                {
                    "resource_type": 2,
                    "resource_name": "nope",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}],
                },
            ],
            "validate_only": False,
        },
    )
    assert [(r.error_code, r.error_message) for r in altered.responses] == [
        (ErrorCode.INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST."),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
    ]
    described = await client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": 4, "resource_name": "77", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "abc", "configuration_keys": None},
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    assert [r.error_message for r in described.results] == [
        f"Unexpected broker id, expected {broker.node_id} or empty string, but received 77",
        "Broker id must be an integer, but it is: abc",
    ]

"""Produce answers malformed record batches and missing topics as Kafka 4.0 answers them (each case
checked against the reference broker by compat_tests/differential, scenarios produce-v9-malformed-*):
the error code a client acts on (INVALID_RECORD is final, CORRUPT_MESSAGE is retried), the log
start offset Kafka reports with log-level errors, and nothing appended."""

from __future__ import annotations

import time

import pytest

from compat_tests.differential.scenarios import patched  # a header field changed, the CRC made right
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.records.compression import Compression
from strom.protocol.records.legacy import LegacyMessage, build_message_set
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client
from .test_apis import create, produce_body

TS = 1_700_000_000_000


def batch(n: int, **kw) -> bytes:
    return build_batch([Record(i, i, b"k%d" % i, b"v%d" % i, []) for i in range(n)], base_timestamp=TS, **kw)


TWO = batch(2)
CASES = {
    # name: (records, error code, log start offset in the answer, records appended)
    "truncated batch": (TWO[:-5], ErrorCode.INVALID_RECORD, -1, 0),
    "truncated header": (TWO[:40], ErrorCode.INVALID_RECORD, -1, 0),
    "less than a frame": (TWO[:8], ErrorCode.INVALID_RECORD, -1, 0),
    "no bytes": (b"", ErrorCode.INVALID_RECORD, -1, 0),
    "two batches": (TWO + batch(1), ErrorCode.INVALID_RECORD, -1, 0),
    "legacy message set": (
        build_message_set([LegacyMessage(0, TS, b"k", b"v", 0, 1)], 1, 0),
        ErrorCode.INVALID_RECORD,
        -1,
        0,
    ),
    "second batch cut short is dropped": (TWO + TWO[:-5], ErrorCode.NONE, 0, 2),
    "impossible length": (patched(TWO, length=-1), ErrorCode.CORRUPT_MESSAGE, -1, 0),
    "impossible second entry": (TWO + bytes(12), ErrorCode.CORRUPT_MESSAGE, -1, 0),
    "unknown magic": (patched(TWO, magic=3), ErrorCode.CORRUPT_MESSAGE, -1, 0),
    "bad crc": (TWO[:-1] + bytes([TWO[-1] ^ 0xFF]), ErrorCode.CORRUPT_MESSAGE, -1, 0),
    "more records than offsets": (patched(batch(3), records_count=5), ErrorCode.INVALID_RECORD, 0, 0),
    "fewer records than offsets": (patched(batch(3), records_count=2), ErrorCode.INVALID_RECORD, 0, 0),
    "no records": (build_batch([], base_timestamp=TS), ErrorCode.INVALID_RECORD, 0, 0),
    "unknown codec": (patched(TWO, attributes=5), ErrorCode.UNKNOWN_SERVER_ERROR, 0, 0),
    "control batch": (patched(TWO, attributes=0x20), ErrorCode.INVALID_RECORD, 0, 0),
    "producer id without sequence": (batch(2, producer_id=7, producer_epoch=0), ErrorCode.INVALID_RECORD, 0, 0),
    # found by broker/tests/test_fuzz_apis.py; Kafka 4.0 (log.message.timestamp.after.max.ms one hour)
    "timestamp 2^63-1": (
        build_batch([Record(0, 0, b"k", b"v")], base_timestamp=2**63 - 1),
        ErrorCode.INVALID_TIMESTAMP,
        0,
        0,
    ),
    "timestamp -2^63": (
        build_batch([Record(0, 0, b"k", b"v")], base_timestamp=-(2**63)),
        ErrorCode.INVALID_TIMESTAMP,
        0,
        0,
    ),
    "LogAppendTime batch at 2^63-1": (
        build_batch([Record(0, 0, b"k", b"v")], base_timestamp=2**63 - 1, timestamp_type=1),
        ErrorCode.INVALID_TIMESTAMP,
        0,
        0,
    ),
}


async def latest(client, topic: str) -> int:
    response = await client.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return response.topics[0].partitions[0].offset


@pytest.mark.parametrize("case", list(CASES))
async def test_malformed_batches_are_answered_as_kafka_answers_them(connect, case):
    records, code, start, appended = CASES[case]
    client = await connect()
    await create(client, "m")
    answer = (await client.request(ApiKey.PRODUCE, 9, produce_body("m", records))).responses[0].partition_responses[0]
    assert (answer.error_code, answer.log_start_offset) == (code, start), answer
    if code != ErrorCode.NONE:
        assert answer.error_message, "a refusal says why"
    assert await latest(client, "m") == appended
    ok = await client.request(ApiKey.PRODUCE, 9, produce_body("m", batch(1)))  # the partition still takes batches
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE


async def test_malformed_records_with_a_bad_partition_are_refused_for_the_records_first(connect):
    """Kafka checks the records' framing before it looks the partition up."""
    client = await connect()
    await create(client, "m")
    answer = await client.request(ApiKey.PRODUCE, 9, produce_body("m", TWO[:-5], partition=7))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD


async def test_compacted_topic_lists_every_record_without_a_key(connect):
    client = await connect()
    await create(client, "c", configs={"cleanup.policy": "compact"})
    records = build_batch(
        [Record(0, 0, None, b"a", []), Record(1, 1, b"k", b"b", []), Record(2, 2, None, b"c", [])],
        base_timestamp=TS,
        compression=Compression.GZIP,
    )
    answer = (await client.request(ApiKey.PRODUCE, 9, produce_body("c", records))).responses[0].partition_responses[0]
    assert (answer.error_code, answer.log_start_offset) == (ErrorCode.INVALID_RECORD, 0)
    assert [e.batch_index for e in answer.record_errors] == [0, 2]
    assert all("without key in topic partition c-0" in e.batch_index_error_message for e in answer.record_errors)
    assert await latest(client, "c") == 0


async def test_produce_to_a_missing_topic_does_not_create_it_but_metadata_does(tmp_path, nursery):
    """Kafka 4: UNKNOWN_TOPIC_OR_PARTITION (retriable) from Produce; the client's Metadata request
    creates the topic and the retried Produce lands."""
    b = make_broker(tmp_path, num_partitions=2)
    try:
        client = open_client(b, nursery)
        refused = await client.request(ApiKey.PRODUCE, 9, produce_body("later", batch(1)))
        assert refused.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "later" not in b.topics.topics
        meta = await client.request(
            ApiKey.METADATA,
            12,
            {"topics": [{"name": "later", "topic_id": bytes(16)}], "allow_auto_topic_creation": True},
        )
        assert meta.topics[0].error_code == ErrorCode.NONE and len(meta.topics[0].partitions) == 2
        landed = await client.request(ApiKey.PRODUCE, 9, produce_body("later", batch(1)))
        assert landed.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    finally:
        b.close()


async def test_a_record_timestamped_too_far_ahead_is_refused_and_named(connect):
    # as Kafka 4.0 answers it: INVALID_TIMESTAMP, the log start offset, one record error per record
    # out of [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]
    client = await connect()
    await create(client, "ts")
    await create(client, "ts-lax", configs={"message.timestamp.after.max.ms": str(3 * 3600_000)})
    await create(client, "ts-append", configs={"message.timestamp.type": "LogAppendTime"})
    now = int(time.time() * 1000)
    ahead = build_batch(
        [Record(0, 0, b"k", b"v"), Record(1, 2 * 3600_000, b"k", b"v"), Record(2, 0, b"k", b"v")], base_timestamp=now
    )
    answer = (await client.request(ApiKey.PRODUCE, 9, produce_body("ts", ahead))).responses[0].partition_responses[0]
    assert (answer.error_code, answer.log_start_offset) == (ErrorCode.INVALID_TIMESTAMP, 0)
    assert [e.batch_index for e in answer.record_errors] == [1]
    assert answer.record_errors[0].batch_index_error_message.startswith(
        f"Timestamp {now + 2 * 3600_000} of message with offset 1 is out of range."
    )
    assert await latest(client, "ts") == 0
    for topic in ("ts-lax", "ts-append"):
        answer = (
            (await client.request(ApiKey.PRODUCE, 9, produce_body(topic, ahead))).responses[0].partition_responses[0]
        )
        assert answer.error_code == ErrorCode.NONE, topic
        assert await latest(client, topic) == 3


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state"])
async def test_a_client_cannot_append_to_an_internal_topic(connect, broker, topic):
    # found by broker/tests/test_fuzz_apis.py: garbage appended to the coordinators' own log; Kafka
    # 4.0 answers INVALID_TOPIC_EXCEPTION and appends nothing
    client = await connect()
    key_type = 0 if topic == "__consumer_offsets" else 1
    await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "k", "key_type": key_type})  # creates the topic
    assert topic in broker.topics.topics
    end = await latest(client, topic)
    answer = (await client.request(ApiKey.PRODUCE, 9, produce_body(topic, TWO))).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert await latest(client, topic) == end
    await create(client, "__ordinary")  # only Kafka's internal topics: others named "__" take records
    answer = (
        (await client.request(ApiKey.PRODUCE, 9, produce_body("__ordinary", TWO))).responses[0].partition_responses[0]
    )
    assert answer.error_code == ErrorCode.NONE


async def test_a_topic_config_change_applies_to_the_next_produce(connect):
    # the leader keeps each partition's checks between produces (built once, not per request): an
    # altered timestamp policy or min.insync.replicas must reach the very next one
    client = await connect()
    await create(client, "cfg")
    far_ahead = build_batch([Record(0, 0, b"k", b"v")], base_timestamp=int(time.time() * 1000) + 2 * 3600_000)

    async def produce() -> ErrorCode:
        answer = await client.request(ApiKey.PRODUCE, 9, produce_body("cfg", far_ahead))
        return answer.responses[0].partition_responses[0].error_code

    async def alter(name: str, value: str) -> None:
        body = {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "cfg",
                    "configs": [{"name": name, "config_operation": 0, "value": value}],
                }
            ],
            "validate_only": False,
        }
        assert (await client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)).responses[0].error_code == 0

    assert await produce() == ErrorCode.INVALID_TIMESTAMP
    await alter("message.timestamp.type", "LogAppendTime")
    assert await produce() == ErrorCode.NONE
    await alter("min.insync.replicas", "2")  # one broker: acks=all cannot be met
    assert await produce() == ErrorCode.NOT_ENOUGH_REPLICAS
    await alter("min.insync.replicas", "1")
    assert await produce() == ErrorCode.NONE

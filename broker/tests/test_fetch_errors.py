"""Fetch answers for partitions in error, as Kafka 4.0 answers them (compat_tests/differential,
scenarios fetch-v*-out-of-range, -unknown-partition, -unknown-topic): no offsets (-1); aborted
transactions null when the log was asked, an empty list when the partition was refused before.
A follower's out-of-range answer keeps the leader's log start and high watermark: Strom's
replica fetcher moves its log by them."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_apis import batch, create, produce_body


def fetch(topic: str, partition: int, offset: int, replica: int = -1) -> dict:
    return {
        "replica_id": replica,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


@pytest.mark.parametrize(
    "topic, partition, offset, code, aborted",
    [
        ("f", 0, 99, ErrorCode.OFFSET_OUT_OF_RANGE, None),
        ("f", 0, -5, ErrorCode.OFFSET_OUT_OF_RANGE, None),
        ("f", 9, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
        ("nothere", 0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
    ],
)
async def test_a_consumer_gets_no_offsets_with_an_error(connect, topic, partition, offset, code, aborted):
    client = await connect()
    await create(client, "f")
    await client.request(ApiKey.PRODUCE, 9, produce_body("f", batch(4)))
    answer = (await client.request(ApiKey.FETCH, 12, fetch(topic, partition, offset))).responses[0].partitions[0]
    assert answer.error_code == code
    assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (-1, -1, -1)
    assert answer.aborted_transactions == aborted
    ok = (await client.request(ApiKey.FETCH, 12, fetch("f", 0, 0))).responses[0].partitions[0]
    assert (ok.error_code, ok.high_watermark, ok.log_start_offset) == (ErrorCode.NONE, 4, 0)


async def test_a_follower_out_of_range_still_learns_the_leaders_offsets(connect, broker):
    client = await connect()
    await create(client, "f")
    await client.request(ApiKey.PRODUCE, 9, produce_body("f", batch(4)))
    broker.replicas.partition("f", 0).log.maybe_increment_log_start_offset(2)
    answer = (await client.request(ApiKey.FETCH, 12, fetch("f", 0, 0, replica=1))).responses[0].partitions[0]
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (answer.high_watermark, answer.log_start_offset) == (4, 2)

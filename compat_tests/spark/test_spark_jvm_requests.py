"""Requests the Java client 3.9 (Spark's kafka connector) sends that librdkafka does not, as raw
frames through the protocol's client-role connection (``strom.tools.common.KafkaSocket``) against a live Strom.

Metadata v12 with topic ids; ListOffsets v8 with a timestamp; DescribeCluster v1;
OffsetForLeaderEpoch v4; Fetch v17 without a session (session id 0, epoch -1, topic ids);
InitProducerId v5 for the idempotent producer (no transactional id).
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
from confluent_kafka import Producer

from strom.protocol.schema import ApiKey
from strom.tools.broker_process import BrokerProcess
from strom.tools.common import KafkaSocket

TOPIC = "jvm-requests"
BASE_TS = 1_700_000_000_000


def _call(port: int, key: int, version: int, body: dict[str, Any]) -> Any:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        return KafkaSocket(sock, "java-client-3.9").request(key, version, body)


@pytest.fixture(scope="module")
def seeded(shared_broker: BrokerProcess) -> BrokerProcess:
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(10):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0, timestamp=BASE_TS + i * 1000)
    assert producer.flush(30) == 0
    return shared_broker


def _topic_id(port: int) -> bytes:
    meta = _call(port, ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    (topic,) = meta.topics
    assert topic.error_code == 0 and topic.name == TOPIC
    return topic.topic_id


def _uuid_bytes(value: Any) -> bytes:
    return value.bytes if hasattr(value, "bytes") else bytes(value)


def test_metadata_v12_gives_a_topic_id_and_partition_leaders(seeded: BrokerProcess) -> None:
    topic_id = _uuid_bytes(_topic_id(seeded.port))
    assert len(topic_id) == 16 and topic_id != bytes(16)


def test_list_offsets_v8_by_timestamp_finds_the_first_later_record(seeded: BrokerProcess) -> None:
    def at(ts: int) -> Any:
        reply = _call(
            seeded.port,
            ApiKey.LIST_OFFSETS,
            8,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}
                ],
            },
        )
        return reply.topics[0].partitions[0]

    found = at(BASE_TS + 4500)
    assert (found.error_code, found.offset, found.timestamp) == (0, 5, BASE_TS + 5000)
    assert at(BASE_TS + 60_000).offset == -1
    assert (at(-2).offset, at(-1).offset) == (0, 10)


def test_describe_cluster_v1_lists_the_broker_and_a_controller(seeded: BrokerProcess) -> None:
    reply = _call(
        seeded.port, ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    )
    assert reply.error_code == 0 and reply.cluster_id
    assert [(b.host, b.port) for b in reply.brokers] == [("127.0.0.1", seeded.port)]
    assert reply.controller_id in [b.broker_id for b in reply.brokers]


def test_offset_for_leader_epoch_v4_gives_the_end_of_the_epoch(seeded: BrokerProcess) -> None:
    reply = _call(
        seeded.port,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        4,
        {
            "replica_id": -1,
            "topics": [
                {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
            ],
        },
    )
    part = reply.topics[0].partitions[0]
    assert part.error_code == 0 and part.end_offset == 10


def test_fetch_v17_by_topic_id_without_a_session_returns_the_records(seeded: BrokerProcess) -> None:
    topic_id = _topic_id(seeded.port)
    reply = _call(
        seeded.port,
        ApiKey.FETCH,
        17,
        {
            "replica_id": -1,
            "max_wait_ms": 100,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "rack_id": "",
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 3,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
        },
    )
    assert reply.error_code == 0
    part = reply.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 10
    from strom.protocol.records.batch import iter_records

    offsets = [r.offset for r in iter_records(part.records)]
    assert offsets and offsets[0] <= 3 and offsets[-1] == 9


def test_init_producer_id_v5_for_an_idempotent_producer(seeded: BrokerProcess) -> None:
    reply = _call(
        seeded.port,
        ApiKey.INIT_PRODUCER_ID,
        5,
        {"transactional_id": None, "transaction_timeout_ms": -1, "producer_id": -1, "producer_epoch": -1},
    )
    assert reply.error_code == 0 and reply.producer_id >= 0 and reply.producer_epoch >= 0

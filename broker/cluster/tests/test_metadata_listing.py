"""What a cluster member's Metadata and DescribeTopicPartitions answers list while the controller
has yet to write a partition's state: as a ZooKeeper-mode Kafka broker, whose cache holds a
partition once the controller sent its state, a topic being created is not listed yet and a topic
being grown lists its old partitions only (never a partition without replicas or leader)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strom.broker.apis import describe_topic_partitions, metadata
from strom.broker.config import BrokerConfig
from strom.broker.metadata.cache import ClusterView, ZkMetadataCache
from strom.broker.zk.zkclient import VersionedPartitionState
from strom.broker.zk.zkdata import (
    BrokerInfo,
    EndPoint,
    PartitionState,
    TopicAssignment,
    new_topic_id,
    topic_id_from_text,
)
from strom.protocol.connection import Connection, Role
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

GROWN_ID = new_topic_id()
NEW_ID = new_topic_id()


def _state(leader: int) -> VersionedPartitionState:
    return VersionedPartitionState(PartitionState(leader, 0, (0, 1), 1), 0)


@pytest.fixture
def ctx() -> SimpleNamespace:
    """A member's view: "grown" went from 2 to 4 partitions (states of 0 and 1 only); "new" is
    assigned with no state yet; "whole" has every state."""
    cache = ZkMetadataCache(BrokerConfig({"node.id": "0"}), "cluster")
    brokers = {n: BrokerInfo(n, (EndPoint("PLAINTEXT", "127.0.0.1", 9092 + n),), timestamp_ms=1) for n in (0, 1)}
    view = ClusterView(brokers=brokers, controller_id=0)
    view.assignments = {
        "grown": TopicAssignment({p: (0, 1) for p in range(4)}, topic_id=GROWN_ID),
        "new": TopicAssignment({0: (0, 1), 1: (1, 0)}, topic_id=NEW_ID),
        "whole": TopicAssignment({0: (1, 0)}, topic_id=new_topic_id()),
    }
    view.states = {("grown", 0): _state(0), ("grown", 1): _state(1), ("whole", 0): _state(1)}
    cache.update(view)

    async def auto_create(name: str):
        raise AssertionError(f"{name} exists: it is not created again")

    return SimpleNamespace(
        metadata=cache, authorizer=None, admin=SimpleNamespace(auto_create=auto_create), config=cache.config
    )


def _request(api_key: int, version: int, body: dict):
    client, server = Connection(Role.CLIENT), Connection(Role.SERVER)
    server.receive_data(client.send_request(api_key, version, body))
    return server.next_event()


async def _metadata(ctx, topics, allow_create: bool = False):
    body = {"topics": topics, "allow_auto_topic_creation": allow_create, "include_topic_authorized_operations": False}
    answer = await metadata.handle(ctx, _request(ApiKey.METADATA, 12, body))
    return {t["name"]: t for t in answer["topics"]}, answer


async def test_every_topic_listing_leaves_out_a_topic_being_created_and_partitions_being_added(ctx) -> None:
    topics, _ = await _metadata(ctx, None)
    assert sorted(topics) == ["grown", "whole"]
    assert [p["partition_index"] for p in topics["grown"]["partitions"]] == [0, 1]
    assert all(p["replica_nodes"] and p["leader_id"] >= 0 for t in topics.values() for p in t["partitions"])


@pytest.mark.parametrize(
    "allow_create,code", [(False, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (True, ErrorCode.LEADER_NOT_AVAILABLE)]
)
async def test_a_topic_asked_for_while_being_created_is_retriable_and_has_no_partitions(
    ctx, allow_create, code
) -> None:
    topics, _ = await _metadata(ctx, [{"topic_id": bytes(16), "name": "new"}], allow_create)
    assert (topics["new"]["error_code"], topics["new"]["partitions"]) == (code, [])
    by_id, _ = await _metadata(ctx, [{"topic_id": topic_id_from_text(NEW_ID), "name": None}])
    assert by_id[None]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


async def test_describe_topic_partitions_lists_what_metadata_lists(ctx) -> None:
    body = {"topics": [], "response_partition_limit": 2000, "cursor": None}
    answer = await describe_topic_partitions.handle(ctx, _request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body))
    listed = {t["name"]: [p["partition_index"] for p in t["partitions"]] for t in answer["topics"]}
    assert listed == {"grown": [0, 1], "whole": [0]}
    body = {"topics": [{"name": "new"}], "response_partition_limit": 2000, "cursor": None}
    answer = await describe_topic_partitions.handle(ctx, _request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body))
    assert answer["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

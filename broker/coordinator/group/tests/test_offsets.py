"""Committed offsets: commit/fetch, persistence across restarts, admin APIs and expiry."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from strom.broker.coordinator.group.coordinator import OFFSETS_TOPIC
from strom.broker.coordinator.group.records import (
    CommittedOffset,
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from strom.broker.coordinator.group.tests.helpers import (
    commit,
    create_topic,
    fetch_offsets,
    heartbeat,
    join_fully,
    sync,
)
from strom.broker.server.connection import ConnectionHandler
from strom.broker.tests.helpers import GROUP_TEST_CONFIG, Client, make_broker
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records
from strom.protocol.schema import ApiKey
from strom.storage.errors import InvalidProducerEpoch, InvalidTxnState, KafkaStorageError


async def test_simple_consumer_commits_without_joining_and_metadata_round_trips(gconnect):
    client = await gconnect()
    await create_topic(client, "t")
    assert await commit(client, "simple", {("t", 0): 5, ("t", 2): 9}, metadata="ünïcode meta") == {
        ("t", 0): ErrorCode.NONE,
        ("t", 2): ErrorCode.NONE,
    }
    found = await fetch_offsets(client, "simple", {"t": [0, 1, 2]})
    assert found == {("t", 0): (5, "ünïcode meta", 0), ("t", 1): (-1, "", 0), ("t", 2): (9, "ünïcode meta", 0)}
    assert set(await fetch_offsets(client, "simple", None)) == {("t", 0), ("t", 2)}
    assert await fetch_offsets(client, "nobody", {"t": [0]}) == {("t", 0): (-1, "", 0)}


@pytest.mark.parametrize("commit_v", list(range(0, 10)))
async def test_every_commit_version_is_fetched_by_every_fetch_version(gconnect, commit_v):
    client = await gconnect()
    await create_topic(client, "t")
    assert await commit(client, "g", {("t", 1): 40 + commit_v}, version=commit_v) == {("t", 1): ErrorCode.NONE}
    for fetch_v in range(0, 10):
        found = await fetch_offsets(client, "g", {"t": [1]}, version=fetch_v)
        assert found[("t", 1)][:2] == (40 + commit_v, "meta")


async def test_commit_errors(gconnect, autojump_clock):
    client = await gconnect()
    await create_topic(client, "t")
    assert await commit(client, "g", {("missing", 0): 1, ("t", 0): 1}) == {
        ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", 0): ErrorCode.NONE,
    }
    assert await commit(client, "g", {("t", 0): 1}, metadata="x" * 5000) == {
        ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    assert await commit(client, "fresh", {("t", 0): 1}, generation=3, member_id="m") == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert await commit(client, "", {("t", 0): 1}) == {("t", 0): ErrorCode.INVALID_GROUP_ID}
    joined = await join_fully(client, "members")
    assert await commit(client, "members", {("t", 0): 1}) == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
    await sync(client, "members", joined.member_id, 1, {})
    assert await commit(client, "members", {("t", 0): 1}) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert await commit(client, "members", {("t", 0): 1}, generation=9, member_id=joined.member_id) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert await commit(client, "members", {("t", 0): 7}, generation=1, member_id=joined.member_id) == {
        ("t", 0): ErrorCode.NONE
    }
    # As Kafka 4.0 (differential scenario heartbeat-v4-illegal-generation-member-stays): partitions that
    # do not exist are answered UNKNOWN_TOPIC_OR_PARTITION whatever the group would say
    assert await commit(
        client, "members", {("t", 0): 1, ("t", 9): 1, ("missing", 0): 1}, generation=9, member_id=joined.member_id
    ) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION,
        ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert await commit(client, "", {("missing", 0): 1}) == {("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def _records(broker, group_id):
    partition = broker.replicas.partition(OFFSETS_TOPIC, broker.groups.partition_of(group_id))
    region = partition.log.read(0, 1 << 20).records
    return list(iter_records(region.read())) if region else []


async def test_records_on_disk_are_kafkas_formats(gconnect, group_broker):
    client = await gconnect()
    await create_topic(client, "t")
    joined = await join_fully(client, "g")
    await sync(client, "g", joined.member_id, 1, {joined.member_id: b"assign"})
    await commit(client, "g", {("t", 0): 3}, generation=1, member_id=joined.member_id)
    assert group_broker.topics.topics[OFFSETS_TOPIC].configs["cleanup.policy"] == "compact"
    records = _records(group_broker, "g")
    keys = [decode_key(r.key) for r in records]
    assert keys[-1] == OffsetKey("g", "t", 0) and GroupKey("g") in keys
    assert records[-1].key[:2] == b"\x00\x01" and records[-1].value[:2] == b"\x00\x03"
    assert decode_offset_value(records[-1].value).offset == 3
    group = decode_group_value(next(r.value for r in reversed(records) if isinstance(decode_key(r.key), GroupKey)))
    assert group.generation == 1 and group.protocol == "range" and group.leader == joined.member_id
    assert group.members[0].assignment == b"assign"


async def _client(broker, nursery) -> Client:
    client_side, server_side = trio.testing.memory_stream_pair()
    nursery.start_soon(ConnectionHandler(broker), server_side)
    return Client(client_side)


async def test_offsets_and_group_survive_a_restart(tmp_path, nursery, autojump_clock):
    first = make_broker(tmp_path / "d", **GROUP_TEST_CONFIG)
    client = await _client(first, nursery)
    await create_topic(client, "t")
    joined = await join_fully(client, "g")
    await sync(client, "g", joined.member_id, 1, {joined.member_id: b"plan"})
    await commit(client, "g", {("t", 0): 10, ("t", 1): 20}, generation=1, member_id=joined.member_id)
    await commit(client, "g", {("t", 0): 11}, generation=1, member_id=joined.member_id, metadata="later")
    await commit(client, "gone", {("t", 0): 1})
    deleted = await client.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["gone"]})
    assert deleted.results[0].error_code == ErrorCode.NONE
    first.close()

    second = make_broker(tmp_path / "d", **GROUP_TEST_CONFIG)
    try:
        client = await _client(second, nursery)
        assert await fetch_offsets(client, "g", {"t": [0, 1]}) == {
            ("t", 0): (11, "later", 0),
            ("t", 1): (20, "meta", 0),
        }
        assert second.groups is not None and second.groups.get("gone") is None
        # The member may carry on with its generation until its session runs out.
        assert await heartbeat(client, "g", joined.member_id, 1) == ErrorCode.NONE
        synced = await sync(client, "g", joined.member_id, 1)
        assert synced.assignment == b"plan"
    finally:
        second.close()


async def test_list_describe_delete_groups(gconnect):
    client = await gconnect()
    await create_topic(client, "t")
    await commit(client, "simple", {("t", 0): 1})
    joined = await join_fully(client, "live")
    await sync(client, "live", joined.member_id, 1, {joined.member_id: b"a"})
    listed = await client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    assert {(g.group_id, g.protocol_type, g.group_state) for g in listed.groups} == {
        ("simple", "", "Empty"),
        ("live", "consumer", "Stable"),
    }
    stable = await client.request(ApiKey.LIST_GROUPS, 4, {"states_filter": ["Stable"]})
    assert [g.group_id for g in stable.groups] == ["live"]
    described = await client.request(
        ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["live", "unknown"], "include_authorized_operations": True}
    )
    live, unknown = described.groups
    assert live.group_state == "Stable" and live.protocol_data == "range"
    assert live.members[0].member_id == joined.member_id and live.members[0].member_assignment == b"a"
    assert unknown.group_state == "Dead" and unknown.error_code == ErrorCode.NONE
    deleted = await client.request(ApiKey.DELETE_GROUPS, 1, {"groups_names": ["live", "simple", "unknown"]})
    assert [r.error_code for r in deleted.results] == [
        ErrorCode.NON_EMPTY_GROUP,
        ErrorCode.NONE,
        ErrorCode.GROUP_ID_NOT_FOUND,
    ]
    assert await fetch_offsets(client, "simple", {"t": [0]}) == {("t", 0): (-1, "", 0)}


async def test_offset_delete(gconnect):
    client = await gconnect()
    await create_topic(client, "t")
    await create_topic(client, "other")
    joined = await join_fully(client, "g")  # subscribes to "t"
    await sync(client, "g", joined.member_id, 1, {})
    await commit(client, "g", {("t", 0): 1, ("other", 0): 2}, generation=1, member_id=joined.member_id)

    async def delete(group, topic):
        response = await client.request(
            ApiKey.OFFSET_DELETE,
            0,
            {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]},
        )
        parts = [p.error_code for t in response.topics for p in t.partitions]
        return response.error_code, parts

    assert await delete("g", "t") == (ErrorCode.NONE, [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC])
    assert await delete("g", "other") == (ErrorCode.NONE, [ErrorCode.NONE])
    assert await delete("nope", "t") == (ErrorCode.GROUP_ID_NOT_FOUND, [])
    assert await fetch_offsets(client, "g", None) == {("t", 0): (1, "meta", 0)}


async def test_find_coordinator_every_version(gconnect, group_broker):
    client = await gconnect()
    for version in range(0, 4):
        response = await client.request(ApiKey.FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
        assert response.error_code == ErrorCode.NONE and response.node_id == group_broker.node_id
    for version in range(4, 7):
        response = await client.request(
            ApiKey.FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": ["a", "b"]}
        )
        assert [(c.key, c.error_code) for c in response.coordinators] == [("a", 0), ("b", 0)]
    txn = await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "tx", "key_type": 1})
    assert txn.error_code == ErrorCode.NONE and txn.node_id == group_broker.node_id
    assert "__transaction_state" in group_broker.topics.topics
    bad = await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "tx", "key_type": 2})
    assert bad.error_code == ErrorCode.INVALID_REQUEST
    assert OFFSETS_TOPIC in group_broker.topics.topics
    assert group_broker.topics.topics[OFFSETS_TOPIC].partitions == 5


async def test_offsets_of_an_empty_group_expire_after_retention(gconnect, group_broker):
    client = await gconnect()
    await create_topic(client, "t")
    await commit(client, "simple", {("t", 0): 1})
    coordinator = group_broker.groups
    now = coordinator.get("simple").offsets[("t", 0)].commit_timestamp
    assert coordinator.expire_offsets(now + coordinator.config.offsets_retention_ms - 1) == 0
    assert coordinator.expire_offsets(now + coordinator.config.offsets_retention_ms) == 1
    assert coordinator.get("simple") is None
    assert await fetch_offsets(client, "simple", {"t": [0]}) == {("t", 0): (-1, "", 0)}


async def test_offset_fetch_v8_batches_groups(gconnect):
    client = await gconnect()
    await create_topic(client, "t")
    await commit(client, "a", {("t", 0): 1})
    await commit(client, "b", {("t", 0): 2})
    response = await client.request(
        ApiKey.OFFSET_FETCH,
        8,
        {
            "groups": [
                {"group_id": "a", "topics": [{"name": "t", "partition_indexes": [0]}]},
                {"group_id": "b", "topics": None},
                {"group_id": "", "topics": None},
            ]
        },
    )
    got = {
        g.group_id: ([p.committed_offset for t in g.topics for p in t.partitions], g.error_code)
        for g in response.groups
    }
    assert got == {"a": ([1], 0), "b": ([2], 0), "": ([], ErrorCode.INVALID_GROUP_ID)}


@pytest.mark.parametrize(
    "failure, expected",
    [
        (OSError("disk gone"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (InvalidProducerEpoch("fenced"), ErrorCode.INVALID_PRODUCER_EPOCH),
        (InvalidTxnState("no transaction"), ErrorCode.INVALID_TXN_STATE),
        (KafkaStorageError("log dir offline"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
    ],
)
@pytest.mark.parametrize("transactional", [False, True])
async def test_a_commit_whose_records_cannot_be_written_changes_nothing(
    gconnect, group_broker, monkeypatch, failure, expected, transactional
):
    client = await gconnect()
    await create_topic(client, "t")
    coordinator = group_broker.groups
    await coordinator.ensure_topic()
    partition = group_broker.replicas.partition(OFFSETS_TOPIC, coordinator.partition_of("g"))

    def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr(partition, "append", fail)
    offsets = [("t", 0, CommittedOffset(5)), ("missing", 0, CommittedOffset(1))]
    if transactional:
        results = coordinator.txn_commit_offsets("g", 7, 0, "", None, -1, offsets)
    else:
        results = coordinator.commit_offsets("g", "", None, -1, -1, offsets)
    # a fenced producer is the only answer a plain commit (no producer) can never get
    if not transactional and expected is not ErrorCode.COORDINATOR_NOT_AVAILABLE:
        expected = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert [(r.topic, r.error) for r in results] == [("t", expected), ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert coordinator.fetch_offsets("g", None) == {} and not coordinator.has_pending_txn_offset("g", "t", 0)


async def test_transactional_commits_check_a_member_only_when_they_name_one(gconnect, group_broker):
    # Kafka 4.0 (differential scenario txn_offset_commit-v3-group-and-member-checks): a member id,
    # instance id or generation is checked against the group; without, anything goes (a producer's
    # sendOffsetsToTransaction(offsets, groupId)); a generation for a group that does not exist is
    # ILLEGAL_GENERATION, and without one the group is created Empty before the transaction ends.
    client = await gconnect()
    await create_topic(client, "t")
    coordinator = group_broker.groups
    await coordinator.ensure_topic()
    offsets = [("t", 0, CommittedOffset(5))]

    def txn_commit(group, member="", generation=-1, pid=7):
        return [r.error for r in coordinator.txn_commit_offsets(group, pid, 0, member, None, generation, offsets)]

    assert txn_commit("nowhere", "x", 3) == [ErrorCode.ILLEGAL_GENERATION]
    assert coordinator.get("nowhere") is None
    assert txn_commit("simple") == [ErrorCode.NONE]
    assert coordinator.get("simple").state.value == "Empty", "created by the commit, before any marker"
    joined = await join_fully(client, "classic")
    await sync(client, "classic", joined.member_id, 1, {})
    assert txn_commit("classic", pid=8) == [ErrorCode.NONE], "no member named: not checked"
    assert txn_commit("classic", "unknown", pid=8) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert txn_commit("classic", joined.member_id, pid=8) == [ErrorCode.ILLEGAL_GENERATION]
    assert txn_commit("classic", joined.member_id, 1, pid=8) == [ErrorCode.NONE]


async def test_offsets_of_partitions_other_brokers_host_are_committed(gconnect, group_broker, monkeypatch):
    # In a cluster the coordinator hosts a replica of few partitions; Kafka takes a commit for any
    # partition its metadata knows (a partition this broker has no replica of was UNKNOWN_TOPIC_OR_PARTITION)
    client = await gconnect()
    await create_topic(client, "t")
    view = group_broker.metadata.partition_view
    monkeypatch.setattr(
        group_broker.metadata,
        "partition_view",
        lambda topic, index: (2, 0, [2], [2], []) if topic == "elsewhere" else view(topic, index),
    )
    assert group_broker.replicas.partition("elsewhere", 0) is None
    assert await commit(client, "g", {("elsewhere", 0): 3, ("t", 0): 4, ("gone", 0): 5}) == {
        ("elsewhere", 0): ErrorCode.NONE,
        ("t", 0): ErrorCode.NONE,
        ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert (await fetch_offsets(client, "g", {"elsewhere": [0]}))[("elsewhere", 0)][0] == 3


async def _set_offsets_min_isr(client, value: str) -> None:
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": OFFSETS_TOPIC,
             "configs": [{"name": "min.insync.replicas", "config_operation": 0, "value": value}]}
        ],
        "validate_only": False,
    }  # fmt: skip
    answer = await client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)
    assert answer.responses[0].error_code == ErrorCode.NONE, answer


async def test_a_commit_needs_the_offsets_topics_min_insync_replicas(gconnect, group_broker):
    """As Kafka's coordinator, which appends offsets with acks=all: with fewer in-sync replicas
    than __consumer_offsets' min.insync.replicas nothing is written and the commit is answered
    COORDINATOR_NOT_AVAILABLE (the client retries), never acknowledged on fewer replicas."""
    client = await gconnect()
    await create_topic(client, "t")
    assert await commit(client, "g", {("t", 0): 5}) == {("t", 0): ErrorCode.NONE}
    index = group_broker.groups.store.partition_of("g")
    end = group_broker.replicas.partition(OFFSETS_TOPIC, index).log.log_end_offset
    await _set_offsets_min_isr(client, "2")  # one broker: an ISR of one
    assert await commit(client, "g", {("t", 0): 7}) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert group_broker.replicas.partition(OFFSETS_TOPIC, index).log.log_end_offset == end  # nothing written
    assert (await fetch_offsets(client, "g", {"t": [0]}))[("t", 0)][0] == 5
    await _set_offsets_min_isr(client, "1")
    assert await commit(client, "g", {("t", 0): 7}) == {("t", 0): ErrorCode.NONE}
    assert (await fetch_offsets(client, "g", {"t": [0]}))[("t", 0)][0] == 7

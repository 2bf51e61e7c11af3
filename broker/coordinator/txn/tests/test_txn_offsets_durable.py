"""Transactional offset commits survive a restart: every one is written, not only the first.

The group coordinator appends each TxnOffsetCommit as a transactional batch of the producer, with no
sequence number. Taken for a client append, every batch after the first in one producer epoch
looked like a duplicate of it and was silently not written: a transaction-version-1 client (one
epoch for all its transactions) kept only its first committed offset across a restart.
"""

from __future__ import annotations

import pytest

from strom.broker.coordinator.group.coordinator import OFFSETS_TOPIC
from strom.broker.coordinator.txn.tests.test_coordinator import (
    TID,
    add_partitions,
    end,
    init,
    produce,
    read,
    settled,
    txn_batch,
)
from strom.broker.tests.test_apis import create
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_batches
from strom.protocol.schema import ApiKey


async def _txn_offset_commit(client, pid: int, epoch: int, offset: int, group: str = "g"):
    add = await client.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch, "group_id": group},
    )
    assert add.error_code == ErrorCode.NONE
    committed = await client.request(
        ApiKey.TXN_OFFSET_COMMIT,
        3,
        {
            "transactional_id": TID,
            "group_id": group,
            "producer_id": pid,
            "producer_epoch": epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": f"m{offset}",
                        }
                    ],
                }
            ],
        },
    )
    assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE


async def _committed(client, group: str = "g"):
    response = await client.request(
        ApiKey.OFFSET_FETCH,
        7,
        {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": True},
    )
    p = response.topics[0].partitions[0]
    return p.error_code, p.committed_offset, p.metadata


@pytest.mark.parametrize("with_data", [False, True])
async def test_every_transactional_offset_commit_of_one_epoch_survives_a_restart(env, with_data):
    broker, client, restart = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    for round_, offset in enumerate((100, 200, 300)):
        if with_data:  # consume-transform-produce: output records and the input offsets in one transaction
            assert await add_partitions(client, pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.NONE}
            written = await produce(client, "t", txn_batch(pid, 0, round_, [b"out%d" % offset]))
            assert written.error_code == ErrorCode.NONE
        await _txn_offset_commit(client, pid, 0, offset)
        assert await end(client, pid, 0, commit=True) == ErrorCode.NONE
        await settled(broker)
        assert await _committed(client) == (ErrorCode.NONE, offset, f"m{offset}")

    # every commit is in the log, each followed by its marker
    groups = broker.groups
    log = broker.replicas.partition(OFFSETS_TOPIC, groups.partition_of("g")).log
    data = bytes(log.read(0, 1 << 20, max_offset=None).records.read())
    txn_batches = [h for _, h in iter_batches(data) if h.producer_id == pid and not h.is_control]
    markers = [h for _, h in iter_batches(data) if h.producer_id == pid and h.is_control]
    assert len(txn_batches) == 3 and len(markers) == 3

    broker, client = await restart()  # the coordinator loads the group from __consumer_offsets
    assert await _committed(client) == (ErrorCode.NONE, 300, "m300")
    if with_data:
        _, values = await read(client, "t", committed=True)
        assert values == [b"out100", b"out200", b"out300"]


async def test_an_aborted_transactional_commit_after_committed_ones_leaves_the_last_committed(env):
    broker, client, restart = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    for offset, commit in ((100, True), (200, True), (250, False)):
        await _txn_offset_commit(client, pid, 0, offset)
        assert await end(client, pid, 0, commit=commit) == ErrorCode.NONE
        await settled(broker)
    assert await _committed(client) == (ErrorCode.NONE, 200, "m200")
    broker, client = await restart()
    assert await _committed(client) == (ErrorCode.NONE, 200, "m200")


async def test_a_new_leader_loads_the_offsets_past_its_high_watermark(env):
    """A follower that becomes the leader of a `__consumer_offsets` partition holds the last commit and
    its marker, but its high watermark is the one its old leader last told it, below them. Loading
    only up to the high watermark left that commit pending for good (its marker is never written
    again): a read_committed consumer's OffsetFetch answered UNSTABLE_OFFSET_COMMIT forever."""
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    for offset in (100, 200, 300):
        await _txn_offset_commit(client, pid, 0, offset)
        assert await end(client, pid, 0, commit=True) == ErrorCode.NONE
        await settled(broker)
    groups = broker.groups
    partition = broker.replicas.partition(OFFSETS_TOPIC, groups.partition_of("g"))
    partition.log.high_watermark = partition.log.log_end_offset - 1  # the last marker above it
    groups.groups.clear()
    groups.load_partition(partition.index)  # as follow_leadership does on gaining the partition
    assert not groups.has_pending_txn_offset("g", "t", 0)
    assert groups.fetch_offsets("g", None)[("t", 0)].offset == 300


async def test_a_transactional_offset_commit_is_answered_once_the_in_sync_replicas_have_it(
    tmp_path, nursery, monkeypatch
):
    """As Kafka (acks=all on the offsets partition). Answered at once before: a coordinator paused and
    replaced before its followers had the commit lost it, while the producer committed its
    transaction: the group's offsets went back and the records were processed twice."""
    from strom.broker.tests.helpers import make_broker, open_client

    broker = make_broker(
        tmp_path / "data",
        transaction_state_log_num_partitions=3,
        offsets_topic_num_partitions=3,
        offsets_commit_timeout_ms=300,
    )
    try:
        assert broker.txn is not None and broker.groups is not None
        await nursery.start(broker.txn.run)
        client = open_client(broker, nursery)
        await create(client, "t")
        pid = (await init(client)).producer_id
        add = await client.request(
            ApiKey.ADD_OFFSETS_TO_TXN,
            3,
            {"transactional_id": TID, "producer_id": pid, "producer_epoch": 0, "group_id": "g"},
        )
        assert add.error_code == ErrorCode.NONE
        partition = broker.replicas.partition(OFFSETS_TOPIC, broker.groups.partition_of("g"))
        assert partition is not None
        monkeypatch.setattr(partition, "maybe_advance_high_watermark", lambda: False)  # no follower has it
        body = {
            "transactional_id": TID,
            "group_id": "g",
            "producer_id": pid,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 7,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        committed = await client.request(ApiKey.TXN_OFFSET_COMMIT, 3, body)
        assert committed.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        monkeypatch.undo()
        partition.maybe_advance_high_watermark()
        committed = await client.request(ApiKey.TXN_OFFSET_COMMIT, 3, body)  # the client's retry
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        assert await end(client, pid, 0, commit=True) == ErrorCode.NONE
        await settled(broker)
        assert await _committed(client) == (ErrorCode.NONE, 7, "")
    finally:
        broker.close()

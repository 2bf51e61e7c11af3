"""The transaction markers a partition leader refuses, as Kafka's do: a deposed coordinator's,
delivered late (TRANSACTION_COORDINATOR_FENCED), and any while the partition has fewer in-sync
replicas than its topic's min.insync.replicas (NOT_ENOUGH_REPLICAS).

A coordinator loses its `__transaction_state` partition while its WriteTxnMarkers request is held
up in the network (a stalled link delivers it when it heals). The next coordinator writes the
same transaction's markers itself, and the producer goes on with its next transaction in the same
producer epoch (transaction version 1 keeps the epoch). When the old request lands, its abort
would end that next transaction in this partition only: its records here hidden from
read_committed consumers for good, while the other partitions commit them. Each marker carries
its coordinator's epoch; the partition keeps the epoch of the producer's last marker and refuses
older ones. (The symptom the nemesis test reported twice, "committed txn N: 2/6 not visible",
one partition's records of a committed transaction, is the one this race produces.)
"""

from __future__ import annotations

from strom.broker.coordinator.txn.tests.test_coordinator import TID, add_partitions, init, txn_batch
from strom.broker.tests.test_apis import create, fetch_body, produce_body
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import decode_records, iter_batches
from strom.protocol.records.control import ABORT, control_type
from strom.protocol.schema import ApiKey


async def marker(client, pid: int, commit: bool, coordinator_epoch: int) -> int:
    response = await client.request(
        ApiKey.WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": 0,
                    "transaction_result": commit,
                    "coordinator_epoch": coordinator_epoch,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                }
            ]
        },
    )
    return response.markers[0].topics[0].partitions[0].error_code


async def produce(client, pid: int, seq: int, value: bytes) -> int:
    body = produce_body("t", txn_batch(pid, 0, seq, [value]))
    body["transactional_id"] = TID
    response = await client.request(ApiKey.PRODUCE, 9, body)
    return response.responses[0].partition_responses[0].error_code


async def read_committed(client) -> list[bytes]:
    """The values a read_committed consumer is given: aborted transactions skipped (from the
    first offset the answer names to their abort marker), control batches never delivered."""
    body = fetch_body("t", 0)
    body["isolation_level"] = 1
    part = (await client.request(ApiKey.FETCH, 11, body)).responses[0].partitions[0]
    pending = sorted((a.first_offset, a.producer_id) for a in part.aborted_transactions or [])
    aborting: set[int] = set()
    view = memoryview(bytes(part.records or b""))
    values = []
    for position, header in iter_batches(view, partial_tail=True):
        while pending and pending[0][0] <= header.last_offset:
            aborting.add(pending.pop(0)[1])
        if header.is_control:
            if control_type(view, position) == ABORT:
                aborting.discard(header.producer_id)
        elif header.producer_id not in aborting:
            payload = bytes(view[position + 61 : position + header.size])
            values += [r.value for r in decode_records(payload, header.records_count)]
    return values


async def test_a_late_abort_of_a_deposed_coordinator_does_not_end_the_next_transaction(env):
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    assert await add_partitions(client, pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.NONE}
    # transaction 1, aborted by its producer; the new coordinator (epoch 5) wrote its abort
    assert await produce(client, pid, 0, b"one") == ErrorCode.NONE
    assert await marker(client, pid, commit=False, coordinator_epoch=5) == ErrorCode.NONE
    # transaction 2 of the same producer epoch opens in this partition
    assert await produce(client, pid, 1, b"two") == ErrorCode.NONE
    # the old coordinator's (epoch 4) abort of transaction 1 arrives now
    assert await marker(client, pid, commit=False, coordinator_epoch=4) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # transaction 2 commits, and is all there for read_committed consumers
    assert await marker(client, pid, commit=True, coordinator_epoch=5) == ErrorCode.NONE
    assert await read_committed(client) == [b"two"]


async def test_a_marker_waits_for_min_insync_replicas(env):
    """As Kafka's acks=all append of a marker: a partition with fewer in-sync replicas than its
    topic's min.insync.replicas refuses it (NOT_ENOUGH_REPLICAS, which the coordinator retries),
    so a marker is never durable on fewer replicas than the transaction's records had to be."""
    broker, client, _ = env
    await create(client, "t", configs={"min.insync.replicas": "2"})  # one broker: an ISR of one
    pid = (await init(client)).producer_id
    assert await marker(client, pid, commit=True, coordinator_epoch=0) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert broker.replicas.partition("t", 0).log.log_end_offset == 0


async def test_transaction_state_follows_the_topics_min_insync_replicas(env):
    """A change of __transaction_state's min.insync.replicas after its creation is followed: with
    fewer in-sync replicas, no transaction state is written (COORDINATOR_NOT_AVAILABLE, retried)."""
    _, client, _ = env
    assert (await init(client)).error_code == ErrorCode.NONE
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "__transaction_state",
             "configs": [{"name": "min.insync.replicas", "config_operation": 0, "value": "2"}]}
        ],
        "validate_only": False,
    }  # fmt: skip
    assert (await client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)).responses[0].error_code == 0
    assert (await init(client)).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE

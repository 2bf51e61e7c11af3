"""The transaction coordinator over the wire, against an in-process broker (memory streams)."""

from __future__ import annotations

import pytest
import trio

from strom.broker.coordinator.txn.metadata import TxnState
from strom.broker.tests.test_apis import create, fetch_body, produce_body
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch, iter_batches, iter_records
from strom.protocol.records.control import build_marker
from strom.protocol.schema import ApiKey

TID = "tx-1"


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    return build_batch(
        [Record(i, 0, b"k", v) for i, v in enumerate(values)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


async def init(client, tid=TID, timeout_ms=60_000, version=4, pid=-1, epoch=-1):
    body = {"transactional_id": tid, "transaction_timeout_ms": timeout_ms, "producer_id": pid, "producer_epoch": epoch}
    await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})  # creates the topic
    return await client.request(ApiKey.INIT_PRODUCER_ID, version, body)


async def add_partitions(client, pid, epoch, topics: dict[str, list[int]], tid=TID, version=3):
    response = await client.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        version,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        },
    )
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


async def end(client, pid, epoch, commit: bool, tid=TID, version=3):
    response = await client.request(
        ApiKey.END_TXN,
        version,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
    )
    return response.error_code


async def produce(client, topic, records, tid=TID):
    body = produce_body(topic, records)
    body["transactional_id"] = tid
    response = await client.request(ApiKey.PRODUCE, 9, body)
    return response.responses[0].partition_responses[0]


async def read(client, topic, committed: bool, offset=0):
    body = fetch_body(topic, offset)
    body["isolation_level"] = 1 if committed else 0
    response = await client.request(ApiKey.FETCH, 11, body)
    part = response.responses[0].partitions[0]
    data = bytes(part.records or b"")
    values = [
        r.value for pos, h in iter_batches(data) if not h.is_control for r in iter_records(data[pos : pos + h.size])
    ]
    return part, values


async def settled(broker, tid=TID):
    """Wait until the transaction's markers are written (Complete* or no transaction)."""
    with trio.fail_after(10):
        while broker.txn.state.txns[tid].state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            await trio.sleep(0.01)


async def test_commit_and_abort_over_the_wire(env):
    broker, client, _ = env
    await create(client, "t")
    found = await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": TID, "key_type": 1})
    assert (found.error_code, found.node_id) == (ErrorCode.NONE, broker.node_id)
    r = await init(client)
    assert r.error_code == ErrorCode.NONE and r.producer_epoch == 0
    pid = r.producer_id
    assert await add_partitions(client, pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.NONE}
    assert (await produce(client, "t", txn_batch(pid, 0, 0, [b"a", b"b"]))).error_code == ErrorCode.NONE
    part, values = await read(client, "t", committed=True)
    assert (part.high_watermark, part.last_stable_offset, values) == (2, 0, [])
    part, values = await read(client, "t", committed=False)
    assert values == [b"a", b"b"] and part.aborted_transactions is None
    assert await end(client, pid, 0, commit=True) == ErrorCode.NONE
    await settled(broker)
    assert await end(client, pid, 0, commit=True) == ErrorCode.NONE  # a retried commit
    assert await end(client, pid, 0, commit=False) == ErrorCode.INVALID_TXN_STATE
    part, values = await read(client, "t", committed=True)
    assert (part.high_watermark, part.last_stable_offset, values) == (3, 3, [b"a", b"b"])
    # a second transaction, aborted
    assert await add_partitions(client, pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.NONE}
    assert (await produce(client, "t", txn_batch(pid, 0, 2, [b"x"]))).error_code == ErrorCode.NONE
    assert await end(client, pid, 0, commit=False) == ErrorCode.NONE
    await settled(broker)
    part, _ = await read(client, "t", committed=True, offset=3)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 3)]
    lso = await client.request(
        ApiKey.LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}
            ],
        },
    )
    assert lso.topics[0].partitions[0].offset == 5

    described = await client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TID, "nope"]})
    mine, unknown = described.transaction_states
    assert (mine.error_code, mine.transaction_state, mine.producer_id) == (0, "CompleteAbort", pid)
    assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    listed = await client.request(
        ApiKey.LIST_TRANSACTIONS,
        1,
        {"state_filters": ["CompleteAbort", "Bogus"], "producer_id_filters": [], "duration_filter": -1},
    )
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [(TID, "CompleteAbort")]
    assert listed.unknown_state_filters == ["Bogus"]
    producers = await client.request(
        ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0]}]}
    )
    (state,) = producers.topics[0].partitions[0].active_producers
    assert (state.producer_id, state.last_sequence, state.current_txn_start_offset) == (pid, 2, -1)


async def test_errors_are_kafkas(env):
    broker, client, _ = env
    await create(client, "t")
    assert (await init(client, timeout_ms=0)).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert (await init(client, timeout_ms=900_001)).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert (await init(client, tid="")).error_code == ErrorCode.INVALID_REQUEST
    assert await end(client, 77, 0, True, tid="unknown") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    r = await init(client)
    pid = r.producer_id
    assert await end(client, pid, 0, True) == ErrorCode.INVALID_TXN_STATE  # nothing open
    assert await end(client, pid, 5, True) == ErrorCode.PRODUCER_FENCED
    assert await end(client, pid, 5, True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await end(client, pid + 1, 0, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert await add_partitions(client, pid, 0, {"t": [0, 7], "nope": [0]}) == {
        ("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # a transactional batch for a partition never added: refused, nothing held open
    refused = await produce(client, "t", txn_batch(pid, 0, 0, [b"x"]))
    assert refused.error_code == ErrorCode.INVALID_TXN_STATE
    assert broker.replicas.partition("t", 0).log.log_end_offset == 0
    # nobody but a coordinator writes markers
    control = await produce(client, "t", build_marker(pid, 0, True, 0, 1))
    assert control.error_code == ErrorCode.INVALID_RECORD


async def test_a_new_instance_fences_the_old_and_aborts_its_transaction(env):
    broker, client, _ = env
    await create(client, "t")
    await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": TID, "key_type": 1})
    old = await init(client)
    pid = old.producer_id
    await add_partitions(client, pid, 0, {"t": [0]})
    await produce(client, "t", txn_batch(pid, 0, 0, [b"zombie"]))
    assert (await init(client)).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    await settled(broker)
    new = await init(client)
    # epoch 0 -> 1 (fence) -> 2 (the abort, transaction version 2 as Kafka 4.0) -> 3 (the new instance)
    assert (new.error_code, new.producer_id, new.producer_epoch) == (ErrorCode.NONE, pid, 3)
    # the zombie is fenced everywhere
    assert await end(client, pid, 0, True) == ErrorCode.PRODUCER_FENCED
    assert await add_partitions(client, pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    late = await produce(client, "t", txn_batch(pid, 0, 1, [b"late"]))
    assert late.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    part, _ = await read(client, "t", committed=True)
    assert part.last_stable_offset == 2  # the consumer drops the zombie's batch with this list:
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
    # KIP-360: the current id and epoch get a bump; the previous ones (a retry) the current ones
    bumped = await init(client, pid=pid, epoch=3)
    assert (bumped.error_code, bumped.producer_epoch) == (ErrorCode.NONE, 4)
    retry = await init(client, pid=pid, epoch=3)
    assert (retry.error_code, retry.producer_epoch) == (ErrorCode.NONE, 4)
    assert (await init(client, pid=pid, epoch=1)).error_code == ErrorCode.PRODUCER_FENCED  # the fence epoch
    assert (await init(client, pid=pid, epoch=0)).error_code == ErrorCode.PRODUCER_FENCED
    assert (await init(client, pid=pid, epoch=0, version=3)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH


async def test_timed_out_transaction_is_aborted_and_its_producer_fenced(env):
    broker, client, _ = env
    await create(client, "t")
    r = await init(client, timeout_ms=1000)
    pid = r.producer_id
    await add_partitions(client, pid, 0, {"t": [0]})
    await produce(client, "t", txn_batch(pid, 0, 0, [b"slow"]))
    coordinator = broker.txn
    start = coordinator.state.txns[TID].start_ms
    now = start
    coordinator.port.now_ms = lambda: now
    assert await coordinator.abort_timed_out() == 0
    now = start + 1001
    assert await coordinator.abort_timed_out() == 1
    await settled(broker)
    meta = coordinator.state.txns[TID]
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, 2)  # fenced, then the abort's bump
    assert await end(client, pid, 0, True) == ErrorCode.PRODUCER_FENCED
    assert await end(client, pid, 0, False, version=5) == ErrorCode.PRODUCER_FENCED  # no retry of the abort
    part, _ = await read(client, "t", committed=True)
    assert part.last_stable_offset == part.high_watermark == 2
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]


async def test_prepared_commit_is_finished_after_a_restart(env):
    broker, client, restart = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    await add_partitions(client, pid, 0, {"t": [0]})
    await produce(client, "t", txn_batch(pid, 0, 0, [b"v"]))
    broker.txn._nursery = None  # the markers are not written before the "crash"
    assert await end(client, pid, 0, commit=True) == ErrorCode.NONE
    assert broker.txn.state.txns[TID].state == TxnState.PREPARE_COMMIT
    broker, client = await restart()
    await settled(broker)
    assert broker.txn.state.txns[TID].state == TxnState.COMPLETE_COMMIT
    _, values = await read(client, "t", committed=True)
    assert values == [b"v"]


@pytest.mark.parametrize("commit", [True, False])
async def test_transactional_offsets_are_pending_until_the_marker(env, commit):
    broker, client, restart = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    add = await client.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": TID, "producer_id": pid, "producer_epoch": 0, "group_id": "g"},
    )
    assert add.error_code == ErrorCode.NONE
    committed = await client.request(
        ApiKey.TXN_OFFSET_COMMIT,
        3,
        {
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
                            "committed_offset": 42,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "m",
                        }
                    ],
                }
            ],
        },
    )
    assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE

    async def offset_fetch(stable: bool):
        response = await client.request(
            ApiKey.OFFSET_FETCH,
            7,
            {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": stable},
        )
        p = response.topics[0].partitions[0]
        return p.error_code, p.committed_offset

    assert await offset_fetch(True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    assert await offset_fetch(False) == (ErrorCode.NONE, -1)
    assert await end(client, pid, 0, commit=commit) == ErrorCode.NONE
    await settled(broker)
    expected = (ErrorCode.NONE, 42 if commit else -1)
    assert await offset_fetch(True) == expected
    broker, client = await restart()  # replayed from __consumer_offsets: markers decide
    assert await offset_fetch(True) == expected


async def test_api_versions_finalizes_transaction_version_2_with_the_requests_it_needs(env):
    _, client, _ = env
    response = await client.request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}
    assert finalized["transaction.version"] == (2, 2)  # as Kafka 4.0 answers
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[ApiKey.END_TXN] == (0, 5) and ranges[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 5)
    # transaction version 2 needs Produce v12 and TxnOffsetCommit v5 (KIP-890); later ones carry it too
    assert ranges[ApiKey.PRODUCE][1] >= 12 and ranges[ApiKey.TXN_OFFSET_COMMIT][1] >= 5


async def test_idle_transactional_ids_expire_and_are_forgotten_after_a_restart(env):
    broker, client, restart = env
    pid = (await init(client)).producer_id
    coordinator = broker.txn
    updated = coordinator.state.txns[TID].last_update_ms
    expiry = coordinator.settings.id_expiration_ms
    coordinator.port.now_ms = lambda: updated + expiry
    assert await coordinator.expire_transactional_ids() == 0
    coordinator.port.now_ms = lambda: updated + expiry + 1
    assert await coordinator.expire_transactional_ids() == 1
    described = await client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TID]})
    assert described.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert await end(client, pid, 0, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    broker, client = await restart()  # the tombstone is in __transaction_state
    assert TID not in broker.txn.state.txns
    again = await init(client)
    assert again.error_code == ErrorCode.NONE and again.producer_id != pid


async def test_requests_that_make_no_sense_get_error_codes_and_leave_others_alone(env):
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    await add_partitions(client, pid, 0, {"t": [0]})
    await produce(client, "t", txn_batch(pid, 0, 0, [b"mine"]))
    other = await init(client, tid="other")
    # another producer's nonsense: wrong ids, epochs, partitions, groups, empty ids
    assert await end(client, pid, 0, True, tid="other") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert await end(client, other.producer_id, -1, False, tid="other") == ErrorCode.PRODUCER_FENCED
    assert await end(client, other.producer_id, 0, True, tid="") == ErrorCode.INVALID_REQUEST
    assert await add_partitions(client, other.producer_id, 0, {"t": [-1]}, tid="other") == {
        ("t", -1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    add = await client.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        3,
        {"transactional_id": "other", "producer_id": other.producer_id, "producer_epoch": 0, "group_id": ""},
    )
    assert add.error_code == ErrorCode.INVALID_GROUP_ID
    stray = await produce(client, "t", txn_batch(other.producer_id, 0, 0, [b"stray"]), tid="other")
    assert stray.error_code == ErrorCode.INVALID_TXN_STATE
    verify = await client.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        4,
        {
            "transactions": [
                {
                    "transactional_id": "nobody",
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "verify_only": True,
                    "topics": [{"name": "t", "partitions": [0]}],
                }
            ]
        },
    )
    code = verify.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code
    assert code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # the first producer's transaction is untouched and commits
    assert broker.txn.state.txns[TID].state == TxnState.ONGOING
    assert await end(client, pid, 0, True) == ErrorCode.NONE
    await settled(broker)
    _, values = await read(client, "t", committed=True)
    assert values == [b"mine"]

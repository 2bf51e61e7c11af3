"""Transaction version 2 (KIP-890 part 2) over the wire: EndTxn v5 bumps the epoch of every
transaction, Produce v12 and TxnOffsetCommit v5 add partitions through the partition leader, the
epoch rolls over to a new producer id, and older producers are fenced. What Kafka 4.0 answers in
each case was read from the reference broker (compat_tests/differential has the same cases)."""

from __future__ import annotations

import trio

from strom.broker.coordinator.txn.metadata import MAX_EPOCH, TxnState
from strom.broker.coordinator.txn.tests.test_coordinator import TID, add_partitions, init, read, settled, txn_batch
from strom.broker.tests.test_apis import create, produce_body
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_batches
from strom.protocol.schema import ApiKey
from strom.testing.faults import request_faults


async def produce(client, topic, records, version=12, tid=TID, partition=0):
    body = produce_body(topic, records, partition)
    body["transactional_id"] = tid
    response = await client.request(ApiKey.PRODUCE, version, body)
    return response.responses[0].partition_responses[0].error_code


async def end(client, pid, epoch, commit, version=5, tid=TID):
    r = await client.request(
        ApiKey.END_TXN,
        version,
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
    )
    return (r.error_code, r.producer_id, r.producer_epoch) if version >= 5 else r.error_code


async def markers(client, topic):
    """(producer id, epoch) of every control batch in the partition."""
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
        ],
    }
    response = await client.request(ApiKey.FETCH, 11, body)
    data = bytes(response.responses[0].partitions[0].records or b"")
    out = []
    for _pos, h in iter_batches(data):
        if h.is_control:
            out.append((h.producer_id, h.producer_epoch))
    return out


async def test_every_transaction_bumps_the_epoch_and_the_markers_carry_it(env):
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    # Produce v12: no AddPartitionsToTxn, the partition leader adds the partition
    assert await produce(client, "t", txn_batch(pid, 0, 0, [b"a"])) == ErrorCode.NONE
    meta = broker.txn.state.txns[TID]
    assert (meta.state, meta.partitions, meta.client_transaction_version) == (TxnState.ONGOING, {("t", 0)}, 2)
    assert await end(client, pid, 0, True) == (ErrorCode.NONE, pid, 1)
    await settled(broker)
    assert await markers(client, "t") == [(pid, 1)]  # the marker fences epoch 0
    _, values = await read(client, "t", committed=True)
    assert values == [b"a"]
    # the next transaction: epoch 1 from sequence 0; a zombie batch of epoch 0 is fenced
    assert await produce(client, "t", txn_batch(pid, 0, 1, [b"late"])) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await produce(client, "t", txn_batch(pid, 1, 0, [b"b"])) == ErrorCode.NONE
    assert await end(client, pid, 1, False) == (ErrorCode.NONE, pid, 2)
    await settled(broker)
    assert await markers(client, "t") == [(pid, 1), (pid, 2)]
    part, values = await read(client, "t", committed=True)  # the client drops what aborted_transactions names
    assert values == [b"a", b"b"] and [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 2)]
    described = await client.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TID]})
    state = described.transaction_states[0]
    assert (state.transaction_state, state.producer_id, state.producer_epoch) == ("CompleteAbort", pid, 2)


async def test_retries_fencing_and_aborts_with_nothing_added_answer_as_kafka(env):
    broker, client, restart = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    assert await end(client, pid, 0, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)  # nothing to commit
    assert await end(client, pid, 0, False) == (ErrorCode.NONE, pid, 1)  # an empty abort ends at once
    assert broker.txn.state.txns[TID].state == TxnState.COMPLETE_ABORT
    assert await produce(client, "t", txn_batch(pid, 1, 0, [b"a"])) == ErrorCode.NONE
    assert await end(client, pid, 1, True) == (ErrorCode.NONE, pid, 2)
    await settled(broker)
    assert await end(client, pid, 1, True) == (ErrorCode.NONE, pid, 2)  # a retry: answered as done
    assert await end(client, pid, 1, False) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert await end(client, pid, 2, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)  # no new transaction
    assert await end(client, pid, 0, True) == (ErrorCode.PRODUCER_FENCED, -1, -1)
    assert await end(client, pid + 1, 2, True) == (ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert await end(client, pid, 1, True, version=4) == ErrorCode.PRODUCER_FENCED  # classic: epochs must match
    assert await end(client, pid, 2, False) == (ErrorCode.NONE, pid, 3)  # abort of a new, empty one
    broker, client = await restart()  # the TV2 fields survive in __transaction_state
    meta = broker.txn.state.txns[TID]
    assert (meta.producer_epoch, meta.client_transaction_version, meta.state) == (3, 2, TxnState.COMPLETE_ABORT)
    # KIP-360 InitProducerId after TV2: the current epoch is bumped, the one before it is a retry
    r = await init(client, pid=pid, epoch=3)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, pid, 4)


async def test_epoch_exhaustion_rolls_over_to_a_new_producer_id(env):
    broker, client, restart = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    old = MAX_EPOCH - 1  # 32766: the last epoch a producer may use
    broker.txn.state.txns[TID].producer_epoch = old
    assert await produce(client, "t", txn_batch(pid, old, 0, [b"last"])) == ErrorCode.NONE
    error, new_pid, epoch = await end(client, pid, old, True)
    assert error == ErrorCode.NONE and new_pid != pid and epoch == 0
    await settled(broker)
    assert await markers(client, "t") == [(pid, MAX_EPOCH)]  # the old id's last marker, at 32767
    meta = broker.txn.state.txns[TID]
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id) == (new_pid, 0, pid)
    assert await end(client, pid, old, True) == (ErrorCode.NONE, new_pid, 0)  # the retry learns the new id
    assert await produce(client, "t", txn_batch(pid, old, 1, [b"zombie"])) != ErrorCode.NONE
    broker, client = await restart()
    assert broker.txn.state.txns[TID].producer_id == new_pid
    assert await produce(client, "t", txn_batch(new_pid, 0, 0, [b"next"])) == ErrorCode.NONE
    assert await end(client, new_pid, 0, True) == (ErrorCode.NONE, new_pid, 1)
    await settled(broker)
    _, values = await read(client, "t", committed=True)
    assert values == [b"last", b"next"]


async def test_a_batch_of_the_next_transaction_waits_for_the_markers_of_the_last(env):
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    release = trio.Event()
    original = broker.txn.markers.write_markers

    async def held(*args, **kwargs):
        await release.wait()
        return await original(*args, **kwargs)

    broker.txn.markers.write_markers = held
    assert await produce(client, "t", txn_batch(pid, 0, 0, [b"a"])) == ErrorCode.NONE
    assert await end(client, pid, 0, True) == (ErrorCode.NONE, pid, 1)  # PrepareCommit, markers held
    # epoch 1 must not join the epoch-0 transaction still open in the partition: retriable refusal
    assert await produce(client, "t", txn_batch(pid, 1, 0, [b"b"])) == ErrorCode.NOT_ENOUGH_REPLICAS
    release.set()
    await settled(broker)
    assert await produce(client, "t", txn_batch(pid, 1, 0, [b"b"])) == ErrorCode.NONE
    assert await end(client, pid, 1, False) == (ErrorCode.NONE, pid, 2)
    await settled(broker)
    part, values = await read(client, "t", committed=True)
    assert values == [b"a", b"b"] and [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 2)]


async def test_classic_producers_still_verify_and_keep_their_epoch(env):
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    # no AddPartitionsToTxn: v9/v10 INVALID_TXN_STATE, v11 TRANSACTION_ABORTABLE (as Kafka 4.0)
    assert await produce(client, "t", txn_batch(pid, 0, 0, [b"x"]), version=9) == ErrorCode.INVALID_TXN_STATE
    assert await produce(client, "t", txn_batch(pid, 0, 0, [b"x"]), version=11) == ErrorCode.TRANSACTION_ABORTABLE
    assert (
        await produce(client, "t", txn_batch(pid, 0, 0, [b"x"]), tid="other") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert await add_partitions(client, pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.NONE}
    assert await produce(client, "t", txn_batch(pid, 0, 0, [b"x"]), version=11) == ErrorCode.NONE
    assert await end(client, pid, 0, True, version=3) == ErrorCode.NONE
    await settled(broker)
    assert await markers(client, "t") == [(pid, 0)]  # no bump
    assert broker.txn.state.txns[TID].producer_epoch == 0


async def txn_offset_commit(client, pid, epoch, version, tid=TID, group="g"):
    r = await client.request(
        ApiKey.TXN_OFFSET_COMMIT,
        version,
        {
            "transactional_id": tid,
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
                            "committed_offset": 7,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    return r.topics[0].partitions[0].error_code


async def test_txn_offset_commit_v5_adds_the_offsets_partition_itself(env):
    broker, client, _ = env
    await create(client, "t")
    await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
    pid = (await init(client)).producer_id
    assert await txn_offset_commit(client, 4242, 0, 5, tid="nobody") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert await txn_offset_commit(client, pid, 3, 5) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert await txn_offset_commit(client, pid, 0, 4) == ErrorCode.TRANSACTION_ABORTABLE  # classic: not added
    assert await txn_offset_commit(client, pid, 0, 3) == ErrorCode.INVALID_TXN_STATE
    assert await txn_offset_commit(client, pid, 0, 5) == ErrorCode.NONE  # no AddOffsetsToTxn needed
    assert broker.txn.state.txns[TID].partitions == {broker.txn.offsets_partition("g")}
    assert await end(client, pid, 0, True) == (ErrorCode.NONE, pid, 1)
    await settled(broker)
    fetched = await client.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": None, "require_stable": True})
    assert fetched.topics[0].partitions[0].committed_offset == 7


async def test_an_unreachable_coordinator_refuses_the_first_batch_as_retriable(env):
    """In a cluster, a transactional id coordinated elsewhere that cannot be asked: the batch is
    refused with NOT_ENOUGH_REPLICAS (Kafka's answer), never accepted unverified."""
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    state = broker.txn.state
    state.ownership_error = lambda tid: ErrorCode.NOT_COORDINATOR
    state.coordinator_of = lambda tid: 99  # a broker nobody can reach
    for version in (9, 11, 12):
        assert (
            await produce(client, "t", txn_batch(pid, 0, 0, [b"x"]), version=version) == ErrorCode.NOT_ENOUGH_REPLICAS
        )
    assert await txn_offset_commit(client, pid, 0, 5) in (
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    )
    _, values = await read(client, "t", committed=False)
    assert values == []


async def test_a_version_cap_below_kafka_4_hides_transaction_version_2(env):
    """A broker capped to Kafka 3.9's versions (strom.testing faults) cannot serve EndTxn v5 or
    Produce v12, so it must not tell clients to use transaction version 2."""
    broker, client, _ = env

    async def finalized():
        r = await client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        return {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features}

    assert (await finalized())["transaction.version"] == (2, 2)
    injector = request_faults(broker)
    injector.cap_versions("3.9")
    assert "transaction.version" not in await finalized()
    injector.cap_versions("4.0")
    assert (await finalized())["transaction.version"] == (2, 2)
    injector.cap_versions(None)

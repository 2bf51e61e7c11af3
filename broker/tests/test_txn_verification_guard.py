"""A transactional batch verified with the transaction coordinator is refused when a marker ended
the transaction while the answer was awaited (Kafka's VerificationGuard, KIP-890 part 1).

The race: a producer's first batch to a partition waits for the coordinator (another broker with
AddPartitionsToTxn v4/v5, or this broker's own coordinator adding the partition for Produce v12);
meanwhile the coordinator aborts the transaction and its marker reaches the partition. Appending
the batch after that marker would open a transaction the coordinator already considers ended:
the last stable offset would stay behind it forever and read_committed consumers would stall.
Kafka's log refuses it with INVALID_TXN_STATE ("Record was not part of an ongoing transaction").
"""

from __future__ import annotations

import pytest
import trio

from strom.broker.coordinator.txn.tests.test_coordinator import TID, add_partitions, init, txn_batch
from strom.broker.tests.helpers import open_client
from strom.broker.tests.test_apis import create, fetch_body
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_apis import produce_body


class HeldAnswer:
    """Stands in for the coordinator's answer: records the question, answers NONE once released."""

    def __init__(self) -> None:
        self.asked = trio.Event()
        self.release = trio.Event()
        self.questions: list = []

    async def __call__(self, tid, pid, epoch, partitions, **kwargs):
        self.questions.append((tid, pid, epoch, set(partitions) if not isinstance(partitions, set) else partitions))
        self.asked.set()
        await self.release.wait()
        if isinstance(partitions, set):  # add_partitions (local coordinator, transaction version 2)
            return ErrorCode.NONE
        return {tp: ErrorCode.NONE for tp in partitions}


async def write_abort_marker(client, pid: int, epoch: int) -> int:
    response = await client.request(
        ApiKey.WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "transaction_result": False,
                    "coordinator_epoch": 0,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                }
            ]
        },
    )
    return response.markers[0].topics[0].partitions[0].error_code


async def offsets(client) -> tuple[int, int]:
    body = fetch_body("t", 0)
    body["isolation_level"] = 1
    part = (await client.request(ApiKey.FETCH, 11, body)).responses[0].partitions[0]
    return part.high_watermark, part.last_stable_offset


@pytest.mark.parametrize("coordinator, version", [("elsewhere", 9), ("elsewhere", 11), ("elsewhere", 12), ("here", 12)])
@pytest.mark.parametrize("marker_meanwhile", [True, False])
async def test_a_marker_written_during_verification_refuses_the_batch(
    env, nursery, coordinator, version, marker_meanwhile
):
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    assert await add_partitions(client, pid, 0, {"t": [0]}) == {("t", 0): ErrorCode.NONE}
    held = HeldAnswer()
    if coordinator == "elsewhere":  # the transactional id is coordinated by another broker
        broker.txn.state.ownership_error = lambda tid: ErrorCode.NOT_COORDINATOR
        broker.txn.ask_elsewhere = held
    else:  # Produce v12 with this broker's coordinator: adding the partition is persisted first
        broker.txn.add_partitions = held
    producer = open_client(broker, nursery)
    answer = {}

    async def send_batch():
        body = produce_body("t", txn_batch(pid, 0, 0, [b"late"]))
        body["transactional_id"] = TID
        response = await producer.request(ApiKey.PRODUCE, version, body)
        answer["part"] = response.responses[0].partition_responses[0]

    nursery.start_soon(send_batch)
    with trio.fail_after(10):
        await held.asked.wait()
    assert held.questions == [(TID, pid, 0, {("t", 0)})]
    if marker_meanwhile:  # the coordinator aborted the transaction: its marker arrives first
        assert await write_abort_marker(client, pid, 0) == ErrorCode.NONE
    held.release.set()
    with trio.fail_after(10):
        while "part" not in answer:
            await trio.sleep(0.01)
    part = answer["part"]
    plog = broker.replicas.partition("t", 0).log
    if marker_meanwhile:
        assert part.error_code == ErrorCode.INVALID_TXN_STATE
        assert part.error_message == "Record was not part of an ongoing transaction"
        assert await offsets(client) == (1, 1)  # only the marker: nothing holds the LSO back
        assert not plog.producer_state.ongoing
    else:
        assert (part.error_code, part.base_offset) == (ErrorCode.NONE, 0)
        assert await offsets(client) == (1, 0)  # the transaction is open
        assert plog.producer_state.ongoing == {pid: 0}
    assert not plog.producer_state.verifications  # the marker or the append dropped the guard


async def test_a_verification_that_no_append_follows_expires(env):
    """A guard whose batch never came (the client gave up) goes with producer.id.expiration.ms."""
    broker, client, _ = env
    await create(client, "t")
    plog = broker.replicas.partition("t", 0).log
    guard = plog.verification_guard(4242)
    assert plog.verification_guard(4242) is guard  # a second verification in flight shares it
    plog.producer_state.remove_expired(guard.created_ms + 999, 1000)
    assert plog.producer_state.verifications == {4242: guard}
    plog.producer_state.remove_expired(guard.created_ms + 1000, 1000)
    assert not plog.producer_state.verifications


@pytest.mark.parametrize("version", [3, 5])
@pytest.mark.parametrize("marker_meanwhile", [True, False])
async def test_a_marker_written_while_a_txn_offset_commit_is_verified_refuses_the_commit(
    env, nursery, version, marker_meanwhile
):
    """The same race for TxnOffsetCommit: the group's `__consumer_offsets` partition is verified with
    a transaction coordinator on another broker (v3: is it in the transaction? v5: add it); its
    abort marker reaches the offsets partition meanwhile. Appended after the marker, the commit
    would open a transaction there that nothing ends: the offsets partition's last stable offset
    stuck and the offsets pending for ever."""
    from strom.broker.coordinator.group.coordinator import OFFSETS_TOPIC

    from .test_txn_offset_commit_verification import nothing_pending, txn_commit

    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})  # creates the offsets topic
    index = broker.groups.partition_of("g")
    held = HeldAnswer()
    broker.txn.state.ownership_error = lambda tid: ErrorCode.NOT_COORDINATOR  # coordinated elsewhere
    broker.txn.ask_elsewhere = held
    answer = {}

    async def commit():
        answer["code"] = await txn_commit(committer, pid, 0, version=version)

    committer = open_client(broker, nursery)  # (one connection answers in order: the marker goes on another)

    nursery.start_soon(commit)
    with trio.fail_after(10):
        await held.asked.wait()
    assert held.questions == [(TID, pid, 0, {(OFFSETS_TOPIC, index)})]
    olog = broker.replicas.partition(OFFSETS_TOPIC, index).log
    if marker_meanwhile:
        response = await client.request(
            ApiKey.WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": pid,
                        "producer_epoch": 0,
                        "transaction_result": False,
                        "coordinator_epoch": 0,
                        "topics": [{"name": OFFSETS_TOPIC, "partition_indexes": [index]}],
                    }
                ]
            },
        )
        assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.NONE
    held.release.set()
    with trio.fail_after(10):
        while "code" not in answer:
            await trio.sleep(0.01)
    if marker_meanwhile:
        assert answer["code"] == ErrorCode.INVALID_TXN_STATE
        assert not olog.producer_state.ongoing  # nothing holds the offsets partition's LSO back
        assert await nothing_pending(client)
    else:
        assert answer["code"] == ErrorCode.NONE
        assert olog.producer_state.ongoing == {pid: olog.log_end_offset - 1}
    assert not olog.producer_state.verifications

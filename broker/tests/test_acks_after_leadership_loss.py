"""An append that waits for the in-sync replicas never succeeds after this broker lost the leadership
it was appended under (issue 21).

The scenario, as a review found it on a 3-broker cluster: a leader appends an acks=all batch, its
followers have not fetched it yet, the leader pauses past its ZooKeeper session, a new leader takes
over and writes its own records. The old leader resumes, follows the new leader, truncates the
batch and copies the new leader's record into the same offset, with a high watermark beyond it.
The waiting request must then be answered NOT_LEADER_OR_FOLLOWER (the client retries with the new
leader), never NONE with the offset of a record that exists nowhere.

Here an in-process broker's partition is driven through the same steps the cluster layer takes
(``become_follower``/``become_leader``, ``Log.truncate_to``, ``append_as_follower``, a follower's
high watermark) while the request waits: Produce acks=all, WriteTxnMarkers, the transaction
coordinator's own marker writes, a transaction state write and OffsetCommit.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace as NS

import pytest
import trio
import trio.testing

from strom.broker.coordinator.txn.markers import TransactionMarkerChannelManager
from strom.broker.coordinator.txn.metadata import TransactionMetadata
from strom.broker.coordinator.txn.state_manager import TRANSACTION_STATE_TOPIC
from strom.broker.coordinator.txn.tests.test_coordinator import init
from strom.broker.replica.manager import ReplicaManager
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch, validate_batches
from strom.protocol.schema import ApiKey
from strom.storage.config import LogConfig
from strom.storage.log import Log

from .helpers import make_broker, open_client
from .test_apis import create, produce_body
from .test_txn_offset_commit_verification import add_offsets, txn_commit

NEW_LEADER = 7  # a broker id this in-process broker is not


def lead_with_a_lagging_follower(broker, topic: str, index: int = 0):
    """Make this broker lead ``topic``-``index`` in a new epoch with an in-sync follower that has
    fetched nothing, so every acks=all append waits."""
    partition = broker.replicas.partition(topic, index)
    epoch = partition.leader_epoch + 1
    partition.log.leader_epoch_cache.assign(epoch, partition.log.log_end_offset)
    partition.become_leader(epoch, [broker.node_id, NEW_LEADER], [broker.node_id, NEW_LEADER], version=0)
    return partition


def replaced_by_new_leader(broker, partition, truncate_at: int, *, lead_again: bool = False) -> None:
    """What a returning old leader does: follow the new leader (epoch + 1), truncate its divergent
    tail, copy the new leader's records into the same offsets and take its high watermark beyond
    them; with ``lead_again``, become leader once more in a later epoch (alone in the ISR, so its
    high watermark is its log end)."""
    epoch = partition.leader_epoch + 1
    partition.become_follower(NEW_LEADER, epoch, partition.replicas, [NEW_LEADER], version=1)
    partition.log.truncate_to(truncate_at)
    theirs = bytearray(
        build_batch(
            [Record(i, 0, b"new", b"leader %d" % i) for i in range(3)],
            base_offset=truncate_at,
            partition_leader_epoch=epoch,
        )
    )
    partition.log.append_as_follower(theirs, validate_batches(theirs))
    partition.log.high_watermark = partition.log.log_end_offset
    if lead_again:
        partition.log.leader_epoch_cache.assign(epoch + 1, partition.log.log_end_offset)
        partition.become_leader(epoch + 1, partition.replicas, [broker.node_id], version=2)
    broker.replicas.notify_data([(partition.topic, partition.index)])


class Waiting:
    """A request started in the background that waits inside the broker; ``answer()`` its result."""

    def __init__(self, nursery, request) -> None:
        self._done = trio.Event()
        self._value = None
        nursery.start_soon(self._run, request)

    async def _run(self, request) -> None:
        self._value = await request()
        self._done.set()

    @property
    def answered(self) -> bool:
        return self._done.is_set()

    async def until_appended(self, partition, end: int) -> Waiting:
        """Once the request's records reach the log (offset ``end``), and it still waits."""
        with trio.fail_after(10):
            while partition.log.log_end_offset < end:
                await trio.sleep(0.005)
        await trio.sleep(0.05)
        assert not self.answered, "answered before any follower fetched"
        return self

    async def answer(self):
        with trio.fail_after(10):
            await self._done.wait()
        return self._value


@pytest.fixture
def broker(tmp_path):
    b = make_broker(tmp_path / "data", transaction_state_log_num_partitions=1, offsets_topic_num_partitions=1)
    yield b
    b.close()


def produce_request(client, value: bytes, n: int = 1, version: int = 10):
    body = produce_body("t", build_batch([Record(i, 0, b"k", value) for i in range(n)]))
    body["timeout_ms"] = 30_000

    async def request():
        return (await client.request(ApiKey.PRODUCE, version, body)).responses[0].partition_responses[0]

    return request


@pytest.mark.parametrize("lead_again", [False, True], ids=["follower", "leader-again-later-epoch"])
async def test_acks_all_produce_is_not_acknowledged_after_losing_leadership(broker, nursery, lead_again):
    client = open_client(broker, nursery)
    await create(client, "t")
    partition = lead_with_a_lagging_follower(broker, "t")
    waiting = await Waiting(nursery, produce_request(client, b"mine")).until_appended(partition, 1)
    replaced_by_new_leader(broker, partition, 0, lead_again=lead_again)
    assert partition.high_watermark >= 1  # what the old wait looked at
    p = await waiting.answer()
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.base_offset == -1
    # where the partition's leadership is now, as this broker knows it (KIP-951)
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (partition.leader_id, partition.leader_epoch)


async def test_acks_all_produce_still_succeeds_when_the_follower_catches_up(broker, nursery):
    """The ordinary case is unchanged: the follower fetches, the high watermark passes, NONE."""
    client = open_client(broker, nursery)
    await create(client, "t")
    partition = lead_with_a_lagging_follower(broker, "t")
    waiting = await Waiting(nursery, produce_request(client, b"v", 2, version=9)).until_appended(partition, 2)
    broker.replicas.follower_fetched(partition, NEW_LEADER, 2)
    p = await waiting.answer()
    assert (p.error_code, p.base_offset) == (ErrorCode.NONE, 0)


async def test_write_txn_markers_is_not_acknowledged_after_losing_leadership(broker, nursery):
    client = open_client(broker, nursery)
    await create(client, "t")
    partition = lead_with_a_lagging_follower(broker, "t")

    async def write():
        response = await client.request(
            ApiKey.WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": 4000,
                        "producer_epoch": 0,
                        "transaction_result": True,
                        "topics": [{"name": "t", "partition_indexes": [0]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
        return response.markers[0].topics[0].partitions[0]

    waiting = await Waiting(nursery, write).until_appended(partition, 1)
    replaced_by_new_leader(broker, partition, 0)
    assert (await waiting.answer()).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def _new_leader_runtime(broker):
    """The broker's own coordinator runtime, but broker NEW_LEADER has an address (this broker is
    standalone)."""
    runtime = copy.copy(broker.coordinator_runtime)
    endpoint = runtime.endpoint
    runtime.endpoint = lambda broker_id: ("127.0.0.1", 9) if broker_id == NEW_LEADER else endpoint(broker_id)
    return runtime


class _RecordingClient:
    """Answers every WriteTxnMarkers NONE and remembers what it was sent."""

    def __init__(self, sent: list) -> None:
        self.sent = sent

    async def request(self, api_key, version, body, timeout_s=None):
        self.sent.append(body)
        marker = body["markers"][0]
        return NS(
            markers=[
                NS(
                    topics=[
                        NS(
                            name=t["name"],
                            partitions=[
                                NS(partition_index=i, error_code=ErrorCode.NONE) for i in t["partition_indexes"]
                            ],
                        )
                        for t in marker["topics"]
                    ]
                )
            ]
        )

    async def close(self) -> None:
        pass


async def test_coordinator_resends_a_local_marker_whose_leadership_was_lost(broker, nursery):
    client = open_client(broker, nursery)
    await create(client, "t")
    partition = lead_with_a_lagging_follower(broker, "t")
    sent: list = []
    channel = TransactionMarkerChannelManager(_new_leader_runtime(broker), lambda host, port: _RecordingClient(sent))

    async def write():
        return await channel.write_markers(4000, 0, True, 0, {("t", 0)}, lambda: True)

    waiting = await Waiting(nursery, write).until_appended(partition, 1)
    replaced_by_new_leader(broker, partition, 0)
    assert await waiting.answer() is True
    # counted done only once the new leader took the marker
    assert [m["topics"] for b in sent for m in b["markers"]] == [[{"name": "t", "partition_indexes": [0]}]]


async def test_transaction_state_write_answers_not_coordinator_after_losing_leadership(broker, nursery):
    client = open_client(broker, nursery)
    await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "tx", "key_type": 1})  # creates the topic
    state = broker.txn.state
    index = state.partition_of("tx")
    partition = lead_with_a_lagging_follower(broker, TRANSACTION_STATE_TOPIC, index)
    state.owned[index] = partition.leader_epoch  # as follow_leadership records a newly led partition
    start = partition.log.log_end_offset

    async def write():
        return await state.write("tx", TransactionMetadata("tx", 5000, 0, 60_000))

    waiting = await Waiting(nursery, write).until_appended(partition, start + 1)
    replaced_by_new_leader(broker, partition, start)
    assert await waiting.answer() == ErrorCode.NOT_COORDINATOR


async def test_offset_commit_answers_not_coordinator_after_losing_leadership(broker, nursery):
    client = open_client(broker, nursery)
    await create(client, "t")
    await client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})  # creates the offsets topic
    index = broker.groups.partition_of("g")
    partition = lead_with_a_lagging_follower(broker, "__consumer_offsets", index)
    start = partition.log.log_end_offset

    async def commit():
        response = await client.request(
            ApiKey.OFFSET_COMMIT,
            8,
            {
                "group_id": "g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 1,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        )
        return response.topics[0].partitions[0]

    waiting = await Waiting(nursery, commit).until_appended(partition, start + 1)
    replaced_by_new_leader(broker, partition, start)
    assert (await waiting.answer()).error_code == ErrorCode.NOT_COORDINATOR


# ----------------------------------------------------------------- the waits themselves


def _hosted(tmp_path, manager=None):
    manager = manager or ReplicaManager(node_id=1)
    partition = manager.add(
        "t", 0, Log.open(tmp_path / "t-0", LogConfig()), leader=1, leader_epoch=0, replicas=[1, 2], isr=[1, 2]
    )
    partition.become_leader(3, [1, 2], [1, 2], version=0)
    data = bytearray(build_batch([Record(0, 0, b"k", b"v")]))
    partition.append(data, validate_batches(data))
    return manager, partition


def test_a_pending_append_fails_once_the_partition_is_removed_or_replaced(tmp_path):
    from strom.broker.replica.purgatory import PendingAppend  # imported here: the other tests run on older code too

    manager, partition = _hosted(tmp_path)
    pending = PendingAppend.of(partition, 1)
    assert pending.status() is None
    manager.remove("t", 0)
    assert pending.status() == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # hosted again (deleted and re-created): a new replica, even if it leads in the same epoch
    again = manager.add("t", 0, partition.log, leader=1, leader_epoch=3, replicas=[1], isr=[1])
    assert again.high_watermark >= 1 and again.leads(3)
    assert pending.status() == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("change", ["follower", "leader-later-epoch", "removed"])
async def test_leadership_changes_wake_the_waiters_of_the_partition(tmp_path, change):
    manager, partition = _hosted(tmp_path)
    woken = trio.Event()

    async def waiter():
        await manager.wait_for_data([("t", 0)])
        woken.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        if change == "follower":
            partition.become_follower(2, 4, [1, 2], [2], version=1)
        elif change == "leader-later-epoch":
            partition.become_leader(4, [1, 2], [1], version=1)
        else:
            manager.remove("t", 0)
        with trio.move_on_after(1):
            await woken.wait()
        assert woken.is_set(), f"{change} did not wake the partition's waiters"
        nursery.cancel_scope.cancel()


async def _txn_commit_waiting(env, nursery):
    """A producer's TxnOffsetCommit waiting for the offsets partition's lagging follower:
    (broker, the partition, where the commit starts, the waiting request)."""
    broker, client, _ = env
    await create(client, "t")
    pid = (await init(client)).producer_id
    assert await add_offsets(client, pid, 0) == ErrorCode.NONE
    partition = lead_with_a_lagging_follower(broker, "__consumer_offsets", broker.groups.partition_of("g"))
    start = partition.log.log_end_offset

    async def commit():
        return await txn_commit(client, pid, 0)

    return broker, partition, start, await Waiting(nursery, commit).until_appended(partition, start + 1)


async def test_txn_offset_commit_waits_for_the_replicas_and_fails_after_losing_leadership(env, nursery):
    """TxnOffsetCommit is answered once the offsets partition's in-sync replicas have the commit, as
    Kafka's group coordinator answers it; a commit whose leadership was lost meanwhile answers
    NOT_COORDINATOR, so the producer sends it to the new coordinator before it commits the
    transaction (answered NONE at once, its offsets could be gone when the COMMIT marker came)."""
    broker, partition, start, waiting = await _txn_commit_waiting(env, nursery)
    replaced_by_new_leader(broker, partition, start)
    assert await waiting.answer() == ErrorCode.NOT_COORDINATOR


async def test_txn_offset_commit_is_answered_once_the_follower_has_it(env, nursery):
    broker, partition, _, waiting = await _txn_commit_waiting(env, nursery)
    partition.record_follower_fetch(NEW_LEADER, partition.log.log_end_offset)
    partition.maybe_advance_high_watermark()
    broker.replicas.notify_data([(partition.topic, partition.index)])
    assert await waiting.answer() == ErrorCode.NONE

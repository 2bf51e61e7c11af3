"""Leader-side replication state: the high watermark follows the slowest in-sync replica."""

from __future__ import annotations

import pytest
import trio

from strom.broker.replica.manager import ReplicaManager
from strom.broker.replica.partition import now_ms
from strom.broker.replica.purgatory import DataWaiters
from strom.protocol.records.batch import Record, build_batch, validate_batches
from strom.storage.config import LogConfig
from strom.storage.log import Log


def _append(partition, n: int) -> None:
    data = bytearray(build_batch([Record(i, 0, b"k", b"v") for i in range(n)]))
    partition.append(data, validate_batches(data))


def _leader(tmp_path, isr):
    manager = ReplicaManager(node_id=1)
    partition = manager.add(
        "t", 0, Log.open(tmp_path / "t-0", LogConfig()), leader=1, leader_epoch=0, replicas=[1, 2, 3], isr=list(isr)
    )
    partition.become_leader(3, [1, 2, 3], list(isr), version=0)
    return partition


def test_standalone_partition_commits_on_append(tmp_path):
    manager = ReplicaManager(node_id=0)
    partition = manager.add("t", 0, Log.open(tmp_path / "t-0", LogConfig()))
    _append(partition, 5)
    assert partition.high_watermark == 5 == partition.log.log_end_offset


def test_high_watermark_waits_for_every_in_sync_follower(tmp_path):
    partition = _leader(tmp_path, [1, 2, 3])
    _append(partition, 10)
    assert partition.high_watermark == 0
    partition.record_follower_fetch(2, 10)
    assert not partition.maybe_advance_high_watermark()
    partition.record_follower_fetch(3, 4)
    assert partition.maybe_advance_high_watermark() and partition.high_watermark == 4
    partition.record_follower_fetch(3, 10)
    partition.maybe_advance_high_watermark()
    assert partition.high_watermark == 10


def test_high_watermark_ignores_replicas_outside_the_isr_and_never_moves_back(tmp_path):
    partition = _leader(tmp_path, [1, 2])
    _append(partition, 6)
    partition.record_follower_fetch(2, 6)
    partition.maybe_advance_high_watermark()
    assert partition.high_watermark == 6
    partition.isr = [1, 2, 3]  # a replica rejoins behind: the HW stays where it was
    partition.record_follower_fetch(3, 2)
    partition.maybe_advance_high_watermark()
    assert partition.high_watermark == 6


def test_lagging_and_caught_up_replicas(tmp_path):
    partition = _leader(tmp_path, [1, 2, 3])
    _append(partition, 3)
    partition.record_follower_fetch(2, 3)
    partition.followers[3].last_caught_up_ms = now_ms() - 60_000
    assert partition.lagging_replicas(30_000) == [3]
    partition.isr = [1, 2]
    partition.maybe_advance_high_watermark()
    partition.record_follower_fetch(3, 3)
    assert partition.caught_up_replicas() == [3]


def test_a_follower_rejoins_only_at_the_start_of_the_leaders_epoch(tmp_path):
    """KAFKA-7128: a new leader's high watermark may lag its log (here 4, with 10 records from
    before it led). A follower at 6 has reached the high watermark but not offset 10, where this
    leader's epoch starts: admitted now, it could be elected without records 6-9 that the old
    ISR may have committed. It rejoins once it has them."""
    partition = _leader(tmp_path, [1, 2])
    _append(partition, 10)
    partition.log.high_watermark = 4
    partition.become_leader(4, [1, 2, 3], [1, 2], version=1)
    assert partition.leader_epoch_start_offset == 10 and partition.high_watermark == 4
    partition.record_follower_fetch(3, 6)
    assert partition.caught_up_replicas() == []
    partition.record_follower_fetch(3, 10)
    assert partition.caught_up_replicas() == [3]
    partition.become_follower(2, 5, [1, 2, 3], [1, 2], version=2)
    assert partition.caught_up_replicas() == []  # only a leader admits followers


def test_a_follower_one_fetch_behind_a_steady_load_stays_in_sync(tmp_path, monkeypatch):
    """As Kafka: a follower is caught up as of its previous fetch when it now fetches from the log
    end offset the leader had then. Under a steady load it never fetches from the current log end
    (records keep arriving between its fetches), yet it is in sync; a follower that falls
    further behind is not."""
    import strom.broker.replica.partition as rm

    clock = [0]
    monkeypatch.setattr(rm, "now_ms", lambda: clock[0])
    partition = _leader(tmp_path, [1, 2, 3])
    fetched = 0
    for second in range(1, 61):  # 10 records a second; each fetch gets the previous second's
        clock[0] = second * 1000
        _append(partition, 10)
        partition.record_follower_fetch(2, fetched)
        partition.record_follower_fetch(3, min(fetched, 20))  # stuck at 20
        fetched = partition.log.log_end_offset  # follower 2 got all of it: its next fetch starts there
    assert partition.followers[2].last_caught_up_ms == 59_000
    assert partition.lagging_replicas(30_000) == [3]
    assert partition.followers[3].last_caught_up_ms == 2_000  # the fetch at 20 had all of second 2


def test_a_follower_at_the_log_end_of_an_idle_partition_is_in_sync(tmp_path, monkeypatch):
    """As Kafka's isCaughtUp: a follower whose log end is the leader's is in sync however long
    since it last fetched (nothing was written); once the leader appends, the lag time counts."""
    import strom.broker.replica.partition as rm

    clock = [1000]
    monkeypatch.setattr(rm, "now_ms", lambda: clock[0])
    partition = _leader(tmp_path, [1, 2])
    _append(partition, 3)
    partition.record_follower_fetch(2, 3)
    clock[0] += 60_000
    assert partition.lagging_replicas(30_000) == []
    _append(partition, 1)
    assert partition.lagging_replicas(30_000) == [2]


def test_the_new_leader_epoch_starts_at_the_log_end(tmp_path):
    partition = _leader(tmp_path, [1])
    _append(partition, 4)
    partition.log.leader_epoch_cache.assign(4, partition.log.log_end_offset)
    partition.become_leader(4, [1, 2, 3], [1], version=1)
    assert partition.log.end_offset_for_epoch(3) == (3, 4)


# ----------------------------------------------------------------- who is woken by what


async def _waiting(waiters: DataWaiters, partitions, woken: list, name: str) -> None:
    await waiters.wait(partitions)
    woken.append(name)


async def test_a_change_to_one_partition_wakes_only_its_waiters_and_those_of_any(nursery, autojump_clock):
    waiters, woken = DataWaiters(), []
    nursery.start_soon(_waiting, waiters, [("a", 0)], woken, "a0")
    nursery.start_soon(_waiting, waiters, [("a", 1), ("b", 0)], woken, "a1+b0")
    nursery.start_soon(_waiting, waiters, None, woken, "any")
    await trio.sleep(1)
    assert waiters.waiting() == 3
    waiters.notify([("b", 0)])
    await trio.sleep(1)
    assert sorted(woken) == ["a1+b0", "any"] and waiters.waiting() == 1
    waiters.notify([("c", 0)])  # nobody waits on it
    await trio.sleep(1)
    assert sorted(woken) == ["a1+b0", "any"]
    waiters.notify()  # a change that may concern any partition wakes everybody
    await trio.sleep(1)
    assert sorted(woken) == ["a0", "a1+b0", "any"] and waiters.waiting() == 0


async def test_a_cancelled_wait_leaves_no_registration(autojump_clock):
    waiters = DataWaiters()
    with trio.move_on_after(1):
        await waiters.wait([("a", 0), ("a", 1)])
    with trio.move_on_after(1):
        await waiters.wait(None)
    assert waiters.waiting() == 0 and not waiters._by_partition and not waiters._any


# ----------------------------------------------------------------- a new leader's ListOffsets


def test_a_new_leader_answers_offset_not_available_until_its_high_watermark_reaches_its_epoch(tmp_path):
    """As Kafka: a consumer asking a new leader for the latest offset (or a timestamp found nothing
    below the high watermark for) while that leader's high watermark is below the offset its epoch
    started at gets OFFSET_NOT_AVAILABLE, retried, not an offset from a stale high watermark.
    Followers and the earliest offset are answered; it ends once the followers catch up."""
    from strom.broker.apis.list_offsets import EARLIEST, LATEST, OffsetNotAvailable, _offset

    manager = ReplicaManager(node_id=1)
    partition = manager.add(
        "t", 0, Log.open(tmp_path / "t-0", LogConfig()), leader=2, leader_epoch=3, replicas=[1, 2, 3], isr=[1, 2, 3]
    )
    partition.become_follower(2, 3, [1, 2, 3], [1, 2, 3], version=0)
    data = bytearray(build_batch([Record(i, 0, b"k", b"v") for i in range(5)], base_timestamp=1000))
    partition.log.append_as_follower(data, validate_batches(data))
    partition.log.high_watermark = 2  # what the old leader had told this follower
    assert _offset(partition, LATEST) == (-1, 2, 3)  # a follower is not asked by consumers anyway

    partition.become_leader(4, [1, 2, 3], [1, 2, 3], version=1)
    assert partition.leader_epoch_start_offset == 5 and partition.high_watermark == 2
    for timestamp in (LATEST, 1004):  # latest; a timestamp whose record is above the high watermark
        with pytest.raises(OffsetNotAvailable):
            _offset(partition, timestamp)
    assert _offset(partition, 1000)[1] == 0  # found below the high watermark: answered
    assert _offset(partition, EARLIEST)[1] == 0
    assert _offset(partition, LATEST, client=False) == (-1, 2, 4)  # not a consumer (replica_id >= 0)

    for follower in (2, 3):
        partition.record_follower_fetch(follower, 5)
    assert partition.maybe_advance_high_watermark() or partition.high_watermark == 5
    assert _offset(partition, LATEST) == (-1, 5, 4)

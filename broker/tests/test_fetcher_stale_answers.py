"""A follower's fetcher applies a leader's answer only to the fetch state it asked from (Kafka's
processFetchRequest drops an answer once the partition's leader epoch or fetch offset changed).

Found by the deterministic simulation (docs/simulation.md, finding 7, seed 30602): a restarted
broker asked its old leader, cut off by a partition, from offset 12 in epoch 0; leadership moved,
it truncated to 10 and fetched up to 36 from the new leader, was taken back into the ISR, and then
the old leader's answer arrived ("diverged at epoch 0, ends at 10") and was applied: the in-sync
replica cut its log to 10, below the high watermark 36."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from .helpers import make_broker, open_client
from .test_apis import batch, create
from .test_replication_quota import _Leader


class _StaleLeader:
    """Holds the follower's Fetch until released, then answers that it diverged at epoch 0 ending
    at offset 0 (what the old leader would say), for every partition asked for."""

    def __init__(self) -> None:
        self.asked = trio.Event()
        self.release = trio.Event()

    async def request(self, api_key, version, body, timeout_s=None):
        self.asked.set()
        await self.release.wait()
        answer = await _Leader(b"").request(api_key, version, body, timeout_s)
        for topic in answer.responses:
            for data in topic.partitions:
                data.high_watermark = 0
                data.diverging_epoch = SimpleNamespace(epoch=0, end_offset=0)
        return answer


async def _following_7(b, nursery):
    """Partition t-0 of broker ``b`` following broker 7 in epoch 1, and a fetcher for it."""
    from strom.broker.replica.fetcher import ReplicaFetcher

    await create(open_client(b, nursery), "t")
    follower = b.replicas.partition("t", 0)
    follower.become_follower(7, 1, [b.node_id, 7, 8], [7], 0)
    return follower, ReplicaFetcher(b.replicas, b.config, b.follower_quota, lambda leader: None)


async def test_an_answer_from_a_leader_the_partition_no_longer_follows_is_dropped(tmp_path, nursery):
    from strom.broker.fetch_session import FetchSessionHandler

    b = make_broker(tmp_path)
    try:
        follower, fetcher = await _following_7(b, nursery)
        await fetcher.fetch_once(_Leader(batch(3)), [follower], FetchSessionHandler())
        assert follower.log.log_end_offset == 3

        old_leader = _StaleLeader()
        async with trio.open_nursery() as inflight:
            inflight.start_soon(fetcher.fetch_once, old_leader, [follower], FetchSessionHandler())
            await old_leader.asked.wait()
            follower.become_follower(8, 2, [b.node_id, 7, 8], [8, b.node_id], 1)  # leadership moved meanwhile
            old_leader.release.set()
        assert follower.log.log_end_offset == 3, "an answer for an older leader epoch truncated the log"
    finally:
        b.close()


async def test_an_answer_for_a_fetch_offset_the_log_has_left_is_dropped(tmp_path, nursery):
    from strom.broker.fetch_session import FetchSessionHandler

    b = make_broker(tmp_path)
    try:
        follower, fetcher = await _following_7(b, nursery)
        stale = _StaleLeader()
        async with trio.open_nursery() as inflight:
            inflight.start_soon(fetcher.fetch_once, stale, [follower], FetchSessionHandler())
            await stale.asked.wait()
            # another fetch of the same leader epoch appended meanwhile
            await fetcher.fetch_once(_Leader(batch(3)), [follower], FetchSessionHandler())
            stale.release.set()
        assert follower.log.log_end_offset == 3
    finally:
        b.close()

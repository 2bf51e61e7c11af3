"""Fetch from follower (KIP-392): the leader's preferred read replica, a follower serving consumers
up to its own high watermark / last stable offset, and a follower's long polls woken by its
replica fetcher. One in-process broker plays leader or follower (its partition's state is set as
the cluster layer would set it; other brokers and their racks are what `live_brokers` reports)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from strom.broker.config import BrokerConfig, ConfigError
from strom.broker.replica.selector import LEADER, RACK_AWARE, ReplicaView, select
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch, iter_records
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client
from .test_apis import batch, create, produce_body

ME, OTHER, THIRD = 0, 1, 2


def consumer_fetch(
    topic: str, offset: int, *, rack: str = "", max_wait_ms: int = 0, isolation: int = 0, epoch: int = -1
) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": isolation,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": epoch,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": rack,
    }


def offsets(part) -> list[int]:
    return [r.offset for r in iter_records(part.records or b"")]


def test_the_rack_aware_selector_prefers_the_leader_then_the_most_caught_up_replica_of_the_rack():
    leader = ReplicaView(0, "a", 10, 0)
    behind, ahead, stale = ReplicaView(1, "b", 8, 0), ReplicaView(2, "b", 10, 500), ReplicaView(3, "b", 10, 900)
    assert select(None, "b", leader, [behind, ahead]) is None  # no selector: Kafka's default, the leader
    assert select(LEADER, "b", leader, [behind, ahead]) == leader
    assert select(RACK_AWARE, "", leader, [behind, ahead]) == leader  # no client.rack
    assert select(RACK_AWARE, "c", leader, [behind, ahead]) == leader  # nobody in the consumer's rack
    assert select(RACK_AWARE, "a", leader, [ReplicaView(1, "a", 20, 0)]) == leader  # the leader is in the rack
    assert select(RACK_AWARE, "b", leader, [behind, stale, ahead]) == ahead


def test_replica_selector_class_accepts_kafkas_class_names_only(tmp_path):
    base = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    assert BrokerConfig(base)["replica.selector.class"] is None
    for name in (RACK_AWARE, LEADER):
        assert BrokerConfig({**base, "replica.selector.class": name})["replica.selector.class"] == name
    with pytest.raises(ConfigError, match="replica.selector.class.*must be one of"):
        BrokerConfig({**base, "replica.selector.class": "com.example.MySelector"})


@pytest.fixture
def cluster_of_three(tmp_path):
    """A broker (id 0, rack "r0") that sees brokers 1 and 2 alive in racks "r1" and "r2"."""
    b = make_broker(tmp_path, **{"broker.rack": "r0", "replica.selector.class": RACK_AWARE})
    alive = {ME: "r0", OTHER: "r1", THIRD: "r2"}
    b.metadata.live_brokers = lambda listener_name=None: [(n, "127.0.0.1", 9092 + n, r) for n, r in alive.items()]
    b.alive = alive
    yield b
    b.close()


async def _leader_with_followers(b, nursery, records: int = 5):
    client = open_client(b, nursery)
    await create(client, "t")
    await client.request(ApiKey.PRODUCE, 9, produce_body("t", batch(records)))
    partition = b.replicas.partition("t", 0)
    partition.become_leader(3, [ME, OTHER, THIRD], [ME, OTHER, THIRD], 0)
    for replica in (OTHER, THIRD):
        partition.record_follower_fetch(replica, records, 0)
    return client, partition


async def test_a_leader_points_a_consumer_at_the_in_sync_replica_of_its_rack(cluster_of_three, nursery, autojump_clock):
    client, partition = await _leader_with_followers(cluster_of_three, nursery)
    start = trio.current_time()
    part = (
        (await client.request(ApiKey.FETCH, 11, consumer_fetch("t", 0, rack="r1", max_wait_ms=30000)))
        .responses[0]
        .partitions[0]
    )
    assert trio.current_time() - start < 1, "a preferred read replica is answered at once, as Kafka does"
    assert (part.error_code, part.preferred_read_replica, part.records) == (ErrorCode.NONE, OTHER, b"")
    assert (part.high_watermark, part.last_stable_offset, part.log_start_offset) == (5, 5, 0)
    for body, version, why in [
        (consumer_fetch("t", 0, rack="r0"), 11, "a consumer in the leader's rack reads the leader"),
        (consumer_fetch("t", 0, rack="elsewhere"), 11, "no replica in the consumer's rack"),
        (consumer_fetch("t", 0), 11, "no client.rack"),
    ]:
        part = (await client.request(ApiKey.FETCH, version, body)).responses[0].partitions[0]
        assert (part.preferred_read_replica, offsets(part)) == (-1, [0, 1, 2, 3, 4]), why
    part = (await client.request(ApiKey.FETCH, 10, consumer_fetch("t", 0, rack="r1"))).responses[0].partitions[0]
    assert offsets(part) == [0, 1, 2, 3, 4], "Fetch v10 has no rack: the leader answers"


@pytest.mark.parametrize(
    "change, why",
    [
        ("out_of_isr", "a replica out of the ISR may lag: not picked"),
        ("dead", "a replica whose broker is gone is not picked"),
        ("behind", "a replica whose log ends before the fetch offset is not picked"),
        ("no_selector", "without replica.selector.class every consumer reads the leader (Kafka's default)"),
    ],
)
async def test_a_leader_stops_pointing_at_a_replica_that_cannot_serve(cluster_of_three, nursery, change, why):
    b = cluster_of_three
    client, partition = await _leader_with_followers(b, nursery)
    if change == "out_of_isr":
        partition.isr.remove(OTHER)
    elif change == "dead":
        del b.alive[OTHER]
    elif change == "behind":
        partition.record_follower_fetch(OTHER, 3, 0)
    else:
        b.config.values["replica.selector.class"] = None
    part = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 4, rack="r1"))).responses[0].partitions[0]
    assert (part.error_code, part.preferred_read_replica, offsets(part)[-1]) == (ErrorCode.NONE, -1, 4), why
    part = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 2, rack="r1"))).responses[0].partitions[0]
    expected = -1 if change != "behind" else OTHER
    assert part.preferred_read_replica == expected


async def _follower(b, nursery, records: int = 6, hw: int = 4):
    """Broker 0 follows broker 1 for t-0: `records` in its log, its high watermark at `hw`."""
    client = open_client(b, nursery)
    await create(client, "t")
    for _ in range(records):  # one batch each: a fetch returns whole batches below the high watermark
        await client.request(ApiKey.PRODUCE, 9, produce_body("t", batch(1)))
    partition = b.replicas.partition("t", 0)
    partition.become_follower(OTHER, 3, [OTHER, ME], [OTHER, ME], 0)
    partition.log.high_watermark = hw
    return client, partition


async def test_a_follower_serves_consumers_up_to_its_high_watermark(cluster_of_three, nursery):
    client, partition = await _follower(cluster_of_three, nursery)
    part = (await client.request(ApiKey.FETCH, 11, consumer_fetch("t", 0, rack="r0"))).responses[0].partitions[0]
    assert (part.error_code, part.preferred_read_replica, offsets(part)) == (ErrorCode.NONE, -1, [0, 1, 2, 3])
    assert (part.high_watermark, part.last_stable_offset, part.log_start_offset) == (4, 4, 0)
    between = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 5))).responses[0].partitions[0]
    assert (between.error_code, offsets(between), between.high_watermark) == (ErrorCode.NONE, [], 4), (
        "between the follower's high watermark and log end: no records yet, as Kafka"
    )
    beyond = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 7))).responses[0].partitions[0]
    assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    fenced = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 0, epoch=2))).responses[0].partitions[0]
    assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
    old = (await client.request(ApiKey.FETCH, 10, consumer_fetch("t", 0))).responses[0].partitions[0]
    assert old.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, "before v11 a consumer may only read the leader"
    listed = await client.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    assert listed.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, "ListOffsets: leader only"
    debugging = consumer_fetch("t", 0)
    debugging["replica_id"] = -2  # Kafka's debugging consumer may read any replica, in any version
    part = (await client.request(ApiKey.FETCH, 10, debugging)).responses[0].partitions[0]
    assert (part.error_code, offsets(part)) == (ErrorCode.NONE, [0, 1, 2, 3])
    cluster_of_three.drop_local_partition("t", 0)  # reassigned away: no longer a replica here
    gone = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 0))).responses[0].partitions[0]
    assert gone.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_a_follower_serves_read_committed_consumers_up_to_its_last_stable_offset(cluster_of_three, nursery):
    b = cluster_of_three
    client, partition = await _follower(b, nursery, records=2, hw=2)
    txn = bytearray(
        build_batch(
            [Record(0, 0, b"k", b"in-txn")],
            base_offset=2,
            producer_id=7,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
            base_timestamp=1_700_000_000_000,
        )
    )
    from strom.protocol.records.batch import validate_batches

    partition.log.append_as_follower(txn, validate_batches(txn))
    partition.log.high_watermark = 3
    committed = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 0, isolation=1))).responses[0].partitions[0]
    assert (committed.high_watermark, committed.last_stable_offset, offsets(committed)) == (3, 2, [0, 1])
    uncommitted = (await client.request(ApiKey.FETCH, 12, consumer_fetch("t", 0))).responses[0].partitions[0]
    assert offsets(uncommitted) == [0, 1, 2]


async def test_a_follower_s_long_poll_is_woken_when_its_replica_fetcher_advances_the_high_watermark(
    cluster_of_three, nursery, autojump_clock
):
    from strom.broker.fetch_session import FetchSessionHandler
    from strom.broker.replica.fetcher import ReplicaFetcher

    b = cluster_of_three
    client, partition = await _follower(b, nursery, records=4, hw=4)
    await create(client, "other")
    b.replicas.partition("other", 0).become_follower(OTHER, 3, [OTHER, ME], [OTHER, ME], 0)
    woken = []
    real_watch = b.replicas.fetch_purgatory.watch

    async def watch(operation, partitions):
        await real_watch(operation, partitions)
        woken.append(list(partitions))

    b.replicas.fetch_purgatory.watch = watch

    class Leader:  # the leader's answer: two more records of t-0, its high watermark at 6
        async def request(self, api_key, version, body, timeout_s=None):
            asked = [(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
            more = build_batch(
                [Record(i, i, b"k", b"new") for i in range(2)],
                base_offset=4,
                partition_leader_epoch=3,
                base_timestamp=1_700_000_000_000,
            )
            return SimpleNamespace(
                error_code=0,
                session_id=0,
                responses=[
                    SimpleNamespace(
                        topic=topic,
                        partitions=[
                            SimpleNamespace(
                                partition_index=index,
                                error_code=0,
                                records=more if topic == "t" else b"",
                                high_watermark=6 if topic == "t" else 0,
                                log_start_offset=0,
                                diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
                            )
                        ],
                    )
                    for topic, index in asked
                ],
            )

    start = trio.current_time()
    sent = await client.send(ApiKey.FETCH, 12, consumer_fetch("t", 4, max_wait_ms=30000))
    await trio.sleep(1)
    other_poll = await open_client(b, nursery).send(ApiKey.FETCH, 12, consumer_fetch("other", 0, max_wait_ms=30000))
    await trio.sleep(1)
    assert other_poll and woken == []
    await ReplicaFetcher(b.replicas, b.config, b.follower_quota, lambda leader: None).fetch_once(
        Leader(), [partition, b.replicas.partition("other", 0)], FetchSessionHandler()
    )
    correlation, response = await client.receive(ApiKey.FETCH, 12)
    part = response.responses[0].partitions[0]
    assert correlation == sent and offsets(part) == [4, 5] and part.high_watermark == 6
    assert trio.current_time() - start < 30, "woken by the replica fetcher, not by max_wait"
    assert woken == [[("t", 0)]], "only the long poll of the partition that changed was woken"


async def test_broker_rack_is_in_metadata_and_describe_cluster(tmp_path, nursery):
    b = make_broker(tmp_path, **{"broker.rack": "eu-1a"})
    try:
        client = open_client(b, nursery)
        metadata = await client.request(
            ApiKey.METADATA,
            12,
            {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        )
        assert [(n.node_id, n.rack) for n in metadata.brokers] == [(b.node_id, "eu-1a")]
        cluster = await client.request(ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
        assert [(n.broker_id, n.rack) for n in cluster.brokers] == [(b.node_id, "eu-1a")]
    finally:
        b.close()

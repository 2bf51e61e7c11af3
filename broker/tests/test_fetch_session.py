"""Incremental fetch sessions (KIP-227) over an in-memory connection, as a client sees them."""

from __future__ import annotations

from collections import OrderedDict as _OD

import trio

from strom.broker.fetch_session import CachedPartition, FetchSessionCache, next_epoch
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client
from .test_apis import batch, create, produce_body


def session_fetch(
    topics: dict[str, dict[int, int]],
    session_id: int,
    epoch: int,
    *,
    forgotten=None,
    max_wait_ms: int = 0,
    replica_id: int = -1,
    max_bytes: int = 50 << 20,
) -> dict:
    """A Fetch v12 body: {topic: {partition: fetch_offset}}."""
    return {
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": t,
                "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20} for p, o in parts.items()
                ],
            }
            for t, parts in topics.items()
        ],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in (forgotten or {}).items()],
        "rack_id": "",
    }


def answered(response) -> dict[tuple[str, int], object]:
    return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}


async def test_session_answers_only_what_changed_and_forgets_topics(connect, broker):
    client = await connect()
    await create(client, "s", partitions=3)
    await client.request(ApiKey.PRODUCE, 9, produce_body("s", batch(2), partition=0))
    first = await client.request(ApiKey.FETCH, 12, session_fetch({"s": {0: 0, 1: 0, 2: 0}}, 0, 0))
    assert first.error_code == ErrorCode.NONE and first.session_id != 0
    assert sorted(answered(first)) == [("s", 0), ("s", 1), ("s", 2)], "a new session answers every partition"
    sid = first.session_id
    assert [r.offset for r in iter_records(answered(first)[("s", 0)].records)] == [0, 1]

    # The client moves partition 0 to offset 2; nothing new anywhere: an empty answer.
    idle = await client.request(ApiKey.FETCH, 12, session_fetch({"s": {0: 2}}, sid, 1))
    assert idle.error_code == ErrorCode.NONE and idle.session_id == sid
    assert idle.responses == []
    idle = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 2))
    assert idle.responses == []

    # New data on partition 2, which the request does not name: only it is answered.
    await client.request(ApiKey.PRODUCE, 9, produce_body("s", batch(3), partition=2))
    moved = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 3))
    parts = answered(moved)
    assert list(parts) == [("s", 2)]
    assert parts[("s", 2)].high_watermark == 3
    assert [r.offset for r in iter_records(parts[("s", 2)].records)] == [0, 1, 2]

    # Forget partition 2: new data there is no longer answered; partition 0 still is.
    await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 4, forgotten={"s": [2]}))
    await client.request(ApiKey.PRODUCE, 9, produce_body("s", batch(1), partition=2))
    await client.request(ApiKey.PRODUCE, 9, produce_body("s", batch(1), partition=0))
    after = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 5))
    assert list(answered(after)) == [("s", 0)]
    assert [r.offset for r in iter_records(answered(after)[("s", 0)].records)] == [2]
    assert sorted(broker.fetch_sessions.cache.get(sid).partitions) == [("s", 0), ("s", 1)]


async def test_session_errors_and_closing(connect, broker):
    client = await connect()
    await create(client, "e")
    first = await client.request(ApiKey.FETCH, 12, session_fetch({"e": {0: 0}}, 0, 0))
    sid = first.session_id
    stale = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 7))
    assert (stale.error_code, stale.session_id, stale.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    unknown = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid + 1, 1))
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and unknown.session_id == 0
    ok = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 1))
    assert ok.error_code == ErrorCode.NONE and ok.session_id == sid, "a wrong epoch does not end the session"
    # FINAL epoch closes the session and fetches without one.
    final = await client.request(ApiKey.FETCH, 12, session_fetch({"e": {0: 0}}, sid, -1))
    assert final.error_code == ErrorCode.NONE and final.session_id == 0 and list(answered(final)) == [("e", 0)]
    gone = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 2))
    assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # A session emptied by forgetting everything is closed.
    again = await client.request(ApiKey.FETCH, 12, session_fetch({"e": {0: 0}}, 0, 0))
    emptied = await client.request(ApiKey.FETCH, 12, session_fetch({}, again.session_id, 1, forgotten={"e": [0]}))
    assert emptied.error_code == ErrorCode.NONE and emptied.session_id == 0
    assert len(broker.fetch_sessions.cache) == 0
    # A session opened with v12 (names) cannot be continued with v13 (topic ids).
    named = await client.request(ApiKey.FETCH, 12, session_fetch({"e": {0: 0}}, 0, 0))
    body = session_fetch({}, named.session_id, 1)
    mixed = await client.request(ApiKey.FETCH, 13, body)
    assert mixed.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


async def test_session_by_topic_id_and_errors_always_answered(connect, broker):
    client = await connect()
    await create(client, "ids", partitions=2)
    topic_id = broker.topics.topics["ids"].topic_id
    body = session_fetch({"ids": {0: 0, 1: 5}}, 0, 0)
    body["topics"][0]["topic_id"] = topic_id
    first = await client.request(ApiKey.FETCH, 13, body)
    sid = first.session_id
    assert sid != 0
    codes = {p.partition_index: p.error_code for t in first.responses for p in t.partitions}
    assert codes == {0: ErrorCode.NONE, 1: ErrorCode.OFFSET_OUT_OF_RANGE}
    # Partition 1 is still out of range: an error is answered every time; partition 0 is idle.
    second = await client.request(ApiKey.FETCH, 13, session_fetch({}, sid, 1))
    assert [(t.topic_id, p.partition_index, p.error_code) for t in second.responses for p in t.partitions] == [
        (topic_id, 1, ErrorCode.OFFSET_OUT_OF_RANGE)
    ]
    fix = session_fetch({"ids": {1: 0}}, sid, 2)
    fix["topics"][0]["topic_id"] = topic_id
    fixed = await client.request(ApiKey.FETCH, 13, fix)
    assert [(p.partition_index, p.error_code) for t in fixed.responses for p in t.partitions] == [
        (1, ErrorCode.NONE)
    ], "once the error is gone the partition is answered again"
    quiet = await client.request(ApiKey.FETCH, 13, session_fetch({}, sid, 3))
    assert quiet.responses == []
    forget = session_fetch({}, sid, 4)
    forget["forgotten_topics_data"] = [{"topic_id": topic_id, "partitions": [0, 1]}]
    closed = await client.request(ApiKey.FETCH, 13, forget)
    assert closed.session_id == 0 and len(broker.fetch_sessions.cache) == 0


async def test_incremental_long_poll_wakes_on_a_session_partition(connect, autojump_clock):
    client = await connect()
    producer = await connect()
    await create(client, "lp", partitions=2)
    sid = (await client.request(ApiKey.FETCH, 12, session_fetch({"lp": {0: 0, 1: 0}}, 0, 0))).session_id
    start = trio.current_time()
    idle = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 1, max_wait_ms=2000))
    assert idle.responses == [] and trio.current_time() - start >= 2.0
    result = {}

    async def poll():
        result["r"] = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, 2, max_wait_ms=30000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.sleep(1)
        start = trio.current_time()
        await producer.request(ApiKey.PRODUCE, 9, produce_body("lp", batch(1), partition=1))
    assert trio.current_time() - start < 1
    assert list(answered(result["r"])) == [("lp", 1)]


async def test_partitions_with_data_rotate_so_a_byte_limit_does_not_starve_the_rest(connect, broker):
    client = await connect()
    await create(client, "rot", partitions=3)
    for p in range(3):
        await client.request(ApiKey.PRODUCE, 9, produce_body("rot", batch(50), partition=p))
    first = await client.request(ApiKey.FETCH, 12, session_fetch({"rot": {0: 0, 1: 0, 2: 0}}, 0, 0, max_bytes=1))
    sid = first.session_id
    with_data = [k for k, p in answered(first).items() if p.records]
    assert with_data == [("rot", 0)], "max_bytes=1 returns one batch, the first partition's"
    seen = []
    for epoch in (1, 2, 3):
        r = await client.request(ApiKey.FETCH, 12, session_fetch({}, sid, epoch, max_bytes=1))
        seen += [k for k, p in answered(r).items() if p.records]
    assert seen == [("rot", 0), ("rot", 1), ("rot", 2)], "without rotation partition 0 would win every time"


async def test_follower_sessions_are_cached_too(connect, broker):
    client = await connect()
    await create(client, "f")
    first = await client.request(ApiKey.FETCH, 12, session_fetch({"f": {0: 0}}, 0, 0, replica_id=7))
    session = broker.fetch_sessions.cache.get(first.session_id)
    assert session is not None and session.privileged


async def test_full_cache_answers_session_id_zero_and_old_sessions_get_evicted(tmp_path, nursery):
    b = make_broker(tmp_path, max_incremental_fetch_session_cache_slots=1)
    try:
        client = open_client(b, nursery)
        now = [1_000_000]
        b.fetch_sessions.cache.clock = lambda: now[0]
        await create(client, "c")
        one = await client.request(ApiKey.FETCH, 12, session_fetch({"c": {0: 0}}, 0, 0))
        assert one.session_id != 0
        two = await client.request(ApiKey.FETCH, 12, session_fetch({"c": {0: 0}}, 0, 0))
        assert two.session_id == 0 and two.error_code == ErrorCode.NONE and list(answered(two)) == [("c", 0)]
        now[0] += 120_001  # the first session has not been used for longer than the eviction time
        three = await client.request(ApiKey.FETCH, 12, session_fetch({"c": {0: 0}}, 0, 0))
        assert three.session_id not in (0, one.session_id)
        evicted = await client.request(ApiKey.FETCH, 12, session_fetch({}, one.session_id, 1))
        assert evicted.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    finally:
        b.close()


async def test_sessions_off_with_zero_slots(tmp_path, nursery):
    b = make_broker(tmp_path, max_incremental_fetch_session_cache_slots=0)
    try:
        client = open_client(b, nursery)
        await create(client, "z")
        r = await client.request(ApiKey.FETCH, 12, session_fetch({"z": {0: 0}}, 0, 0))
        assert r.session_id == 0 and list(answered(r)) == [("z", 0)]
    finally:
        b.close()


def _session_of(cache, size, privileged):
    parts = _OD((("t", i), CachedPartition("t", bytes(16), i)) for i in range(size))
    return cache.maybe_create(privileged, False, parts)


def test_eviction_prefers_followers_and_bigger_sessions_once_old_enough():
    now = [0]
    cache = FetchSessionCache(max_slots=2, eviction_ms=100, clock=lambda: now[0])
    small = _session_of(cache, 2, False)
    follower = _session_of(cache, 1, True)
    assert small and follower
    now[0] = 50
    cache.touch(cache.get(small), 50)
    cache.touch(cache.get(follower), 50)
    assert _session_of(cache, 10, True) == 0, "sessions younger than the eviction time stay"
    now[0] = 120
    assert _session_of(cache, 1, False) == 0, "a consumer's smaller session does not displace a bigger one"
    big = _session_of(cache, 5, False)
    assert big and cache.get(small) is None and cache.get(follower) is not None
    now[0] = 200
    cache.touch(cache.get(big), 200)
    cache.touch(cache.get(follower), 200)
    assert _session_of(cache, 100, False) == 0, "young sessions (big is 80 ms old) stay"
    now[0] = 300
    consumer = _session_of(cache, 100, False)
    assert consumer and cache.get(big) is None, "a consumer may evict only consumers' sessions"
    assert cache.evictions == 2
    assert next_epoch(2**31 - 1) == 1 and next_epoch(0) == 1


async def test_follower_side_handler_sends_only_changes_and_starts_over_after_errors(connect, broker):
    from strom.broker.fetch_session import FetchSessionHandler

    client = await connect()
    await create(client, "fh", partitions=3)
    handler = FetchSessionHandler()

    def fields(p, offset):
        return {
            "partition": p,
            "fetch_offset": offset,
            "partition_max_bytes": 1 << 20,
            "current_leader_epoch": -1,
            "last_fetched_epoch": -1,
            "log_start_offset": 0,
        }

    async def fetch(wanted):
        sid, epoch, send, forget = handler.build(wanted)
        body = session_fetch({}, sid, epoch, replica_id=5)
        by_topic = {}
        for (t, _), f in send.items():
            by_topic.setdefault(t, []).append(f)
        body["topics"] = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
        body["forgotten_topics_data"] = [{"topic": t, "partitions": [p]} for t, p in forget]
        response = await client.request(ApiKey.FETCH, 12, body)
        handler.handle(response.error_code, response.session_id)
        return send, forget, response

    wanted = {("fh", p): fields(p, 0) for p in range(3)}
    send, _, first = await fetch(wanted)
    assert len(send) == 3 and handler.session_id == first.session_id != 0 and handler.next_epoch == 1
    send, forget, second = await fetch(wanted)
    assert send == {} and forget == [] and second.responses == []
    await client.request(ApiKey.PRODUCE, 9, produce_body("fh", batch(2), partition=1))
    send, _, third = await fetch(wanted)
    assert list(answered(third)) == [("fh", 1)]
    wanted[("fh", 1)] = fields(1, 2)
    del wanted[("fh", 2)]
    send, forget, _ = await fetch(wanted)
    assert list(send) == [("fh", 1)] and forget == [("fh", 2)]
    assert sorted(broker.fetch_sessions.cache.get(handler.session_id).partitions) == [("fh", 0), ("fh", 1)]
    broker.fetch_sessions.cache.remove(handler.session_id)  # say, evicted
    _, _, lost = await fetch(wanted)
    assert lost.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and handler.session_id == 0
    send, _, renewed = await fetch(wanted)
    assert len(send) == 2 and renewed.session_id != 0, "a full fetch opens a new session"

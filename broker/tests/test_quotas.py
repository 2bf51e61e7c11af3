"""Client quotas: configs (Describe/AlterClientQuotas, kept across restarts), which entity applies,
and throttling of Produce and Fetch with throttle_time_ms."""

from __future__ import annotations

from types import SimpleNamespace

from strom.broker.quotas import QuotaManager, Sensor
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client
from .test_apis import batch, create, fetch_body, produce_body


def alter(entity, ops, validate_only=False) -> dict:
    return {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [
                    {"key": k, "value": v, "remove": v is None}
                    if v is not None
                    else {"key": k, "value": 0.0, "remove": True}
                    for k, v in ops
                ],
            }
        ],
        "validate_only": validate_only,
    }


def describe(components, strict=False) -> dict:
    return {"components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components], "strict": strict}


def listed(response) -> dict:
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry["values"]}
        for entry in response.entries
    }


async def test_alter_and_describe_quotas_and_keep_them(tmp_path, nursery):
    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        ok = await client.request(
            ApiKey.ALTER_CLIENT_QUOTAS, 1, alter([("client-id", "c1")], [("producer_byte_rate", 1000.0)])
        )
        assert ok.entries[0].error_code == ErrorCode.NONE
        await client.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, alter([("user", None)], [("request_percentage", 25.0)]))
        await client.request(
            ApiKey.ALTER_CLIENT_QUOTAS, 1, alter([("user", "u"), ("client-id", "c1")], [("consumer_byte_rate", 5.0)])
        )
        dry = await client.request(
            ApiKey.ALTER_CLIENT_QUOTAS,
            1,
            alter([("client-id", "c9")], [("producer_byte_rate", 1.0)], validate_only=True),
        )
        assert dry.entries[0].error_code == ErrorCode.NONE
        bad = await client.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, alter([("client-id", "c1")], [("nonsense", 1.0)]))
        assert (bad.entries[0].error_code, bad.entries[0].error_message) == (
            ErrorCode.INVALID_REQUEST,
            "Invalid configuration key nonsense",
        )
        zero = await client.request(
            ApiKey.ALTER_CLIENT_QUOTAS, 1, alter([("client-id", "c1")], [("producer_byte_rate", 0.0)])
        )
        assert zero.entries[0].error_message == "Quota producer_byte_rate must be greater than 0"
        every = listed(await client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe([])))
        assert every == {
            (("client-id", "c1"),): {"producer_byte_rate": 1000.0},
            (("user", None),): {"request_percentage": 25.0},
            (("client-id", "c1"), ("user", "u")): {"consumer_byte_rate": 5.0},
        }
        exact = listed(
            await client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe([("client-id", 0, "c1")], strict=True))
        )
        assert list(exact) == [(("client-id", "c1"),)]
        defaults = listed(await client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe([("user", 1, None)])))
        assert list(defaults) == [(("user", None),)]
        unknown = await client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe([("foo", 2, None)]))
        assert unknown.error_code == ErrorCode.UNSUPPORTED_VERSION
        await client.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, alter([("user", None)], [("request_percentage", None)]))
    finally:
        b.close()
    b2 = make_broker(tmp_path)
    try:
        client = open_client(b2, nursery)
        kept = listed(await client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describe([])))
        assert kept == {
            (("client-id", "c1"),): {"producer_byte_rate": 1000.0},
            (("client-id", "c1"), ("user", "u")): {"consumer_byte_rate": 5.0},
        }, "removed keys stay removed"
    finally:
        b2.close()


def test_the_most_specific_entity_wins_and_rates_are_windowed():
    store = SimpleNamespace(
        topics=SimpleNamespace(
            quotas={
                (("client-id", None),): {"producer_byte_rate": 1.0},
                (("client-id", "c"),): {"producer_byte_rate": 2.0},
                (("user", None),): {"producer_byte_rate": 3.0},
                (("client-id", "c"), ("user", "u")): {"producer_byte_rate": 4.0},
            }
        )
    )
    q = QuotaManager(lambda: store.topics.quotas, samples=3, window_s=1.0)
    assert q.quota("producer_byte_rate", "u", "c")[0] == 4.0
    assert q.quota("producer_byte_rate", "v", "c")[0] == 3.0, "a default user quota comes before client ids"
    del store.topics.quotas[(("user", None),)]
    assert q.quota("producer_byte_rate", "v", "c")[0] == 2.0
    assert q.quota("producer_byte_rate", "v", "other")[0] == 1.0
    assert q.quota("consumer_byte_rate", "v", "other") is None
    s = Sensor(3, 1.0)
    s.record(100, 0.0)
    assert s.rate(0.5) == 50.0, "at least (samples - 1) windows"
    s.record(100, 1.5)
    s.record(100, 2.5)
    assert s.rate(2.5) == 300 / 2.5
    s.record(100, 5.0)
    assert s.rate(5.0) == 200 / 2.5, "samples older than samples x window fall out"
    assert q.record("producer_byte_rate", "x", "other", 1.0, 0.0) == 0
    # 11 bytes more at a 1 B/s quota over a 2 s window: (6 - 1) / 1 x 2 s = 10 s, capped at the 3 s window
    assert q.record("producer_byte_rate", "x", "other", 11.0, 0.1) == 3000


async def test_produce_and_fetch_answers_carry_throttle_time(connect, broker, autojump_clock):
    import trio

    client = await connect()
    await create(client, "thr")
    await client.request(
        ApiKey.ALTER_CLIENT_QUOTAS,
        1,
        alter([("client-id", "test")], [("producer_byte_rate", 100.0), ("consumer_byte_rate", 100.0)]),
    )
    first = await client.request(ApiKey.PRODUCE, 9, produce_body("thr", batch(50)))
    assert first.throttle_time_ms > 0 and first.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    start = trio.current_time()
    await client.request(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
    assert trio.current_time() - start >= first.throttle_time_ms / 1000 * 0.99, "the connection was muted"
    fetched = await client.request(ApiKey.FETCH, 12, fetch_body("thr", 0))
    assert fetched.throttle_time_ms > 0
    assert not fetched.responses[0].partitions[0].records, "a throttled fetch answers no records"

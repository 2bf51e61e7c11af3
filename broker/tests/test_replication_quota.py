"""Replication throttles (leader/follower.replication.throttled.rate and the topics'
*.replication.throttled.replicas) and the dynamic broker configs they are set through."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from strom.broker.dynamic_config import DynamicConfigs, check_value
from strom.broker.replication_quota import ALL, FOLLOWER, LEADER, ReplicationQuota, throttled_partitions
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .helpers import make_broker, open_client
from .test_apis import batch, create, produce_body

BROKER, TOPIC = 4, 2


def inc(rtype: int, name: str, ops, validate_only=False) -> dict:
    return {
        "validate_only": validate_only,
        "resources": [
            {
                "resource_type": rtype,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
            }
        ],
    }


def describe(rtype: int, name: str, keys=None) -> dict:
    return {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True,
        "include_documentation": False,
    }


def shown(response) -> dict:
    return {c.name: (c.value, c.config_source) for c in response.results[0].configs}


def test_throttled_replica_lists_name_partitions_per_broker():
    assert throttled_partitions("0:1,1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1, 1:2", 2) == frozenset({1})
    assert throttled_partitions(" * ", 7) == ALL
    assert throttled_partitions("", 1) == frozenset() and throttled_partitions(None, 1) == frozenset()


def test_dynamic_values_are_checked_as_kafka_checks_them():
    assert check_value("leader.replication.throttled.rate", "1000") is None
    assert (
        check_value("leader.replication.throttled.rate", "abc")
        == "Invalid value abc for configuration leader.replication.throttled.rate: Not a number of type LONG"
    )
    assert (
        check_value("follower.replication.throttled.rate", "-5")
        == "Invalid value -5 for configuration follower.replication.throttled.rate: Value must be at least 0"
    )
    assert check_value("max.connection.creation.rate", str(2**31)).endswith("Not a number of type INT")


def _quotas(stored: dict, topic_configs: dict, node_id: int = 1) -> tuple[ReplicationQuota, ReplicationQuota]:
    from strom.broker.config import BrokerConfig

    dynamic = DynamicConfigs(BrokerConfig({"log.dirs": "/nonexistent"}), node_id, lambda: stored)
    return (
        ReplicationQuota(LEADER, node_id, dynamic, topic_configs.get),
        ReplicationQuota(FOLLOWER, node_id, dynamic, topic_configs.get),
    )


def test_own_value_wins_over_the_cluster_default_and_the_rate_is_kept_to():
    leader, follower = _quotas(
        {
            "": {"leader.replication.throttled.rate": "500", "follower.replication.throttled.rate": "300"},
            "1": {"leader.replication.throttled.rate": "1000"},
        },
        {"t": {"leader.replication.throttled.replicas": "0:1,1:2", "follower.replication.throttled.replicas": "*"}},
    )
    assert (leader.limit(), follower.limit()) == (1000.0, 300.0)
    assert leader.is_throttled("t", 0) and not leader.is_throttled("t", 1) and not leader.is_throttled("other", 0)
    assert follower.is_throttled("t", 5)
    assert not leader.exceeded(100.0), "nothing sent yet"
    leader.record(1500, 100.0)
    assert leader.exceeded(100.0), "1500 bytes within the first second is over 1000 B/s (at least one window)"
    assert abs(leader.delay(100.0) - 0.5) < 1e-9, "1500 bytes at 1000 B/s: half a second more"
    assert not leader.exceeded(101.5)
    unthrottled, _ = _quotas({}, {})
    unthrottled.record(10**9, 0.0)
    assert unthrottled.limit() == float("inf") and not unthrottled.exceeded(0.0) and unthrottled.delay(0.0) == 0


async def test_broker_dynamic_configs_are_set_described_removed_and_kept(tmp_path, nursery):
    b = make_broker(tmp_path)
    me = str(b.node_id)
    try:
        client = open_client(b, nursery)
        ok = await client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            inc(
                BROKER,
                me,
                [("leader.replication.throttled.rate", 0, "1000"), ("follower.replication.throttled.rate", 0, "2000")],
            ),
        )
        assert ok.responses[0].error_code == ErrorCode.NONE
        default = await client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            inc(
                BROKER, "", [("follower.replication.throttled.rate", 0, "50"), ("max.connection.creation.rate", 0, "7")]
            ),
        )
        assert default.responses[0].error_code == ErrorCode.NONE
        assert b.dynamic_configs.value("follower.replication.throttled.rate") == 2000, "the broker's own value wins"
        assert b.dynamic_configs.value("max.connection.creation.rate") == 7
        own = shown(
            await client.request(
                ApiKey.DESCRIBE_CONFIGS,
                4,
                describe(
                    BROKER,
                    me,
                    [
                        "leader.replication.throttled.rate",
                        "follower.replication.throttled.rate",
                        "max.connection.creation.rate",
                    ],
                ),
            )
        )
        assert own == {
            "leader.replication.throttled.rate": ("1000", 2),
            "follower.replication.throttled.rate": ("2000", 2),
            "max.connection.creation.rate": ("7", 3),
        }
        defaults = shown(await client.request(ApiKey.DESCRIBE_CONFIGS, 4, describe(BROKER, "")))
        assert defaults == {"follower.replication.throttled.rate": ("50", 3), "max.connection.creation.rate": ("7", 3)}
        for rtype, name, ops, code, message in [
            (
                BROKER,
                me,
                [("leader.replication.throttled.rate", 0, "abc")],
                ErrorCode.INVALID_REQUEST,
                "Invalid value abc for configuration leader.replication.throttled.rate: Not a number of type LONG",
            ),
            (
                BROKER,
                me,
                [("log.dirs", 0, "/x")],
                ErrorCode.INVALID_REQUEST,
                "Cannot update these configs dynamically: Set(log.dirs)",
            ),
            (
                BROKER,
                "77",
                [("leader.replication.throttled.rate", 0, "1")],
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {me}, but received 77",
            ),
            (
                BROKER,
                me,
                [("leader.replication.throttled.rate", 2, "1")],
                ErrorCode.INVALID_CONFIG,
                "Config value append is not allowed for config key: leader.replication.throttled.rate",
            ),
        ]:
            refused = await client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, inc(rtype, name, ops))
            assert (refused.responses[0].error_code, refused.responses[0].error_message) == (code, message)
        await create(client, "tt")
        bad = await client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, inc(TOPIC, "tt", [("leader.replication.throttled.replicas", 0, "0-1")])
        )
        assert bad.responses[0].error_code == ErrorCode.INVALID_CONFIG
        assert "must be the literal '*' or a list of replicas" in bad.responses[0].error_message
        # the legacy AlterConfigs replaces the broker's whole set
        legacy = await client.request(
            ApiKey.ALTER_CONFIGS,
            2,
            {
                "validate_only": False,
                "resources": [
                    {
                        "resource_type": BROKER,
                        "resource_name": me,
                        "configs": [{"name": "leader.replication.throttled.rate", "value": "77"}],
                    }
                ],
            },
        )
        assert legacy.responses[0].error_code == ErrorCode.NONE
        assert b.topics.broker_configs[me] == {"leader.replication.throttled.rate": "77"}
    finally:
        b.close()
    b2 = make_broker(tmp_path)
    try:
        assert b2.dynamic_configs.value("leader.replication.throttled.rate") == 77, "kept across a restart"
        client = open_client(b2, nursery)
        cleared = await client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            inc(
                BROKER,
                me,
                [("leader.replication.throttled.rate", 1, None), ("follower.replication.throttled.rate", 1, None)],
            ),
        )
        assert cleared.responses[0].error_code == ErrorCode.NONE
        assert b2.leader_quota.limit() == float("inf") and b2.follower_quota.limit() == 50.0
    finally:
        b2.close()


def _follower_fetch(topic: str, offset: int, replica: int, partition: int = 0) -> dict:
    return {
        "replica_id": replica,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
            }
        ],
    }


async def test_leader_holds_back_only_throttled_out_of_sync_replicas(tmp_path, nursery):
    b = make_broker(tmp_path)
    me = b.node_id
    try:
        client = open_client(b, nursery)
        await create(client, "slow", configs={"leader.replication.throttled.replicas": f"0:{me}"})
        await create(client, "fast")
        await create(client, "every", configs={"leader.replication.throttled.replicas": "*"})
        for topic in ("slow", "fast", "every"):
            for _ in range(3):
                await client.request(ApiKey.PRODUCE, 9, produce_body(topic, batch(20)))
        await client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            inc(BROKER, str(me), [("leader.replication.throttled.rate", 0, "1000")]),
        )

        async def records(topic: str, replica: int = 5) -> int:
            answer = await client.request(ApiKey.FETCH, 12, _follower_fetch(topic, 0, replica))
            part = answer.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NONE
            return len(part.records or b"")

        first = await records("slow")
        assert first > 1000, "under the quota a throttled replica is served"
        assert await records("slow") == 0, "over 1000 B/s: the out-of-sync replica gets nothing"
        assert await records("every") == 0, "'*' throttles every partition of the topic"
        assert await records("fast") > 0, "a partition not in the throttle list is not held back"
        assert await records("slow", replica=-1) > 0, "consumers are not subject to replication throttles"
        b.replicas.partition("slow", 0).isr.append(5)
        assert await records("slow") > 0, "a replica in the ISR is never held back"
        assert b.leader_quota.sensor.total(trio.current_time()) >= 2 * first, "in-sync traffic still counts"
        await client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, inc(BROKER, str(me), [("leader.replication.throttled.rate", 1, None)])
        )
        b.replicas.partition("slow", 0).isr.remove(5)
        measured = b.leader_quota.sensor.total(trio.current_time())
        assert await records("slow") > 0, "without a rate nothing is throttled"
        assert await records("fast") > 0
        assert b.leader_quota.sensor.total(trio.current_time()) - measured == first, (
            "a throttled replica's bytes are still measured (Kafka's LeaderReplication byte-rate), another's are not"
        )
    finally:
        b.close()


class _Leader:
    """Answers a follower's Fetch with `records` for every partition it asks for, the leader's
    high watermark far ahead (so the follower is not caught up)."""

    def __init__(self, records: bytes):
        self.records, self.asked = records, []

    async def request(self, api_key, version, body, timeout_s=None):
        asked = [(t["topic"], p["partition"], p["fetch_offset"]) for t in body["topics"] for p in t["partitions"]]
        self.asked.append(asked)
        no_divergence = SimpleNamespace(epoch=-1, end_offset=-1)
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
                            records=self.records if offset == 0 else b"",
                            high_watermark=1000,
                            log_start_offset=0,
                            diverging_epoch=no_divergence,
                        )
                    ],
                )
                for topic, index, offset in asked
            ],
        )


async def test_follower_leaves_out_throttled_partitions_it_has_not_caught_up(tmp_path, nursery):
    from strom.broker.fetch_session import FetchSessionHandler
    from strom.broker.replica.fetcher import ReplicaFetcher

    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        await create(client, "slow", configs={"follower.replication.throttled.replicas": f"0:{b.node_id}"})
        await create(client, "fast")
        await client.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            1,
            inc(BROKER, str(b.node_id), [("follower.replication.throttled.rate", 0, "1000")]),
        )
        slow, fast = b.replicas.partition("slow", 0), b.replicas.partition("fast", 0)
        for p in (slow, fast):
            p.become_follower(7, 1, [b.node_id, 7], [7], 0)
        fetcher = ReplicaFetcher(b.replicas, b.config, b.follower_quota, lambda leader: None)
        leader = _Leader(batch(80))  # about 2 KB
        await fetcher.fetch_once(leader, [slow, fast], FetchSessionHandler())
        assert leader.asked[-1] == [("slow", 0, 0), ("fast", 0, 0)], "under the rate both are fetched"
        assert slow.log.log_end_offset == 80 and not slow.fetch_caught_up
        fetcher._changed.set()  # nothing to wait for in this test
        await fetcher.fetch_once(leader, [slow, fast], FetchSessionHandler())
        assert leader.asked[-1] == [("fast", 0, 80)], "over 1000 B/s the throttled partition waits"
        calls = len(leader.asked)
        await fetcher.fetch_once(leader, [slow], FetchSessionHandler())
        assert len(leader.asked) == calls, "with only throttled partitions to fetch, no request is sent"
        slow.fetch_caught_up = True
        await fetcher.fetch_once(leader, [slow, fast], FetchSessionHandler())
        assert leader.asked[-1] == [("slow", 0, 80), ("fast", 0, 80)], "a caught-up replica is never held back"
    finally:
        b.close()


async def test_a_follower_whose_append_fails_waits_before_fetching_again(tmp_path, nursery, monkeypatch):
    # found by the deterministic simulation (docs/simulation.md, finding 1): an append the log
    # refuses (a disk error, a batch larger than a segment) was fetched again at once, for ever
    from strom.broker.fetch_session import FetchSessionHandler
    from strom.broker.replica import fetcher as fetcher_module
    from strom.storage.errors import StorageError

    b = make_broker(tmp_path)
    try:
        client = open_client(b, nursery)
        await create(client, "t")
        follower = b.replicas.partition("t", 0)
        follower.become_follower(7, 1, [b.node_id, 7], [7], 0)
        fetcher = fetcher_module.ReplicaFetcher(b.replicas, b.config, b.follower_quota, lambda leader: None)

        def refused(partition, data):
            raise StorageError("the log refuses this append")

        monkeypatch.setattr(fetcher_module, "apply_fetched", refused)
        leader = _Leader(batch(3))
        with trio.move_on_after(fetcher_module.FETCH_BACKOFF_S / 4) as waited:
            await fetcher.fetch_once(leader, [follower], FetchSessionHandler())
        assert len(leader.asked) == 1
        assert waited.cancelled_caught, "after a failed append the fetcher must pause, not fetch again at once"
    finally:
        b.close()

"""ShareFetch and ShareAcknowledge at the protocol level (Kafka 4.3's answers): share sessions and
their epochs, acquisition, piggybacked and separate acknowledgements, the long poll, lock expiry
and the delivery count, group configs on GROUP resources."""

from __future__ import annotations

import pytest
import trio

from strom.broker.coordinator.group.tests.helpers import create_topic
from strom.broker.tests.helpers import GROUP_TEST_CONFIG, make_broker, open_client
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.schema import ApiKey

ACCEPT, RELEASE, REJECT = 1, 2, 3


@pytest.fixture
async def env(tmp_path, nursery):
    broker = make_broker(tmp_path / "data", **GROUP_TEST_CONFIG, group_share_min_record_lock_duration_ms=1000)
    assert broker.groups is not None
    nursery.start_soon(broker.groups.run)
    nursery.start_soon(broker.share.run)
    client = open_client(broker, nursery)
    await create_topic(client, "t", 1)
    meta = await client.request(
        ApiKey.METADATA,
        12,
        {"topics": [{"topic_id": bytes(16), "name": "t"}], "allow_auto_topic_creation": False,
         "include_topic_authorized_operations": False},
    )  # fmt: skip
    await alter_group(client, "share.auto.offset.reset", "earliest")
    yield broker, client, meta.topics[0].topic_id
    broker.close()


async def alter_group(client, key: str, value: str, group: str = "g"):
    response = await client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {"resource_type": 32, "resource_name": group,
                 "configs": [{"name": key, "config_operation": 0, "value": value}]}
            ],
            "validate_only": False,
        },
    )  # fmt: skip
    return response.responses[0]


async def produce(client, n: int, first: int = 0) -> None:
    batch = build_batch([Record(i, i, None, b"v%d" % (first + i), []) for i in range(n)])
    body = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
    }
    response = await client.request(ApiKey.PRODUCE, 9, body)
    assert response.responses[0].partition_responses[0].error_code == 0


async def share_fetch(client, topic_id: bytes, epoch: int, member: str = "m1", acks=(), wait_ms: int = 0,
                      max_records: int = 100, partitions=(0,), version: int = 1):  # fmt: skip
    topics = [
        {"topic_id": topic_id,
         "partitions": [{"partition_index": p,
                         "acknowledgement_batches": [{"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                                                     for f, last, t in acks]}
                        for p in partitions]}
    ]  # fmt: skip
    return await client.request(
        ApiKey.SHARE_FETCH,
        version,
        {"group_id": "g", "member_id": member, "share_session_epoch": epoch, "max_wait_ms": wait_ms, "min_bytes": 1,
         "max_bytes": 1 << 20, "max_records": max_records, "batch_size": 100, "topics": topics,
         "forgotten_topics_data": []},
    )  # fmt: skip


async def share_ack(client, topic_id: bytes, epoch: int, acks, member: str = "m1"):
    return await client.request(
        ApiKey.SHARE_ACKNOWLEDGE,
        1,
        {"group_id": "g", "member_id": member, "share_session_epoch": epoch,
         "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
             {"first_offset": f, "last_offset": last, "acknowledge_types": [t]} for f, last, t in acks]}]}]},
    )  # fmt: skip


def acquired(response) -> list[tuple[int, int, int]]:
    return [
        (r.first_offset, r.last_offset, r.delivery_count)
        for t in response.responses
        for p in t.partitions
        for r in p.acquired_records
    ]


async def test_two_members_split_the_records_and_acks_free_them(env) -> None:
    _, client, topic_id = env
    await produce(client, 10)
    first = await share_fetch(client, topic_id, 0, "m1", max_records=4)
    assert (first.error_code, first.acquisition_lock_timeout_ms) == (0, 30000)
    assert acquired(first) == [(0, 3, 1)]
    second = await share_fetch(client, topic_id, 0, "m2")
    assert acquired(second) == [(4, 9, 1)]
    # m1 accepts 0-1 and releases 2-3 while fetching again: it gets 2-3 back, delivered twice
    again = await share_fetch(client, topic_id, 1, "m1", acks=[(0, 1, ACCEPT), (2, 3, RELEASE)])
    part = again.responses[0].partitions[0]
    assert part.acknowledge_error_code == 0
    assert acquired(again) == [(2, 3, 2)]
    # m2 cannot acknowledge what m1 holds
    wrong = await share_ack(client, topic_id, 1, [(2, 3, ACCEPT)], member="m2")
    assert wrong.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    done = await share_ack(client, topic_id, 2, [(4, 9, REJECT)], member="m2")
    assert done.responses[0].partitions[0].error_code == 0


async def test_by_duration_starts_at_the_first_record_recent_by_the_brokers_clock(env) -> None:
    """share.auto.offset.reset=by_duration:PT1H: the share-partition starts at the first record
    stamped within the last hour of the broker's clock (the clock the simulation replaces)."""
    from strom.storage.clock import use_clock

    _, client, topic_id = env
    now = 1_000_000_000_000  # the broker's wall clock here (2001-09-09)
    hour = 3_600_000
    stamps = [now - 3 * hour, now - 2 * hour, now - hour // 2, now - hour // 4]
    records = [Record(i, ts - stamps[0], None, b"v%d" % i, []) for i, ts in enumerate(stamps)]
    data = build_batch(records, base_timestamp=stamps[0])
    body = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": data}]}],
    }
    assert (await client.request(ApiKey.PRODUCE, 9, body)).responses[0].partition_responses[0].error_code == 0
    assert (await alter_group(client, "share.auto.offset.reset", "by_duration:PT1H")).error_code == ErrorCode.NONE

    class Fixed:
        def wall_ms(self) -> int:
            return now

        def monotonic(self) -> float:
            import time

            return time.monotonic()

    with use_clock(Fixed()):
        fetched = await share_fetch(client, topic_id, 0)
    assert acquired(fetched) == [(2, 3, 1)]


@pytest.mark.parametrize(
    ("opening", "then", "code"),
    [
        (None, 1, ErrorCode.SHARE_SESSION_NOT_FOUND),
        (None, -1, ErrorCode.SHARE_SESSION_NOT_FOUND),
        (0, 2, ErrorCode.INVALID_SHARE_SESSION_EPOCH),
        (0, 1, ErrorCode.NONE),
    ],
)
async def test_share_session_epochs(env, opening, then, code) -> None:
    _, client, topic_id = env
    if opening is not None:
        await share_fetch(client, topic_id, opening)
    assert (await share_fetch(client, topic_id, then)).error_code == code


async def test_acknowledgements_in_an_initial_fetch_and_acknowledge_epoch_zero_are_refused(env) -> None:
    _, client, topic_id = env
    refused = await share_fetch(client, topic_id, 0, acks=[(0, 0, ACCEPT)])
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    assert (await share_ack(client, topic_id, 0, [(0, 0, ACCEPT)])).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH


async def test_unknown_topic_id_is_answered_per_partition(env) -> None:
    _, client, _ = env
    response = await share_fetch(client, b"\x01" * 16, 0)
    assert response.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


async def test_long_poll_wakes_on_new_records(env, nursery, autojump_clock) -> None:
    broker, client, topic_id = env
    other = open_client(broker, nursery)
    got: list = []

    async def poll() -> None:
        got.append(await share_fetch(client, topic_id, 0, wait_ms=10_000))

    async with trio.open_nursery() as polling:
        polling.start_soon(poll)
        await trio.sleep(1)
        assert not got
        await produce(other, 3)
    assert acquired(got[0]) == [(0, 2, 1)]
    assert trio.current_time() < 5  # woken by the records, not by the 10 s wait


async def test_expired_lock_redelivers_and_the_limit_archives(env, autojump_clock) -> None:
    _, client, topic_id = env
    assert (await alter_group(client, "share.record.lock.duration.ms", "1000")).error_code == 0
    assert (await alter_group(client, "share.delivery.count.limit", "2")).error_code == 0
    await produce(client, 2)
    assert acquired(await share_fetch(client, topic_id, 0, "m1")) == [(0, 1, 1)]
    await trio.sleep(1.5)
    assert acquired(await share_fetch(client, topic_id, 0, "m2")) == [(0, 1, 2)]
    await trio.sleep(1.5)
    await produce(client, 1, first=2)
    # the second delivery was the last: 0-1 are archived, only the new record comes
    assert acquired(await share_fetch(client, topic_id, 1, "m2")) == [(2, 2, 1)]


async def test_final_epoch_releases_what_the_member_holds(env) -> None:
    _, client, topic_id = env
    await produce(client, 3)
    await share_fetch(client, topic_id, 0, "m1")
    closed = await share_fetch(client, topic_id, -1, "m1", acks=[(0, 0, ACCEPT)], partitions=(0,))
    assert closed.error_code == 0
    assert acquired(await share_fetch(client, topic_id, 0, "m2")) == [(1, 2, 2)]
    assert (await share_fetch(client, topic_id, 1, "m1")).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("share.session.timeout.ms", "1000",
         "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
        ("share.delivery.count.limit", "1",
         "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
        ("foo.bar", "1", "Unknown group config name: foo.bar"),
    ],
)  # fmt: skip
async def test_group_configs_are_checked_as_kafka_does(env, key, value, message) -> None:
    _, client, _ = env
    refused = await alter_group(client, key, value)
    assert (refused.error_code, refused.error_message) == (ErrorCode.INVALID_CONFIG, message)


async def test_group_configs_are_described_with_their_source(env) -> None:
    _, client, _ = env
    response = await client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {"resources": [{"resource_type": 32, "resource_name": "g", "configuration_keys": None}],
         "include_synonyms": False, "include_documentation": False},
    )  # fmt: skip
    configs = {c.name: (c.value, c.config_source) for c in response.results[0].configs}
    assert configs["share.auto.offset.reset"] == ("earliest", 8)  # GROUP_CONFIG
    assert configs["share.record.lock.duration.ms"] == ("30000", 5)  # DEFAULT_CONFIG


async def _described(client, group: str) -> dict[str, tuple[str, int]]:
    response = await client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {"resources": [{"resource_type": 32, "resource_name": group, "configuration_keys": None}],
         "include_synonyms": False, "include_documentation": False},
    )  # fmt: skip
    return {c.name: (c.value, c.config_source) for c in response.results[0].configs}


async def test_group_configs_survive_a_restart_and_a_delete_is_kept_too(tmp_path, nursery) -> None:
    data = tmp_path / "data"
    broker = make_broker(data, **GROUP_TEST_CONFIG)
    client = open_client(broker, nursery)
    assert (await alter_group(client, "share.delivery.count.limit", "7", "kept")).error_code == ErrorCode.NONE
    assert (await alter_group(client, "share.isolation.level", "read_committed", "kept")).error_code == 0
    assert (await alter_group(client, "share.auto.offset.reset", "earliest", "gone")).error_code == 0
    response = await client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {"resources": [{"resource_type": 32, "resource_name": "gone",
                        "configs": [{"name": "share.auto.offset.reset", "config_operation": 1, "value": None}]}],
         "validate_only": False},
    )  # fmt: skip
    assert response.responses[0].error_code == ErrorCode.NONE
    broker.close()

    again = make_broker(data, **GROUP_TEST_CONFIG)
    try:
        client = open_client(again, nursery)
        kept = await _described(client, "kept")
        assert kept["share.delivery.count.limit"] == ("7", 8)  # GROUP_CONFIG, as stored before the restart
        assert kept["share.isolation.level"] == ("read_committed", 8)
        assert (await _described(client, "gone"))["share.auto.offset.reset"] == ("latest", 5)  # DEFAULT_CONFIG
        assert again.share.settings_for("kept").delivery_count_limit == 7  # what share-partitions follow
        assert again.share.settings_for("kept").read_committed
    finally:
        again.close()


async def test_share_sessions_past_the_limit_are_refused(env) -> None:
    broker, client, topic_id = env
    broker.share.max_sessions = 1  # group.share.max.share.sessions
    assert (await share_fetch(client, topic_id, 0, "m1")).error_code == ErrorCode.NONE
    assert (await share_fetch(client, topic_id, 0, "m2")).error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert (await share_fetch(client, topic_id, 0, "m1")).error_code == ErrorCode.NONE  # its own replaced


async def test_metrics_carry_share_groups_partitions_and_acknowledgements(env, autojump_clock) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from strom.broker.console.metrics import collect, render
    from strom.broker.console.source import BrokerSource

    broker, client, topic_id = env
    assert (await alter_group(client, "share.record.lock.duration.ms", "1000")).error_code == 0
    await client.request(
        ApiKey.SHARE_GROUP_HEARTBEAT,
        1,
        {"group_id": "g", "member_id": "m1", "member_epoch": 0, "rack_id": None, "subscribed_topic_names": ["t"]},
    )
    await produce(client, 5)
    await share_fetch(client, topic_id, 0, "m1")
    await share_ack(client, topic_id, 1, [(0, 1, ACCEPT), (2, 2, REJECT)])
    await trio.sleep(1.5)  # 3-4 stay acquired until their lock expires
    text = render(await collect(BrokerSource(broker))).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    part = (("group", "g"), ("partition", "0"), ("topic", "t"))
    assert samples[("kafka_server_group_coordinator_metrics_group_count", (("protocol", "share"),))] == 1
    assert samples[("kafka_server_group_coordinator_metrics_share_group_count", (("state", "Stable"),))] == 1
    assert samples[("kafka_server_brokertopicmetrics_total_share_fetch_requests_total", (("topic", "t"),))] == 1
    assert (
        samples[("kafka_server_brokertopicmetrics_total_share_acknowledgement_requests_total", (("topic", "t"),))] == 1
    )
    assert samples[("kafka_server_sharegroupmetrics_record_acknowledgements_total", (("ack_type", "Accept"),))] == 2
    assert samples[("kafka_server_sharegroupmetrics_record_acknowledgements_total", (("ack_type", "Reject"),))] == 1
    assert samples[("kafka_server_sharepartitionmetrics_acquisition_lock_timeout_total", part)] == 2
    assert samples[("kafka_server_sharepartitionmetrics_start_offset", part)] == 3
    assert samples[("kafka_server_sharepartitionmetrics_in_flight_message_count", part)] == 2
    assert samples[("kafka_server_sharepartitionmetrics_records", (*part[:2], ("state", "available"), part[2]))] == 2

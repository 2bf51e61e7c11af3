"""The broker's APIs end to end over an in-memory connection: what a client sees."""

from __future__ import annotations

import struct

import pytest
import trio

from strom.broker.apis import SUPPORTED, SUPPORTED_RANGE
from strom.protocol.codec import decode_response
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch, iter_batches, iter_records
from strom.protocol.schema import ApiKey, api_spec

from .helpers import make_broker, open_client


def batch(n: int, *, key_prefix=b"k", base_timestamp=1_700_000_000_000, **kw) -> bytes:
    records = [Record(i, i, key_prefix + str(i).encode(), b"value-%d" % i, [("h", b"%d" % i)]) for i in range(n)]
    return build_batch(records, base_timestamp=base_timestamp, **kw)


def produce_body(topic: str, records: bytes, partition: int = 0, acks: int = -1) -> dict:
    return {
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


def fetch_body(topic: str, offset: int, partition: int = 0, max_wait_ms: int = 0, min_bytes: int = 1) -> dict:
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
            }
        ],
    }


async def create(client, name: str, partitions: int = 1, configs: dict | None = None):
    response = await client.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout_ms": 1000,
        },
    )
    return response.topics[0]


async def test_api_versions_lists_every_registered_api(connect):
    client = await connect()
    response = await client.request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert response.error_code == ErrorCode.NONE
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == {key: (lo, hi) for key, lo, hi in SUPPORTED}
    assert advertised[ApiKey.PRODUCE][0] == 0, "librdkafka needs Produce v0 advertised to use compression"
    for key, (lo, hi) in advertised.items():
        assert api_spec(key).min_version <= lo <= hi <= api_spec(key).max_version


async def test_api_versions_too_new_is_answered_with_v0_and_unsupported_version(connect):
    client = await connect()
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 99, 42, 1) + b"x" + b"\x00"
    await client.stream.send_all(struct.pack(">i", len(header)) + header)
    frame = await client.receive_frame()
    correlation_id, response = decode_response(ApiKey.API_VERSIONS, 0, frame)
    assert correlation_id == 42
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    # as Kafka: only ApiVersions' own range, for the client to pick the version it asks again with
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (ApiKey.API_VERSIONS, *SUPPORTED_RANGE[ApiKey.API_VERSIONS])
    ]
    again = await client.request(
        ApiKey.API_VERSIONS,
        response.api_keys[0].max_version,
        {"client_software_name": "t", "client_software_version": "1"},
    )
    assert again.error_code == ErrorCode.NONE and len(again.api_keys) == len(SUPPORTED)


async def test_metadata_auto_creates_topics_with_num_partitions(tmp_path, nursery):
    b = make_broker(tmp_path, num_partitions=3)
    try:
        client = open_client(b, nursery)
        response = await client.request(
            ApiKey.METADATA,
            12,
            {"topics": [{"name": "auto", "topic_id": bytes(16)}], "allow_auto_topic_creation": True},
        )
        topic = response.topics[0]
        assert topic.error_code == ErrorCode.NONE
        assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
        assert all(p.leader_id == b.node_id and p.isr_nodes == [b.node_id] for p in topic.partitions)
        refused = await client.request(
            ApiKey.METADATA,
            12,
            {"topics": [{"name": "nope", "topic_id": bytes(16)}], "allow_auto_topic_creation": False},
        )
        assert refused.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        bad = await client.request(ApiKey.METADATA, 1, {"topics": [{"name": "bad name!"}]})
        assert bad.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    finally:
        b.close()


async def test_auto_create_off_refuses_metadata_and_produce(tmp_path, nursery):
    b = make_broker(tmp_path, auto_create_topics_enable="false")
    try:
        client = open_client(b, nursery)
        response = await client.request(
            ApiKey.METADATA, 9, {"topics": [{"name": "missing"}], "allow_auto_topic_creation": True}
        )
        assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        produced = await client.request(ApiKey.PRODUCE, 9, produce_body("missing", batch(1)))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "missing" not in b.topics.topics
    finally:
        b.close()


@pytest.mark.parametrize("fetch_version", [4, 11, 12, 13, 17])
async def test_produce_then_fetch_returns_identical_records(connect, broker, fetch_version):
    client = await connect()
    await create(client, "t")
    first = await client.request(ApiKey.PRODUCE, 9, produce_body("t", batch(10)))
    second = await client.request(ApiKey.PRODUCE, 3, produce_body("t", batch(5, key_prefix=b"x")))
    assert first.responses[0].partition_responses[0].base_offset == 0
    assert second.responses[0].partition_responses[0].base_offset == 10
    body = fetch_body("t", 0)
    if fetch_version >= 13:
        body["topics"][0]["topic_id"] = broker.topics.topics["t"].topic_id
    response = await client.request(ApiKey.FETCH, fetch_version, body)
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    assert part.high_watermark == 15
    records = list(iter_records(part.records))
    assert [r.offset for r in records] == list(range(15))
    assert records[3].key == b"k3" and records[3].value == b"value-3" and records[3].headers == [("h", b"3")]
    assert records[12].key == b"x2"
    assert records[3].timestamp == 1_700_000_000_003


async def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(connect):
    client = await connect()
    await create(client, "mid")
    await client.request(ApiKey.PRODUCE, 9, produce_body("mid", batch(100)))
    response = await client.request(ApiKey.FETCH, 12, fetch_body("mid", 37))
    offsets = [r.offset for r in iter_records(response.responses[0].partitions[0].records)]
    assert offsets[0] <= 37 and offsets[-1] == 99 and 37 in offsets


async def test_fetch_out_of_range_and_unknown_topic(connect):
    client = await connect()
    await create(client, "r")
    await client.request(ApiKey.PRODUCE, 9, produce_body("r", batch(3)))
    response = await client.request(ApiKey.FETCH, 12, fetch_body("r", 50))
    assert response.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    response = await client.request(ApiKey.FETCH, 12, fetch_body("nothere", 0))
    assert response.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_old_fetch_versions_get_down_converted_message_sets(connect):
    from strom.protocol.records.legacy import iter_message_set as iter_messages

    client = await connect()
    await create(client, "old")
    await client.request(ApiKey.PRODUCE, 9, produce_body("old", batch(4)))
    for version, magic in ((0, 0), (2, 1)):
        response = await client.request(ApiKey.FETCH, version, fetch_body("old", 1))
        messages = list(iter_messages(response.responses[0].partitions[0].records))
        assert [m.offset for m in messages][-1] == 3
        assert {m.magic for m in messages} == {magic}
        assert messages[-1].key == b"k3"


async def test_long_poll_waits_for_data_or_max_wait(connect, autojump_clock):
    client = await connect()
    await create(client, "lp")
    start = trio.current_time()
    response = await client.request(ApiKey.FETCH, 12, fetch_body("lp", 0, max_wait_ms=5000))
    assert response.responses[0].partitions[0].records in (None, b"")
    assert trio.current_time() - start >= 5.0
    producer = await connect()
    start = trio.current_time()
    sent = await client.send(ApiKey.FETCH, 12, fetch_body("lp", 0, max_wait_ms=30000))
    await trio.sleep(1)
    await producer.request(ApiKey.PRODUCE, 9, produce_body("lp", batch(2)))
    correlation_id, response = await client.receive(ApiKey.FETCH, 12)
    assert correlation_id == sent
    assert trio.current_time() - start < 30
    assert [r.offset for r in iter_records(response.responses[0].partitions[0].records)] == [0, 1]


async def test_a_long_poll_is_woken_by_its_own_partitions_not_by_others(connect, autojump_clock, monkeypatch):
    from strom.broker.replica.manager import ReplicaManager

    reads = []
    real = ReplicaManager.read_partition

    def counting(manager, params, name, req, *args):
        reads.append((name, req.partition))
        return real(manager, params, name, req, *args)

    monkeypatch.setattr(ReplicaManager, "read_partition", counting)
    client, producer = await connect(), await connect()
    await create(client, "quiet")
    await create(client, "busy")
    sent = await client.send(ApiKey.FETCH, 12, fetch_body("quiet", 0, max_wait_ms=30000))
    await trio.sleep(1)
    for _ in range(5):
        await producer.request(ApiKey.PRODUCE, 9, produce_body("busy", batch(1)))
    await trio.sleep(1)
    assert reads == [("quiet", 0)]  # appends elsewhere did not make the poll read again
    await producer.request(ApiKey.PRODUCE, 9, produce_body("quiet", batch(2)))
    correlation_id, response = await client.receive(ApiKey.FETCH, 12)
    assert correlation_id == sent and reads == [("quiet", 0)] * 2
    assert [r.offset for r in iter_records(response.responses[0].partitions[0].records)] == [0, 1]


async def test_acks_zero_gets_no_response_but_is_stored(connect):
    client = await connect()
    await create(client, "a0")
    await client.send(ApiKey.PRODUCE, 9, produce_body("a0", batch(2), acks=0))
    response = await client.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "a0", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    assert response.topics[0].partitions[0].offset == 2


async def test_corrupt_batch_is_rejected_with_corrupt_message(connect):
    client = await connect()
    await create(client, "c")
    data = bytearray(batch(3))
    data[-1] ^= 0xFF
    response = await client.request(ApiKey.PRODUCE, 9, produce_body("c", bytes(data)))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    ok = await client.request(ApiKey.PRODUCE, 9, produce_body("c", batch(1)))
    assert ok.responses[0].partition_responses[0].base_offset == 0


async def test_oversized_batch_gets_message_too_large(connect):
    client = await connect()
    await create(client, "big", configs={"max.message.bytes": "1000"})
    records = [Record(0, 0, b"k", b"x" * 5000, [])]
    response = await client.request(ApiKey.PRODUCE, 9, produce_body("big", build_batch(records)))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE


async def test_list_offsets_earliest_latest_by_timestamp_and_max(connect):
    client = await connect()
    await create(client, "lo")
    await client.request(ApiKey.PRODUCE, 9, produce_body("lo", batch(10, base_timestamp=1000)))
    await client.request(ApiKey.PRODUCE, 9, produce_body("lo", batch(10, base_timestamp=5000)))

    async def query(ts, version=7):
        response = await client.request(
            ApiKey.LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": "lo", "partitions": [{"partition_index": 0, "timestamp": ts}]}],
            },
        )
        return response.topics[0].partitions[0]

    assert (await query(-2)).offset == 0
    assert (await query(-1)).offset == 20
    assert (await query(5000)).offset == 10
    assert (await query(1005)).offset in range(0, 10)
    assert (await query(10**12)).offset == -1
    max_ts = await query(-3)
    assert max_ts.timestamp == 5009 and max_ts.offset == 19
    v0 = await query(-1, version=0)
    assert list(v0.old_style_offsets) == [20]


async def test_idempotent_producer_duplicates_and_sequence_gaps(connect):
    client = await connect()
    await create(client, "idem")
    init = await client.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
    pid, epoch = init.producer_id, init.producer_epoch
    assert init.error_code == ErrorCode.NONE and pid >= 0 and epoch == 0
    first = batch(5, producer_id=pid, producer_epoch=epoch, base_sequence=0)
    r1 = await client.request(ApiKey.PRODUCE, 9, produce_body("idem", first))
    r2 = await client.request(ApiKey.PRODUCE, 9, produce_body("idem", first))
    p1, p2 = r1.responses[0].partition_responses[0], r2.responses[0].partition_responses[0]
    assert p1.error_code == p2.error_code == ErrorCode.NONE
    assert p1.base_offset == p2.base_offset == 0
    gap = batch(2, producer_id=pid, producer_epoch=epoch, base_sequence=9)
    r3 = await client.request(ApiKey.PRODUCE, 9, produce_body("idem", gap))
    assert r3.responses[0].partition_responses[0].error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    nxt = batch(2, producer_id=pid, producer_epoch=epoch, base_sequence=5)
    r4 = await client.request(ApiKey.PRODUCE, 9, produce_body("idem", nxt))
    assert r4.responses[0].partition_responses[0].base_offset == 5
    again = await client.request(
        ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000}
    )
    assert again.producer_id != pid


async def test_topic_admin_round_trip(connect, broker):
    client = await connect()
    created = await create(client, "adm", 2, {"retention.ms": "1234"})
    assert created.error_code == ErrorCode.NONE and created.num_partitions == 2
    assert (await create(client, "adm")).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    bad = await create(client, "adm2", 1, {"retention.ms": "soon"})
    assert bad.error_code == ErrorCode.INVALID_CONFIG

    grown = await client.request(
        ApiKey.CREATE_PARTITIONS,
        3,
        {"topics": [{"name": "adm", "count": 4, "assignments": None}], "timeout_ms": 1000, "validate_only": False},
    )
    assert grown.results[0].error_code == ErrorCode.NONE
    shrink = await client.request(
        ApiKey.CREATE_PARTITIONS,
        3,
        {"topics": [{"name": "adm", "count": 2, "assignments": None}], "timeout_ms": 1000, "validate_only": False},
    )
    assert shrink.results[0].error_code == ErrorCode.INVALID_PARTITIONS

    described = await client.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [{"resource_type": 2, "resource_name": "adm", "configuration_keys": None}],
            "include_synonyms": True,
        },
    )
    configs = {c.name: c for c in described.results[0].configs}
    assert configs["retention.ms"].value == "1234" and configs["retention.ms"].config_source == 1
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].config_source == 5

    altered = await client.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "adm",
                    "configs": [
                        {"name": "retention.ms", "config_operation": 1, "value": None},
                        {"name": "internal.segment.bytes", "config_operation": 0, "value": "100000"},
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    assert altered.responses[0].error_code == ErrorCode.NONE
    assert broker.topics.topics["adm"].configs == {"internal.segment.bytes": "100000"}
    assert broker.replicas.partition("adm", 0).log.config.segment_bytes == 100000

    deleted = await client.request(
        ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "adm", "topic_id": bytes(16)}], "timeout_ms": 1000}
    )
    assert deleted.responses[0].error_code == ErrorCode.NONE
    metadata = await client.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert [t.name for t in metadata.topics] == []


async def test_malformed_request_closes_only_that_connection(connect):
    bad = await connect()
    await bad.stream.send_all(struct.pack(">ihhi", 10, ApiKey.METADATA, 9, 1) + b"\xff\xff")
    with pytest.raises(EOFError):
        await bad.receive_frame()
    good = await connect()
    response = await good.request(ApiKey.API_VERSIONS, 0, {})
    assert response.error_code == ErrorCode.NONE


async def test_data_survives_a_restart(tmp_path, nursery):
    b = make_broker(tmp_path)
    c = open_client(b, nursery)
    await create(c, "keep", 2, {"retention.ms": "99999"})
    await c.request(ApiKey.PRODUCE, 9, produce_body("keep", batch(7), partition=1))
    topic_id = b.topics.topics["keep"].topic_id
    b.close()
    b2 = make_broker(tmp_path)
    try:
        c2 = open_client(b2, nursery)
        assert b2.topics.topics["keep"].topic_id == topic_id
        assert b2.topics.topics["keep"].configs == {"retention.ms": "99999"}
        response = await c2.request(ApiKey.FETCH, 12, fetch_body("keep", 0, partition=1))
        assert [r.offset for r in iter_records(response.responses[0].partitions[0].records)] == list(range(7))
    finally:
        b2.close()


@pytest.mark.parametrize("codec_name,codec", [("gzip", 1), ("zstd", 4), ("uncompressed", 0)])
async def test_topic_compression_type_recompresses_batches(connect, broker, codec_name, codec):
    from strom.protocol.records.header import parse_header

    client = await connect()
    await create(client, "z", configs={"compression.type": codec_name})
    pid = (await client.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None})).producer_id
    produced = batch(20, compression=3 if codec != 3 else 0, producer_id=pid, producer_epoch=0, base_sequence=0)
    response = await client.request(ApiKey.PRODUCE, 9, produce_body("z", produced))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    fetched = (await client.request(ApiKey.FETCH, 12, fetch_body("z", 0))).responses[0].partitions[0].records
    header = parse_header(fetched)
    assert header.compression == codec
    assert (header.producer_id, header.base_sequence) == (pid, 0)
    assert [r.value for r in iter_records(fetched)] == [b"value-%d" % i for i in range(20)]
    duplicate = await client.request(ApiKey.PRODUCE, 9, produce_body("z", produced))
    assert duplicate.responses[0].partition_responses[0].base_offset == 0


async def test_follower_fetch_reports_divergence_by_leader_epoch(connect, broker):
    client = await connect()
    await create(client, "div")
    await client.request(ApiKey.PRODUCE, 9, produce_body("div", batch(5)))
    partition = broker.replicas.partition("div", 0)
    partition.log.leader_epoch_cache.assign(1, partition.log.log_end_offset)
    partition.leader_epoch = 1
    await client.request(ApiKey.PRODUCE, 9, produce_body("div", batch(3)))
    body = fetch_body("div", 7)
    body["replica_id"] = 5
    body["topics"][0]["partitions"][0].update(last_fetched_epoch=0, current_leader_epoch=1)
    response = await client.request(ApiKey.FETCH, 12, body)
    part = response.responses[0].partitions[0]
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 5)
    assert not part.records
    body["topics"][0]["partitions"][0].update(fetch_offset=5, last_fetched_epoch=0)
    caught_up = (await client.request(ApiKey.FETCH, 12, body)).responses[0].partitions[0]
    assert caught_up.diverging_epoch.end_offset == -1
    assert [r.offset for r in iter_records(caught_up.records)][-1] == 7


async def test_compacted_topic_refuses_null_keys_and_keeps_the_last_value_per_key(connect, broker):
    client = await connect()
    await create(
        client,
        "compacted",
        configs={"cleanup.policy": "compact", "internal.segment.bytes": "1000", "min.cleanable.dirty.ratio": "0.01"},
    )
    keyless = build_batch([Record(0, 0, None, b"v")])
    refused = await client.request(ApiKey.PRODUCE, 9, produce_body("compacted", keyless))
    assert refused.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD
    for round_ in range(20):
        records = [Record(i, 0, b"key-%d" % i, b"round-%d" % round_) for i in range(3)]
        await client.request(ApiKey.PRODUCE, 9, produce_body("compacted", build_batch(records)))
    await broker._clean()
    survivors = {}
    offset = 0
    while True:
        part = (await client.request(ApiKey.FETCH, 12, fetch_body("compacted", offset))).responses[0].partitions[0]
        if not part.records:
            break
        for r in iter_records(part.records):
            survivors.setdefault(r.key, []).append((r.offset, r.value))
        offset = [h.last_offset for _, h in iter_batches(part.records)][-1] + 1
    assert offset == 60, "offsets never change and the log end stays where it was"
    assert all(values[-1][1] == b"round-19" for values in survivors.values())
    assert sum(len(v) for v in survivors.values()) < 60, "cleaning removed superseded values"


async def test_an_api_the_broker_does_not_offer_closes_only_that_connection(connect, caplog):
    from strom.protocol.codec import encode_request

    client = await connect()
    await client.stream.send_all(encode_request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 1, 3, "t", {}))
    with pytest.raises(EOFError):
        await client.receive_frame()
    assert "not supported by this broker" in caplog.text
    other = await connect()
    assert (
        await other.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    ).error_code == ErrorCode.NONE


async def test_kafka_topic_configs_without_an_effect_here_are_still_accepted(connect):
    client = await connect()
    created = await create(client, "legacy", configs={"message.format.version": "0.10.0.0", "preallocate": "true"})
    assert created.error_code == ErrorCode.NONE
    altered = await client.request(
        ApiKey.ALTER_CONFIGS,
        2,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "legacy",
                    "configs": [{"name": "message.format.version", "value": "2.8"}],
                }
            ],
            "validate_only": False,
        },
    )
    assert altered.responses[0].error_code == ErrorCode.NONE
    bad = await client.request(
        ApiKey.ALTER_CONFIGS,
        2,
        {
            "resources": [
                {"resource_type": 2, "resource_name": "legacy", "configs": [{"name": "no.such.config", "value": "1"}]}
            ],
            "validate_only": False,
        },
    )
    assert bad.responses[0].error_code == ErrorCode.INVALID_CONFIG

"""Fault injection in the request path (strom.testing.faults), over in-memory connections."""

from __future__ import annotations

import pytest
import trio
from construct import Container

from strom.broker.apis import HANDLERS, SUPPORTED
from strom.protocol.codec import RequestHeader, decode_response, default_value, encode_response
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey, api_spec, in_range
from strom.testing.faults import ErrorAnswer, api_key_of, error_code_of, kafka_releases, request_faults

from .test_apis import batch, create, fetch_body


def produce_two(topic: str) -> dict:
    return {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch(2)}, {"index": 1, "records": batch(3)}]}
        ],
    }


async def test_error_on_one_partition_leaves_the_other_handled_and_appends_nothing(connect, broker):
    client = await connect()
    await create(client, "f", partitions=2)
    injector = request_faults(broker)
    injector.add("Produce", error="NOT_LEADER_OR_FOLLOWER", topic="f", partition=0)
    assert injector.installed
    response = await client.request(ApiKey.PRODUCE, 9, produce_two("f"))
    parts = {p.index: p for p in response.responses[0].partition_responses}
    assert parts[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and parts[0].base_offset == -1
    assert parts[1].error_code == 0 and parts[1].base_offset == 0
    assert broker.replicas.partition("f", 0).log.log_end_offset == 0
    assert broker.replicas.partition("f", 1).log.log_end_offset == 3
    # count=1: used up, the rule is gone and the request path is back to no check at all
    assert not injector.installed and injector.rules == []
    response = await client.request(ApiKey.PRODUCE, 9, produce_two("f"))
    assert [p.error_code for p in response.responses[0].partition_responses] == [0, 0]


async def test_count_client_id_and_other_topics(connect, broker):
    client = await connect()
    await create(client, "a")
    await create(client, "b")
    injector = request_faults(broker)
    fault = injector.add(ApiKey.FETCH, error=ErrorCode.UNKNOWN_SERVER_ERROR, count=2, topic="a")
    injector.add("ListOffsets", error="LEADER_NOT_AVAILABLE", client_id="someone-else")
    for _ in range(3):  # topic b and another client id: untouched
        response = await client.request(ApiKey.FETCH, 12, fetch_body("b", 0))
        assert response.responses[0].partitions[0].error_code == 0
    codes = [
        (await client.request(ApiKey.FETCH, 12, fetch_body("a", 0))).responses[0].partitions[0].error_code
        for _ in range(3)
    ]
    assert codes == [ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR, 0]
    assert fault.hits == 2
    lo = await client.request(
        ApiKey.LIST_OFFSETS,
        5,
        {"replica_id": -1, "topics": [{"name": "a", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
    )
    assert lo.topics[0].partitions[0].error_code == 0
    assert [r["api"] for r in injector.status()["rules"]] == ["ListOffsets"]


async def test_drop_after_takes_effect_and_closes_the_connection(connect, broker):
    client = await connect()
    await create(client, "d")
    request_faults(broker).add("Produce", drop="after")
    await client.send(
        ApiKey.PRODUCE,
        9,
        {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "d", "partition_data": [{"index": 0, "records": batch(4)}]}],
        },
    )
    with pytest.raises(EOFError):
        await client.receive_frame()
    assert broker.replicas.partition("d", 0).log.log_end_offset == 4


async def test_drop_before_takes_no_effect(connect, broker):
    client = await connect()
    await create(client, "d")
    request_faults(broker).add("Produce", drop="before", topic="d")
    await client.send(
        ApiKey.PRODUCE,
        9,
        {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "d", "partition_data": [{"index": 0, "records": batch(4)}]}],
        },
    )
    with pytest.raises(EOFError):
        await client.receive_frame()
    assert broker.replicas.partition("d", 0).log.log_end_offset == 0


async def test_delay_holds_the_answer(connect, broker, autojump_clock):
    client = await connect()
    await create(client, "slow")
    request_faults(broker).add("Fetch", delay_ms=5000)
    start = trio.current_time()
    response = await client.request(ApiKey.FETCH, 12, fetch_body("slow", 0))
    assert trio.current_time() - start >= 5.0
    assert response.responses[0].partitions[0].error_code == 0


async def test_pause_holds_requests_until_resumed(connect, broker, nursery):
    client = await connect()
    injector = request_faults(broker)
    injector.pause()
    answered = trio.Event()

    async def ask():
        await client.request(ApiKey.API_VERSIONS, 3, {})
        answered.set()

    nursery.start_soon(ask)
    await trio.sleep(0.2)
    assert not answered.is_set()
    injector.resume()
    with trio.fail_after(5):
        await answered.wait()
    assert not injector.installed


async def test_version_cap_advertises_and_enforces_a_release(connect, broker):
    client = await connect()
    await create(client, "v")
    injector = request_faults(broker)
    injector.record()
    injector.cap_versions("2.0")
    versions = {
        k.api_key: (k.min_version, k.max_version) for k in (await client.request(ApiKey.API_VERSIONS, 2, {})).api_keys
    }  # 2.0 knew v0-v2
    assert versions[ApiKey.PRODUCE] == (0, 6) and versions[ApiKey.FETCH] == (0, 8)
    assert ApiKey.DESCRIBE_CLUSTER not in versions  # Kafka 2.0 had no DescribeCluster
    ok = await client.request(
        ApiKey.PRODUCE,
        6,
        {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "v", "partition_data": [{"index": 0, "records": batch(1)}]}],
        },
    )
    assert ok.responses[0].partition_responses[0].error_code == 0
    await client.send(
        ApiKey.PRODUCE,
        9,
        {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "v", "partition_data": [{"index": 0, "records": batch(1)}]}],
        },
    )
    with pytest.raises(EOFError):
        await client.receive_frame()
    seen = [(r["api"], r["version"], r["client_id"]) for r in injector.recorded()]
    assert seen == [("ApiVersions", 2, "test"), ("Produce", 6, "test"), ("Produce", 9, "test")]
    injector.clear()
    assert not injector.installed


@pytest.mark.parametrize("release, listed", [("2.0", {}), ("2.3", {}), ("2.4", {ApiKey.API_VERSIONS: (0, 3)})])
async def test_api_versions_above_the_cap_gets_unsupported_version_and_the_v0_answer(connect, broker, release, listed):
    """Kafka 2.0 knew ApiVersions up to v2: a v3 request gets what 2.0 answered a version it did
    not know: v0, UNSUPPORTED_VERSION and, before KIP-511 (2.4), no API listed; from 2.4 only
    ApiVersions' own range. The client retries with a version it knows."""
    client = await connect()
    injector = request_faults(broker)
    injector.cap_versions(release)
    ask = 4 if release == "2.4" else 3
    await client.send(ApiKey.API_VERSIONS, ask, {"client_software_name": "test", "client_software_version": "1"})
    _, answer = decode_response(ApiKey.API_VERSIONS, 0, await client.receive_frame())
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == listed
    if release != "2.0":
        return
    fallback = await client.request(ApiKey.API_VERSIONS, 2, {})  # the same connection stays open
    assert fallback.error_code == ErrorCode.NONE
    assert {k.api_key: k.max_version for k in fallback.api_keys}[ApiKey.API_VERSIONS] == 2
    injector.cap_versions(None)
    assert (
        await client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "test", "client_software_version": "1"})
    ).error_code == 0


async def test_metadata_error_on_a_topic(connect, broker):
    client = await connect()
    await create(client, "m", partitions=2)
    await create(client, "n")
    request_faults(broker).add("Metadata", error="LEADER_NOT_AVAILABLE", topic="m", partition=1)
    md = await client.request(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
    topics = {t.name: t for t in md.topics}
    assert topics["m"].error_code == 0
    assert {p.partition_index: p.error_code for p in topics["m"].partitions} == {
        0: 0,
        1: ErrorCode.LEADER_NOT_AVAILABLE,
    }
    assert topics["n"].partitions[0].error_code == 0 and md.brokers


def _request_with_a_topic(api_key: int, version: int) -> Container:
    """A request of schema defaults with one entry in each array (names filled in)."""

    def fill(fields):
        out = Container()
        for f in fields:
            if not in_range(version, f.versions):
                continue
            if f.is_array and f.is_struct:
                out[f.name] = [fill(f.fields)]
            elif f.is_array:
                out[f.name] = ["x"] if f.element_type == "string" else [0]
            elif f.is_struct:
                out[f.name] = fill(f.fields)
            elif f.type == "string":
                out[f.name] = "x"
            else:
                out[f.name] = default_value(f, version)
        return out

    return fill(api_spec(api_key).request.fields)


@pytest.mark.parametrize("api_key", [k for k, _, _ in SUPPORTED])
def test_every_api_and_version_has_an_error_answer_that_encodes(api_key):
    lo, hi = next((lo, hi) for k, lo, hi in SUPPORTED if k == api_key)
    for version in range(lo, hi + 1):
        request = Request(RequestHeader(api_key, version, 7, "c"), _request_with_a_topic(api_key, version), 0)
        answer = ErrorAnswer(
            HANDLERS[api_key], request, ErrorCode.NOT_LEADER_OR_FOLLOWER, lambda t, p: True, lambda i: None
        )
        answer.split()
        body = answer.merge(
            None
            if api_key != 3
            else {
                "brokers": [],
                "topics": [{"name": "x", "error_code": 0, "partitions": [{"partition_index": 0, "error_code": 0}]}],
            }
        )
        frame = b"".join(bytes(p) for p in encode_response(api_key, version, 7, body))
        _, decoded = decode_response(api_key, version, frame[4:])
        assert set(_error_codes(decoded)) == {ErrorCode.NOT_LEADER_OR_FOLLOWER}, (api_key, version, decoded)


def _error_codes(obj) -> list[int]:
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("error_code", "partition_error_code") and v:  # AddPartitionsToTxn v0-3: partition_error_code
                out.append(v)
            else:
                out += _error_codes(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _error_codes(v)
    return out


def test_names_of_apis_and_errors():
    assert api_key_of("Produce") == api_key_of("PRODUCE") == api_key_of("0") == 0
    assert api_key_of("OffsetCommit") == 8
    assert error_code_of("not_leader_or_follower") == error_code_of(6) == 6
    with pytest.raises(ValueError, match="unknown API"):
        api_key_of("Produc")
    with pytest.raises(ValueError, match="unknown error"):
        error_code_of("NOT_A_LEADER")


def test_release_table_is_what_real_brokers_answered():
    """kafka_releases.json holds the ApiVersions answers of real brokers, as kafka-python recorded
    them (4.3: also measured against the reference 4.3.1 broker); every version in it exists in
    Kafka's message definitions. 4.4, which kafka-python has not recorded, is 4.3 with Kafka 4.4's
    ApiVersions v5 and TxnOffsetCommit v6."""
    releases = kafka_releases()
    assert {"1.0", "2.0", "2.8", "3.0", "3.9", "4.0", "4.1", "4.2", "4.3", "4.4"} <= set(releases)
    recorded = pytest.importorskip("kafka.protocol.broker_version_data").BROKER_API_VERSIONS
    for name, apis in releases.items():
        if name == "4.4":
            assert apis == {**releases["4.3"], ApiKey.API_VERSIONS: (0, 5), ApiKey.TXN_OFFSET_COMMIT: (0, 6)}
            continue
        assert apis == {k: tuple(v) for k, v in recorded[tuple(int(x) for x in name.split("."))].items()}, name
    from strom.protocol.schema import all_api_keys

    known = set(all_api_keys())
    for name, apis in releases.items():
        for key, (_lo, hi) in apis.items():
            if key in known:
                assert hi <= api_spec(key).max_version, (name, key)
    assert releases["2.8"][0] == (0, 9) and releases["3.0"][ApiKey.METADATA] == (0, 11)


async def test_a_topic_rule_on_an_api_without_partitions_matches_requests_naming_the_topic(connect, broker):
    client = await connect()
    await create(client, "keep")
    await create(client, "gone")
    rule = request_faults(broker).add("DeleteTopics", error="TOPIC_DELETION_DISABLED", topic="keep")
    response = await client.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": ["gone"], "timeout_ms": 1000})
    assert response.responses[0].error_code == 0 and rule.hits == 0
    response = await client.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": ["keep"], "timeout_ms": 1000})
    assert response.responses[0].error_code == ErrorCode.TOPIC_DELETION_DISABLED and rule.hits == 1
    assert "keep" in broker.topics.topics and "gone" not in broker.topics.topics

"""Codec behaviour: golden frames, defaults, file regions, malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.codec import (
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from strom.protocol.errors import ErrorCode, MalformedRequest, ProtocolError, UnknownApiKey, UnsupportedVersion
from strom.protocol.schema import ApiKey
from strom.protocol.tests.helpers import sample_message

# Captured from confluent-kafka 2.16.1 (librdkafka 2.16.0): its first frame, ApiVersions v3
# with request header v2, client.id "strom-test".
LIBRDKAFKA_API_VERSIONS_V3 = bytes.fromhex(
    "000000430012000300000001000a7374726f6d2d746573740017636f6e666c75656e742d6b61666b612d70"
    "7974686f6e16322e31362e312d72646b61666b612d322e31362e3000"
)

# Metadata v1, correlation id 5, client "c", topics ["t1"] (assembled and checked by hand).
METADATA_V1 = bytes.fromhex(
    "00000013"
    "0003"
    "0001"
    "00000005"
    "0001"
    "63"  # size, key, version, corr, client_id
    "00000001"
    "0002"
    "7431"  # topics: [name "t1"]
)

# Produce v3: transactional_id null, acks -1, timeout 1500 ms, topic "t" partition 0, records "abc".
PRODUCE_V3 = bytes.fromhex(
    "0000002b"
    "0000"
    "0003"
    "0000002a"
    "0003"
    "636c69"
    "ffff"
    "ffff"
    "000005dc"  # transactional_id, acks, timeout_ms
    "00000001"
    "0001"
    "74"  # topic_data: [name "t"
    "00000001"
    "00000000"
    "00000003"
    "616263"  #   partition_data: [index 0, records]]
)


def test_librdkafka_api_versions_v3_request() -> None:
    header, offset = decode_request_header(LIBRDKAFKA_API_VERSIONS_V3[4:])
    assert header == RequestHeader(ApiKey.API_VERSIONS, 3, 1, "strom-test")
    body = decode_request(header.api_key, 3, LIBRDKAFKA_API_VERSIONS_V3[4:], offset)
    assert body == {
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.16.1-rdkafka-2.16.0",
        "cluster_id": None,  # v5+ (KIP-1242), defaulted
        "node_id": -1,
    }
    assert encode_request(18, 3, 1, "strom-test", body) == LIBRDKAFKA_API_VERSIONS_V3


def test_metadata_v1_request() -> None:
    header, offset = decode_request_header(METADATA_V1[4:])
    assert header == RequestHeader(ApiKey.METADATA, 1, 5, "c")
    body = decode_request(3, 1, METADATA_V1[4:], offset)
    assert body.topics == [{"name": "t1", "topic_id": bytes(16)}]  # topic_id: v10+, defaulted
    assert encode_request(3, 1, 5, "c", {"topics": [{"name": "t1"}]}) == METADATA_V1


def test_metadata_v1_null_topics_means_all() -> None:
    frame = encode_request(3, 1, 5, "c", {"topics": None})
    assert frame.endswith(b"\xff\xff\xff\xff")
    header, offset = decode_request_header(frame[4:])
    assert decode_request(3, 1, frame[4:], offset).topics is None


def test_produce_v3_request() -> None:
    header, offset = decode_request_header(PRODUCE_V3[4:])
    assert header == RequestHeader(ApiKey.PRODUCE, 3, 42, "cli")
    body = decode_request(0, 3, PRODUCE_V3[4:], offset)
    assert body.transactional_id is None and body.acks == -1 and body.timeout_ms == 1500
    assert body.topic_data[0].name == "t"
    assert body.topic_data[0].partition_data[0].records == b"abc"
    assert encode_request(0, 3, 42, "cli", body) == PRODUCE_V3


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    [frame] = encode_response(18, 3, 9, {"api_keys": [{"api_key": 0, "min_version": 3, "max_version": 9}]})
    assert frame == bytes.fromhex(
        "00000013"
        "00000009"  # size, correlation id (no tagged-field byte)
        "0000"
        "02"
        "0000"
        "0003"
        "0009"
        "00"  # error, compact array of 1, element tags
        "00000000"
        "00"
    )  # throttle_time_ms, tagged fields


def test_missing_fields_take_schema_defaults() -> None:
    [frame] = encode_response(1, 12, 1, {"responses": [{"topic": "t", "partitions": [{}]}]})
    assert isinstance(frame, bytes)
    _, body = decode_response(1, 12, frame[4:])
    partition = body.responses[0].partitions[0]
    assert partition.last_stable_offset == -1 and partition.log_start_offset == -1
    assert partition.preferred_read_replica == -1 and partition.records == b""
    assert partition.current_leader == {"leader_id": -1, "leader_epoch": -1}


def test_fields_of_other_versions_are_ignored_and_filled_on_decode() -> None:
    frame = encode_request(
        1,
        4,
        1,
        None,
        {
            "max_wait_ms": 5,
            "session_id": 7,  # session_id: v7+
            "topics": [
                {
                    "topic": "a",
                    "topic_id": b"\x01" * 16,  # v13+
                    "partitions": [],
                }
            ],
        },
    )
    header, offset = decode_request_header(frame[4:])
    body = decode_request(1, 4, frame[4:], offset)
    assert body.max_wait_ms == 5 and body.topics[0].topic == "a"
    assert body.topics[0].topic_id == bytes(16)  # absent in v4: default (zero uuid)
    assert body.session_id == 0


def test_tagged_fields_round_trip_and_defaults_are_not_sent() -> None:
    plain = encode_response(1, 12, 1, {"responses": [{"topic": "t", "partitions": [{}]}]})[0]
    same = encode_response(
        1,
        12,
        1,
        {"responses": [{"topic": "t", "partitions": [{"current_leader": {"leader_id": -1, "leader_epoch": -1}}]}]},
    )[0]
    assert plain == same
    tagged = encode_response(
        1,
        12,
        1,
        {"responses": [{"topic": "t", "partitions": [{"current_leader": {"leader_id": 3, "leader_epoch": 7}}]}]},
    )[0]
    assert isinstance(tagged, bytes) and isinstance(plain, bytes)
    assert len(tagged) > len(plain)
    _, body = decode_response(1, 12, tagged[4:])
    assert body.responses[0].partitions[0].current_leader == {"leader_id": 3, "leader_epoch": 7}


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = bytearray(encode_request(18, 3, 1, "c", {"client_software_name": "n", "client_software_version": "v"}))
    assert frame[-1] == 0
    frame[-1:] = b"\x01\x05\x02hi"  # one tagged field, tag 5, size 2
    frame[:4] = struct.pack(">i", len(frame) - 4)
    header, offset = decode_request_header(bytes(frame[4:]))
    body = decode_request(18, 3, bytes(frame[4:]), offset)
    assert body.client_software_name == "n"


class Region:
    """A stand-in for a file region: only its size may be used."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"the encoder touched region.{name}")


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_response_file_regions_are_returned_in_place(version: int) -> None:
    regions = [Region(100), Region(7)]
    body = {
        "responses": [
            {
                "topic": "t",
                "topic_id": b"\x02" * 16,
                "partitions": [
                    {"partition_index": 0, "records": regions[0]},
                    {"partition_index": 1, "records": regions[1]},
                ],
            }
        ]
    }
    parts = encode_response(1, version, 3, body)
    assert [p for p in parts if not isinstance(p, bytes)] == regions
    assert parts[1] is regions[0] and parts[3] is regions[1]
    head = parts[0]
    assert isinstance(head, bytes)
    size = int.from_bytes(head[:4], "big")
    assert size == sum(len(p) for p in parts if isinstance(p, bytes)) - 4 + 107
    joined = b"".join(p if isinstance(p, bytes) else b"R" * p.size for p in parts if isinstance(p, (bytes, Region)))
    _, decoded = decode_response(1, version, joined[4:])
    records = [p.records for p in decoded.responses[0].partitions]
    assert records == [b"R" * 100, b"R" * 7]


def test_unknown_api_key_and_unsupported_version() -> None:
    with pytest.raises(UnknownApiKey):
        decode_request(999, 0, b"")
    with pytest.raises(UnsupportedVersion):
        decode_request(18, 99, b"")
    frame = struct.pack(">hhih", 18, 99, 7, 1) + b"c"
    with pytest.raises(UnsupportedVersion) as info:
        decode_request_header(frame)
    assert info.value.header == RequestHeader(18, 99, 7, "c")
    assert isinstance(info.value, ProtocolError)
    with pytest.raises(UnknownApiKey) as unknown:
        decode_request_header(struct.pack(">hhih", 1000, 0, 8, -1))
    assert unknown.value.header == RequestHeader(1000, 0, 8, None)


def test_error_codes() -> None:
    assert ErrorCode.NONE.value == 0 and ErrorCode.UNKNOWN_SERVER_ERROR.value == -1
    assert ErrorCode.OFFSET_OUT_OF_RANGE.value == 1 and ErrorCode.UNSUPPORTED_VERSION.value == 35
    assert ApiKey.PRODUCE.value == 0 and ApiKey.FETCH.value == 1 and ApiKey.API_VERSIONS.value == 18


def test_huge_array_count_fails_fast() -> None:
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(MalformedRequest, match="exceeds"):
        decode_request(0, 3, body)
    compact = b"\x00" + b"\xff\xff\xff\xff\x07"  # Fetch-like compact count of 2**31 - 2
    with pytest.raises(MalformedRequest):
        decode_request(3, 12, compact)


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"\xff\xfe" + b"\x00" * 8, "invalid length"),  # string length -2
        (b"\x00\x02\xff\xfe\x00\x00\x00\x00\x00\x00", "UTF-8"),  # bad utf-8 transactional_id
        (b"\xff\xff\xff\xff", "truncated"),
    ],
)
def test_malformed_produce_bodies(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedRequest, match=reason):
        decode_request(0, 3, body)


def test_varint_too_long() -> None:
    with pytest.raises(MalformedRequest, match="longer than 5"):
        decode_request(18, 3, b"\xff" * 10)


def _valid_frames() -> list[bytes]:
    cases = [(0, 3), (0, 9), (1, 12), (3, 1), (3, 12), (18, 3), (11, 7), (8, 8), (19, 5)]
    return [encode_request(k, v, 1, "c", sample_message(k, v, "request")) for k, v in cases]


VALID = _valid_frames()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID), st.data())
def test_truncated_and_mutated_bodies_raise_only_malformed(frame: bytes, data: st.DataObject) -> None:
    payload = bytearray(frame[4:])
    cut = data.draw(st.integers(0, len(payload)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(payload) - 1), st.integers(0, 255)), max_size=4))
    for pos, value in flips:
        payload[pos] = value
    payload = payload[:cut] if data.draw(st.booleans()) else payload
    try:
        header, offset = decode_request_header(bytes(payload))
        decode_request(header.api_key, header.api_version, bytes(payload), offset)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([(0, 9), (1, 12), (18, 3), (3, 1), (19, 7)]), st.binary(max_size=200))
def test_garbage_bodies_raise_only_malformed(case: tuple[int, int], garbage: bytes) -> None:
    try:
        decode_request(case[0], case[1], garbage)
    except MalformedRequest:
        pass


def test_an_error_message_too_long_for_its_int16_length_is_cut_to_fit() -> None:
    # found by broker/tests/test_fuzz_apis.py: DescribeConfigs v1 for a 32767-byte topic name quoted
    # the name in its error message, the answer could not be encoded and the connection was closed
    name = "\u00e9" * 16383 + "x"
    body = {
        "throttle_time_ms": 0,
        "results": [
            {
                "error_code": 3,
                "error_message": f"Topic {name} does not exist.",
                "resource_type": 2,
                "resource_name": name,
                "configs": [],
            }
        ],
    }
    [frame] = encode_response(ApiKey.DESCRIBE_CONFIGS, 1, 7, body)
    assert isinstance(frame, bytes)
    _, decoded = decode_response(ApiKey.DESCRIBE_CONFIGS, 1, frame[4:])
    result = decoded.results[0]
    assert result.error_code == 3 and result.resource_name == name
    message = result.error_message.encode("utf-8")
    assert len(message) <= 0x7FFF and message.startswith(b"Topic \xc3\xa9") and message.endswith(b"...")

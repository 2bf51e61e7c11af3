"""Connection in the server role: framing, partial input, errors, EOF."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.codec import decode_response, encode_request
from strom.protocol.connection import (
    NEED_DATA,
    SERVER,
    BadRequest,
    Connection,
    ConnectionClosed,
    FrameTooLarge,
    Request,
)
from strom.protocol.errors import ErrorCode, MalformedRequest, UnknownApiKey, UnsupportedVersion
from strom.protocol.tests.helpers import sample_message

API_VERSIONS = encode_request(18, 3, 1, "c", {"client_software_name": "x", "client_software_version": "1"})
PRODUCE = encode_request(0, 9, 2, "c", sample_message(0, 9, "request"))


def test_partial_input_yields_need_data_until_whole() -> None:
    conn = Connection(SERVER)
    assert conn.next_event() is NEED_DATA
    conn.receive_data(API_VERSIONS[:3])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(API_VERSIONS[3:-1])
    assert conn.next_event() is NEED_DATA
    conn.receive_data(API_VERSIONS[-1:] + PRODUCE)
    first, second = conn.next_event(), conn.next_event()
    assert isinstance(first, Request) and first.header.api_key == 18
    assert isinstance(second, Request) and second.header.correlation_id == 2
    assert conn.next_event() is NEED_DATA


def test_response_round_trip() -> None:
    conn = Connection(SERVER)
    conn.receive_data(PRODUCE)
    request = conn.next_event()
    assert isinstance(request, Request)
    [frame] = conn.send_response(
        request, {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 42}]}]}
    )
    assert isinstance(frame, bytes)
    correlation_id, body = decode_response(0, 9, frame[4:])
    assert correlation_id == 2
    assert body.responses[0].partition_responses[0].base_offset == 42


def test_unsupported_api_versions_is_answered_with_v0() -> None:
    conn = Connection(SERVER)
    conn.receive_data(struct.pack(">ihhih", 12, 18, 99, 7, 1) + b"c" + b"\x00\x00\x00")
    bad = conn.next_event()
    assert isinstance(bad, BadRequest) and isinstance(bad.error, UnsupportedVersion)
    assert bad.header is not None and bad.header.correlation_id == 7
    [frame] = conn.send_error(bad, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]})
    assert isinstance(frame, bytes)
    correlation_id, body = decode_response(18, 0, frame[4:])
    assert correlation_id == 7 and body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert body.api_keys == [{"api_key": 18, "min_version": 0, "max_version": 4}]


def test_unknown_api_key_and_malformed_body() -> None:
    conn = Connection(SERVER)
    conn.receive_data(struct.pack(">ihhih", 10, 1000, 0, 3, -1))
    conn.receive_data(struct.pack(">ihhih", 14, 0, 3, 4, -1) + b"\xff\xfe\x00\x00")
    unknown, malformed = conn.next_event(), conn.next_event()
    assert isinstance(unknown, BadRequest) and isinstance(unknown.error, UnknownApiKey)
    assert isinstance(malformed, BadRequest) and isinstance(malformed.error, MalformedRequest)
    assert malformed.header is not None and malformed.header.correlation_id == 4
    assert malformed.error.header == malformed.header


def test_unreadable_header_has_no_header() -> None:
    conn = Connection(SERVER)
    conn.receive_data(struct.pack(">ih", 2, 18))
    bad = conn.next_event()
    assert isinstance(bad, BadRequest) and bad.header is None


def test_frame_too_large_is_terminal() -> None:
    conn = Connection(SERVER, max_frame_size=1000)
    conn.receive_data(struct.pack(">i", 1001))
    event = conn.next_event()
    assert event == FrameTooLarge(1001, 1000)
    conn.receive_data(API_VERSIONS)
    assert conn.next_event() == event
    negative = Connection(SERVER)
    negative.receive_data(struct.pack(">i", -5))
    assert negative.next_event() == FrameTooLarge(-5, 100 * 1024 * 1024)


def test_eof_after_frames_and_mid_frame() -> None:
    conn = Connection(SERVER)
    conn.receive_data(API_VERSIONS + PRODUCE[:10])
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), Request)
    assert conn.next_event() == ConnectionClosed(leftover=10)
    assert conn.next_event() == ConnectionClosed(leftover=10)


def test_large_frame_in_64k_reads() -> None:
    frame = encode_request(
        0,
        9,
        5,
        "c",
        {"topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": bytes(3 * 1024 * 1024)}]}]},
    )
    conn = Connection(SERVER)
    events = []
    for i in range(0, len(frame), 65536):
        conn.receive_data(frame[i : i + 65536])
        events.append(conn.next_event())
    assert all(e is NEED_DATA for e in events[:-1])
    assert isinstance(events[-1], Request)
    assert len(events[-1].body.topic_data[0].partition_data[0].records) == 3 * 1024 * 1024


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(1, 50), max_size=20))
def test_garbage_stream_only_yields_protocol_events(garbage: bytes, chunks: list[int]) -> None:
    conn = Connection(SERVER, max_frame_size=10_000)
    data = API_VERSIONS + garbage
    pos = 0
    for size in chunks + [len(data)]:
        chunk = data[pos : pos + size]
        pos += size
        if not chunk:
            break
        conn.receive_data(chunk)
        for _ in range(5):
            event = conn.next_event()
            assert event is NEED_DATA or isinstance(event, (Request, BadRequest, FrameTooLarge))
            if event is NEED_DATA or isinstance(event, FrameTooLarge):
                break

"""Connection in the client role, and both roles talking to each other through bytes."""

from __future__ import annotations

from typing import Any

import pytest

from strom.protocol.connection import (
    CLIENT,
    NEED_DATA,
    SERVER,
    BadRequest,
    BadResponse,
    Connection,
    ConnectionClosed,
    LocalProtocolError,
    RawFrame,
    Request,
    Response,
)
from strom.protocol.errors import ErrorCode, UnsupportedVersion
from strom.protocol.tests.helpers import assert_contains, sample_message

PRODUCE_ANSWER = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 42}]}]}
METADATA_ANSWER = {"brokers": [{"node_id": 1, "host": "h", "port": 9092}], "topics": []}


def _pump(data: bytes, into: Connection, byte_by_byte: bool) -> list[Any]:
    """Feed ``data`` (whole or one byte at a time) and collect every event until NEED_DATA."""
    events: list[Any] = []
    chunks = [data[i : i + 1] for i in range(len(data))] if byte_by_byte else [data]
    for chunk in chunks:
        into.receive_data(chunk)
        while (event := into.next_event()) is not NEED_DATA:
            events.append(event)
    return events


def _answer(request: Request) -> dict[str, Any]:
    return PRODUCE_ANSWER if request.header.api_key == 0 else METADATA_ANSWER


@pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "byte-by-byte"])
def test_client_and_server_against_each_other(byte_by_byte: bool) -> None:
    client, server = Connection(CLIENT, client_id="c"), Connection(SERVER)
    produce = sample_message(0, 9, "request") | {"acks": -1}
    sent = client.send_request(0, 9, produce) + client.send_request(3, 12, {"topics": None})
    assert client.in_flight == 2 and client.last_correlation_id == 1
    requests = _pump(sent, server, byte_by_byte)
    assert [type(r) for r in requests] == [Request, Request]
    assert [(r.header.api_key, r.header.correlation_id, r.header.client_id) for r in requests] == [
        (0, 0, "c"),
        (3, 1, "c"),
    ]
    assert_contains(produce["topic_data"], requests[0].body.topic_data)
    answers = b"".join(_frame_bytes(part) for r in requests for part in server.send_response(r, _answer(r)))
    responses = _pump(answers, client, byte_by_byte)
    assert [type(r) for r in responses] == [Response, Response]
    first, second = responses
    assert (first.api_key, first.api_version, first.correlation_id) == (0, 9, 0)
    assert first.body.responses[0].partition_responses[0].base_offset == 42
    assert (second.api_key, second.api_version, second.correlation_id) == (3, 12, 1)
    assert second.body.brokers[0].host == "h"
    assert client.in_flight == 0


def test_responses_out_of_order_are_matched_by_correlation_id() -> None:
    client, server = Connection(CLIENT), Connection(SERVER)
    server_side = _pump(
        client.send_request(3, 1, {"topics": []}, correlation_id=70)
        + client.send_request(0, 3, sample_message(0, 3, "request") | {"acks": 1}, correlation_id=80),
        server,
        False,
    )
    answers = b"".join(_frame_bytes(p) for r in reversed(server_side) for p in server.send_response(r, _answer(r)))
    produce, metadata = _pump(answers, client, False)
    assert (produce.api_key, produce.correlation_id) == (0, 80)
    assert (metadata.api_key, metadata.correlation_id) == (3, 70)


def test_api_versions_answered_in_v0_is_decoded_as_v0() -> None:
    client, server = Connection(CLIENT), Connection(SERVER)
    # the broker knows ApiVersions up to v2 here: it cannot read v3, so it answers in v0
    frame = client.send_request(18, 3, {"client_software_name": "x", "client_software_version": "1"})
    request = _pump(frame, server, False)[0]
    assert isinstance(request, Request)
    bad = BadRequest(request.header, UnsupportedVersion("ApiVersions v3"), "unsupported")
    answer = b"".join(
        _frame_bytes(p)
        for p in server.send_error(bad, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]})
    )
    [response] = _pump(answer, client, True)
    assert isinstance(response, Response) and response.api_version == 0
    assert response.body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert response.body.api_keys == [{"api_key": 18, "min_version": 0, "max_version": 2}]


def test_api_versions_v3_answer_keeps_its_version() -> None:
    client, server = Connection(CLIENT), Connection(SERVER)
    request = _pump(
        client.send_request(18, 3, {"client_software_name": "x", "client_software_version": "1"}), server, False
    )[0]
    answer = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}], "throttle_time_ms": 5}
    [response] = _pump(b"".join(_frame_bytes(p) for p in server.send_response(request, answer)), client, False)
    assert response.api_version == 3 and response.body.throttle_time_ms == 5


def test_acks_zero_produce_waits_for_no_answer() -> None:
    client = Connection(CLIENT)
    client.send_request(0, 9, sample_message(0, 9, "request") | {"acks": 0})
    assert client.in_flight == 0
    client.send_request(0, 9, sample_message(0, 9, "request") | {"acks": 0}, expect_response=True)
    assert client.in_flight == 1


def test_a_response_nobody_waits_for_is_a_bad_response() -> None:
    client, server = Connection(CLIENT), Connection(SERVER)
    request = _pump(Connection(CLIENT).send_request(3, 1, {"topics": []}, correlation_id=5), server, False)[0]
    events = _pump(b"".join(_frame_bytes(p) for p in server.send_response(request, METADATA_ANSWER)), client, False)
    assert len(events) == 1 and isinstance(events[0], BadResponse)
    assert events[0].correlation_id == 5 and events[0].api_key is None
    truncated = Connection(CLIENT)
    truncated.send_request(3, 1, {"topics": []})
    [bad] = _pump(b"\x00\x00\x00\x06\x00\x00\x00\x00\xff\xff", truncated, False)  # topics count cut short
    assert isinstance(bad, BadResponse) and bad.api_key == 3


def test_roles_are_enforced_and_correlation_ids_are_unique() -> None:
    client, server = Connection(CLIENT), Connection(SERVER)
    request = _pump(client.send_request(3, 1, {"topics": []}, correlation_id=9), server, False)[0]
    with pytest.raises(LocalProtocolError):
        server.send_request(3, 1, {"topics": []})
    with pytest.raises(LocalProtocolError):
        client.send_response(request, METADATA_ANSWER)
    with pytest.raises(LocalProtocolError):
        client.send_request(3, 1, {"topics": []}, correlation_id=9)


def test_raw_sasl_tokens_and_eof_on_the_client() -> None:
    client = Connection(CLIENT)
    client.raw_frames = True
    events = _pump(b"".join(Connection.send_raw(b"server-first")), client, True)
    assert events == [RawFrame(b"server-first")]
    client.receive_data(b"\x00\x00")
    client.receive_data(b"")
    assert client.next_event() == ConnectionClosed(leftover=2)


def _frame_bytes(part: bytes | object) -> bytes:
    """A response part as bytes: encoded answers are bytes (file regions come only from Fetch)."""
    assert isinstance(part, bytes), part
    return part

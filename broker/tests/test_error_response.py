"""Every API module exports its error response (Kafka's getErrorResponse) and every answer encodes."""

from __future__ import annotations

import pytest

from strom.broker.apis import HANDLERS, MODULES, SUPPORTED
from strom.protocol.codec import RequestHeader, decode_response, encode_response
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .test_faults import _error_codes, _request_with_a_topic


def _request(api_key: int, version: int) -> Request:
    body = _request_with_a_topic(api_key, version)
    if api_key == ApiKey.PRODUCE:
        body["acks"] = -1
    return Request(RequestHeader(api_key, version, 7, "c"), body, 0)


def test_every_api_module_exports_an_error_response() -> None:
    assert all(callable(getattr(m, "error_response", None)) for m in MODULES)


@pytest.mark.parametrize("api_key", [k for k, _, _ in SUPPORTED])
def test_every_version_s_error_response_encodes_with_the_code_only(api_key: int) -> None:
    lo, hi = next((lo, hi) for k, lo, hi in SUPPORTED if k == api_key)
    for version in range(lo, hi + 1):
        body = HANDLERS[api_key].error_response(_request(api_key, version), ErrorCode.NOT_CONTROLLER, "why")
        if body is None:  # no place for an error in the answer: the connection closes
            continue
        frame = b"".join(bytes(p) for p in encode_response(api_key, version, 7, body))
        _, decoded = decode_response(api_key, version, frame[4:])
        assert set(_error_codes(decoded)) == {ErrorCode.NOT_CONTROLLER}, (api_key, version, decoded)


def test_the_message_goes_beside_the_code() -> None:
    out = HANDLERS[ApiKey.CREATE_TOPICS].error_response(
        _request(ApiKey.CREATE_TOPICS, 7), ErrorCode.NOT_CONTROLLER, "not the controller"
    )
    assert out["topics"][0]["error_message"] == "not the controller"
    plain = HANDLERS[ApiKey.CREATE_TOPICS].error_response(_request(ApiKey.CREATE_TOPICS, 7), ErrorCode.NOT_CONTROLLER)
    assert "error_message" not in plain["topics"][0]


def test_acks0_produce_has_no_error_response() -> None:
    request = _request(ApiKey.PRODUCE, 9)
    request.body["acks"] = 0
    assert HANDLERS[ApiKey.PRODUCE].error_response(request, ErrorCode.NOT_LEADER_OR_FOLLOWER) is None

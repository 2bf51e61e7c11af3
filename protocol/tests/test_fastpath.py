"""The specialized Produce decoder agrees with the generic one, on good and on broken input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.codec import _parse_body, decode_request, decode_request_header, encode_request, message_struct
from strom.protocol.errors import MalformedRequest
from strom.protocol.fastpath import MIN_VERSION, decode_produce
from strom.protocol.schema import ApiKey, api_spec

VERSIONS = range(MIN_VERSION, api_spec(ApiKey.PRODUCE).max_version + 1)


def _frame(version: int, transactional_id, partitions) -> tuple[bytes, int]:
    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {"name": "tópico", "partition_data": [{"index": i, "records": r} for i, r in enumerate(partitions)]},
            {"name": "other", "partition_data": []},
        ],
    }
    raw = encode_request(ApiKey.PRODUCE, version, 7, "c", body)[4:]
    return raw, decode_request_header(raw)[1]


def _generic(version: int, raw, offset: int):
    return _parse_body(message_struct(ApiKey.PRODUCE, version, "request"), raw, offset)


def _outcome(decoder, *args):
    try:
        return decoder(*args)
    except MalformedRequest:
        return MalformedRequest


@pytest.mark.parametrize("version", VERSIONS)
def test_same_result_as_the_generic_decoder(version):
    raw, offset = _frame(version, "tx" if version >= 3 else None, [b"r" * 300, None, b""])
    fast = decode_produce(version, raw, offset)
    assert fast == _generic(version, raw, offset)
    assert decode_request(ApiKey.PRODUCE, version, raw, offset) == fast
    assert bytes(fast.topic_data[0].partition_data[0].records) == b"r" * 300


@settings(max_examples=400, deadline=None)
@given(version=st.sampled_from(VERSIONS), data=st.data())
def test_mutated_frames_give_the_same_result_or_both_fail(version, data):
    raw, offset = _frame(
        version,
        data.draw(st.one_of(st.none(), st.text(max_size=5))),
        data.draw(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=3)),
    )
    mutated = bytearray(raw)
    for _ in range(data.draw(st.integers(0, 4))):
        mutated[data.draw(st.integers(offset, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    frame = bytes(mutated[: data.draw(st.integers(offset, len(mutated)))])
    assert _outcome(decode_produce, version, frame, offset) == _outcome(_generic, version, frame, offset)


_partition = st.fixed_dictionaries(
    {
        "index": st.integers(0, 2**31 - 1),
        "error_code": st.integers(-1, 120),
        "base_offset": st.integers(-1, 2**63 - 1),
        "log_append_time_ms": st.integers(-1, 2**62),
        "log_start_offset": st.integers(-1, 2**62),
    },
    optional={
        "error_message": st.one_of(st.none(), st.text(max_size=8)),
        "record_errors": st.lists(
            st.fixed_dictionaries({"batch_index": st.integers(0, 9), "batch_index_error_message": st.none()}),
            max_size=1,
        ),
        "current_leader": st.fixed_dictionaries({"leader_id": st.integers(-1, 5), "leader_epoch": st.integers(-1, 5)}),
    },
)
_responses = st.lists(
    st.fixed_dictionaries({"name": st.text(max_size=12), "partition_responses": st.lists(_partition, max_size=4)}),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(VERSIONS), responses=_responses, throttle=st.integers(0, 1000))
def test_produce_responses_are_byte_identical_to_the_generic_encoder(version, responses, throttle):
    from strom.protocol.codec import _build_frame, _response_header, encode_response

    body = {"responses": responses, "throttle_time_ms": throttle}
    generic = b"".join(
        _build_frame(
            message_struct(ApiKey.PRODUCE, version, "response"), _response_header(ApiKey.PRODUCE, version, 5), body
        )
    )
    [frame] = encode_response(ApiKey.PRODUCE, version, 5, body)
    assert frame == generic

"""The encoder refuses a key that is no field of its struct in any version, at every nesting level,
and allows a field of another version of the same message (ignored, as before)."""

from __future__ import annotations

from typing import Any

import pytest

from strom.protocol.codec import encode_request, encode_response
from strom.protocol.errors import EncodeError, UnknownFieldError
from strom.protocol.internal_records import RecordCodec, field
from strom.protocol.tests.helpers import sample_message


def _fetch_response(
    partition: dict[str, Any] | None = None, topic: dict[str, Any] | None = None, top: dict[str, Any] | None = None
) -> dict[str, Any]:
    part = {
        "partition_index": 0,
        "high_watermark": 5,
        "aborted_transactions": [{"producer_id": 1, "first_offset": 0}],
        **(partition or {}),
    }
    return {"throttle_time_ms": 0, "responses": [{"topic": "t", "partitions": [part], **(topic or {})}], **(top or {})}


@pytest.mark.parametrize(
    "where, body, path",
    [
        ("top", _fetch_response(top={"throtle_time_ms": 1}), ""),
        ("topic", _fetch_response(topic={"partitons": []}), "responses[]"),
        ("partition", _fetch_response(partition={"eror_code": 3}), "responses[].partitions[]"),
        (
            "array element struct",
            {
                "responses": [
                    {"topic": "t", "partitions": [{"aborted_transactions": [{"producer_id": 1, "first_ofset": 0}]}]}
                ]
            },
            "responses[].partitions[].aborted_transactions[]",
        ),
        (
            "nested struct",
            {"responses": [{"topic": "t", "partitions": [{"current_leader": {"leader_id": 1, "leader_epock": 2}}]}]},
            "responses[].partitions[].current_leader",
        ),
    ],
)
def test_misspelt_key_is_refused_at_every_level(where: str, body: dict[str, Any], path: str) -> None:
    with pytest.raises(UnknownFieldError) as info:
        encode_response(1, 12, 9, body)
    err = info.value
    assert err.where == "FetchResponse v12" and err.path == path
    assert len(err.keys) == 1
    text = str(err)
    assert "FetchResponse v12" in text and repr(err.keys[0]) in text and (path in text)
    assert isinstance(err, EncodeError)


def test_misspelt_key_in_a_request_and_in_a_tagged_struct() -> None:
    with pytest.raises(UnknownFieldError, match=r"MetadataRequest v1: unknown field 'topik'"):
        encode_request(3, 1, 1, "c", {"topics": [{"name": "a", "topik": 1}]})
    # a tagged field's struct (Fetch v12's current_leader is tagged): checked as well
    with pytest.raises(UnknownFieldError) as info:
        encode_response(1, 12, 9, {"responses": [{"topic": "t", "partitions": [{"current_leader": {"leaderid": 1}}]}]})
    assert info.value.path == "responses[].partitions[].current_leader"


def test_fields_of_other_versions_are_allowed() -> None:
    # topic_id is a v13+ field, log_start_offset a v5+ one: a v4 answer ignores both
    old = encode_response(1, 4, 9, _fetch_response(topic={"topic_id": bytes(16)}, partition={"log_start_offset": 3}))
    assert old == encode_response(1, 4, 9, _fetch_response())


def test_produce_fast_path_refuses_as_the_generic_encoder() -> None:
    good = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 4}]}]}
    assert encode_response(0, 9, 1, good)
    cases: list[tuple[dict[str, Any], str]] = [
        ({**good, "throttle": 1}, ""),
        ({"responses": [{"name": "t", "partitions": []}]}, "responses[]"),
        (
            {"responses": [{"name": "t", "partition_responses": [{"index": 0, "baseoffset": 4}]}]},
            "responses[].partition_responses[]",
        ),
    ]
    for bad, path in cases:
        with pytest.raises(UnknownFieldError) as info:
            encode_response(0, 9, 1, bad)
        assert info.value.where == "ProduceResponse v9" and info.value.path == path


def test_internal_record_values_are_checked_keys_are_not() -> None:
    codec = RecordCodec(
        {
            "ThingKey": ((0, 1), None, [field("group", "string", (0, None))]),
            "ThingValue": ((0, 1), None, [field("epoch", "int32", (0, None)), field("extra", "int32", (1, None))]),
        }
    )
    assert codec.encode("ThingValue", 0, {"epoch": 1, "extra": 4}) == codec.encode("ThingValue", 0, {"epoch": 1})
    with pytest.raises(UnknownFieldError, match=r"ThingValue v1: unknown field 'epoc' at the top level"):
        codec.encode("ThingValue", 1, {"epoc": 1})
    # one dict for every key type of a topic (group records: member_id only in some)
    assert codec.encode("ThingKey", 0, {"group": "g", "member_id": "m"}) == codec.encode("ThingKey", 0, {"group": "g"})


def test_every_sample_message_still_encodes() -> None:
    """Samples fill every field of their version: none is refused."""
    for api_key, version in [(0, 3), (0, 11), (1, 4), (1, 16), (3, 12), (11, 9), (18, 3)]:
        encode_response(api_key, version, 1, sample_message(api_key, version, "response"))

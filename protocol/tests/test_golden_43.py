"""The versions Kafka 4.1-4.3 added, against frames Kafka 4.3.1's own message classes wrote
(golden/Golden43.java, run with the 4.3.1 client jar; output in golden/kafka_4_3_1.json): each body
decodes to what the Java program set and encodes back to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from strom.protocol.codec import decode_request, decode_request_header, decode_response, encode_request, encode_response
from strom.protocol.schema import ApiKey, is_flexible

GOLDEN = json.loads((Path(__file__).with_name("golden") / "kafka_4_3_1.json").read_text())
ID = bytes(range(16))  # the topic id every frame names

# What Golden43.java set, as Strom decodes it (the fields a test can get wrong).
EXPECTED: dict[str, dict[str, Any]] = {
    "ProduceRequest-v13": {
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"topic_id": ID, "partition_data": [{"index": 1, "records": None}]}],
    },
    "ProduceResponse-v13": {"responses": [{"topic_id": ID, "partition_responses": [{"index": 1, "base_offset": 42}]}]},
    "FetchRequest-v18": {
        "isolation_level": 1,
        "topics": [{"topic_id": ID, "partitions": [{"partition": 0, "fetch_offset": 7, "current_leader_epoch": 3}]}],
    },
    "ListOffsetsRequest-v11": {
        "timeout_ms": 1000,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -6}]}],
    },
    "OffsetCommitRequest-v10": {
        "group_id": "g",
        "generation_id_or_member_epoch": 5,
        "member_id": "m",
        "topics": [
            {
                "topic_id": ID,
                "partitions": [{"partition_index": 0, "committed_offset": 100, "committed_leader_epoch": 2}],
            }
        ],
    },
    "OffsetCommitResponse-v10": {
        "topics": [{"topic_id": ID, "partitions": [{"partition_index": 0, "error_code": 100}]}]
    },
    "OffsetFetchRequest-v10": {
        "require_stable": True,
        "groups": [
            {
                "group_id": "g",
                "member_id": "m",
                "member_epoch": 5,
                "topics": [{"topic_id": ID, "partition_indexes": [0, 1]}],
            }
        ],
    },
    "OffsetFetchResponse-v10": {
        "groups": [
            {
                "group_id": "g",
                "topics": [{"topic_id": ID, "partitions": [{"partition_index": 0, "committed_offset": 100}]}],
            }
        ]
    },
}


def _subset(expected: Any, actual: Any, path: str = "") -> None:
    if isinstance(expected, dict):
        for key, value in expected.items():
            _subset(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert len(actual) == len(expected), path
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _subset(e, a, f"{path}[{i}]")
    else:
        assert (bytes(actual) if isinstance(actual, memoryview) else actual) == expected, path


def _case(name: str) -> tuple[int, int, str]:
    message, version = name.rsplit("-v", 1)
    kind = "request" if message.endswith("Request") else "response"
    api = {
        "Produce": ApiKey.PRODUCE,
        "Fetch": ApiKey.FETCH,
        "ListOffsets": ApiKey.LIST_OFFSETS,
        "OffsetCommit": ApiKey.OFFSET_COMMIT,
        "OffsetFetch": ApiKey.OFFSET_FETCH,
    }[message.removesuffix("Request").removesuffix("Response")]
    return api, int(version), kind


def test_every_new_version_has_a_golden_frame() -> None:
    assert sorted(GOLDEN) == sorted(EXPECTED)
    assert {(_case(n)[0], _case(n)[1]) for n in GOLDEN} >= {(0, 13), (1, 18), (2, 11), (8, 10), (9, 10)}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_kafka_4_3_1_frame_decodes_and_encodes_back_to_the_same_bytes(name: str) -> None:
    api, version, kind = _case(name)
    body = bytes.fromhex(GOLDEN[name])
    if kind == "request":
        header = encode_request(api, version, 7, "golden", {})  # our header; Kafka's body after it
        _, offset = decode_request_header(header[4:])
        frame = header[4 : 4 + offset] + body
        decoded = decode_request(api, version, frame, offset)
        again = encode_request(api, version, 7, "golden", decoded)[4 + offset :]
    else:
        frame = (7).to_bytes(4, "big") + (b"\x00" if is_flexible(api, version) else b"") + body
        correlation_id, decoded = decode_response(api, version, frame)
        assert correlation_id == 7
        [whole] = encode_response(api, version, 7, decoded)
        assert isinstance(whole, bytes)  # no file regions in these answers
        again = whole[4 + len(frame) - len(body) :]
    _subset(EXPECTED[name], decoded)
    assert again == body

"""`__share_group_state` records: Kafka's byte layout, and round trips."""

from __future__ import annotations

import pytest

from strom.broker.coordinator.share.persister import SharePartitionKey, StateBatch
from strom.broker.coordinator.share.records import (
    ShareRecordError,
    SnapshotValue,
    UpdateValue,
    decode_key,
    decode_snapshot,
    decode_update,
    encode_key,
    encode_snapshot,
    encode_update,
)

KEY = SharePartitionKey("g", bytes(range(16)), 3)


def test_key_is_the_record_type_then_group_topic_id_partition() -> None:
    data = encode_key(KEY, 1)
    assert data.hex() == "0001" + "0001" + "67" + bytes(range(16)).hex() + "00000003"
    assert decode_key(data) == (1, KEY)
    assert decode_key(encode_key(KEY, 0)) == (0, KEY)


def test_snapshot_value_layout_with_the_tagged_delivery_complete_count() -> None:
    value = SnapshotValue(1, 2, 3, 10, 5, 6, (StateBatch(10, 12, 2, 1),), 7)
    data = encode_snapshot(value)
    assert data.hex() == (
        "0000"  # value version 0
        "00000001"
        "00000002"
        "00000003"
        "000000000000000a"  # snapshot, state, leader epoch; start
        "0000000000000005"
        "0000000000000006"  # create, write timestamps
        "02"
        "000000000000000a"
        "000000000000000c"
        "02"
        "0001"
        "00"  # one batch (compact array)
        "01"
        "00"
        "04"
        "00000007"  # tagged fields: tag 0, 4 bytes
    )
    assert decode_snapshot(data) == value
    default = SnapshotValue(0, 0, 0, 0, 0, 0, ())
    assert decode_snapshot(encode_snapshot(default)).delivery_complete_count == -1
    assert encode_snapshot(default).endswith(b"\x01\x00")  # empty batches, no tagged field


def test_update_value_round_trip() -> None:
    value = UpdateValue(1, 2, -1, (StateBatch(10, 12, 2, 1),))
    assert decode_update(encode_update(value)) == value


@pytest.mark.parametrize("data", [None, b"", b"\x00\x05\x00", b"\x00\x00\x00\x01"])
def test_unreadable_keys_raise_share_record_error(data: bytes | None) -> None:
    with pytest.raises(ShareRecordError):
        decode_key(data)

"""`__consumer_offsets` record formats and the group-to-partition mapping."""

from __future__ import annotations

from strom.broker.coordinator.group.records import (
    CommittedOffset,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hashcode,
    partition_for,
    subscribed_topics,
)


def test_offset_key_and_value_golden_bytes():
    assert encode_offset_key(OffsetKey("g", "t", 3)).hex() == "000100016700017400000003"
    value = encode_offset_value(CommittedOffset(42, 5, "m", 1000))
    assert value.hex() == "0003000000000000002a0000000500016d00000000000003e8"
    with_expiry = encode_offset_value(CommittedOffset(42, -1, "", 1000, 2000))
    assert with_expiry.hex() == "0001000000000000002a000000000000000003e800000000000007d0"
    assert decode_offset_value(with_expiry) == CommittedOffset(42, -1, "", 1000, 2000)


def test_group_key_version_2_and_value_round_trip():
    assert encode_group_key(GroupKey("g")).hex() == "0002000167"
    assert decode_key(encode_group_key(GroupKey("grp"))) == GroupKey("grp")
    record = GroupRecord(
        "consumer",
        4,
        "range",
        "m1",
        123,
        [
            MemberRecord("m1", "static-1", "client", "/1.2.3.4", 30000, 10000, b"sub", b"assign"),
            MemberRecord("m2", None, "client", "", 30000, 10000, b"", b""),
        ],
    )
    encoded = encode_group_value(record)
    assert encoded[:2] == b"\x00\x03"
    assert decode_group_value(encoded) == record


def test_older_value_versions_decode():
    v0 = bytes.fromhex("0000000000000000000700000000000000000001")
    assert decode_offset_value(v0) == CommittedOffset(7, -1, "", 1, -1)


def test_java_hashcode_and_partition():
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("a") == 97
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)  # Java's MIN_VALUE hash
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hashcode("€") == 0x20AC
    assert all(0 <= partition_for(f"group-{i}", 50) < 50 for i in range(200))


def test_subscribed_topics_reads_consumer_protocol_subscriptions():
    assert subscribed_topics(b"\x00\x00\x00\x00\x00\x02\x00\x01a\x00\x02bc\xff\xff\xff\xff") == {"a", "bc"}
    assert subscribed_topics(b"\x00") == set()

"""v0/v1 message sets: parsing, building, conversions, and cross-checks with kafka-python."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from strom.protocol.records.batch import Record, build_batch, iter_records, validate_batches
from strom.protocol.records.compression import Compression
from strom.protocol.records.errors import CorruptRecords, UnsupportedCompression
from strom.protocol.records.legacy import LegacyMessage, build_message_set, downconvert, iter_message_set, upconvert

TS = 1_700_000_000_000
LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
CASES = [(magic, codec) for magic in (0, 1) for codec in LEGACY_CODECS]


def messages(magic: int, n: int = 10, first: int = 0) -> list[LegacyMessage]:
    return [
        LegacyMessage(first + i, TS + i if magic else -1, None if i == 2 else b"k%d" % i, None if i == 3 else b"v" * i)
        for i in range(n)
    ]


def plain(msgs: Iterable[LegacyMessage]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(m.offset, m.timestamp, m.key, m.value) for m in msgs]


def read_with_kafka_python(buf: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    records = MemoryRecords(buf)
    out = []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.timestamp if r.timestamp is not None else -1, r.key, r.value) for r in batch]
    return out


@pytest.mark.parametrize("magic,codec", CASES)
def test_build_and_parse_round_trip(magic: int, codec: int) -> None:
    msgs = messages(magic, first=50)
    assert plain(iter_message_set(build_message_set(msgs, magic, codec))) == plain(msgs)


@pytest.mark.parametrize("magic,codec", CASES)
def test_kafka_python_reads_our_message_sets(magic: int, codec: int) -> None:
    if magic == 0 and codec == Compression.LZ4:
        pytest.importorskip("xxhash", reason="kafka-python needs xxhash for magic 0 LZ4 (CI installs it)")
    msgs = messages(magic, first=50)
    assert read_with_kafka_python(build_message_set(msgs, magic, codec)) == plain(msgs)


@pytest.mark.parametrize("magic,codec", [c for c in CASES if c != (0, Compression.LZ4)])
def test_we_read_kafka_python_message_sets(magic: int, codec: int) -> None:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(10):
        builder.append(i, TS + i if magic else None, b"k%d" % i, b"v" * i)
    got = list(iter_message_set(bytes(builder.build())))
    # A v1 producer's wrapper has offset 0, so its relative inner offsets end at 0.
    first = -9 if magic == 1 and codec else 0
    assert plain(got) == [(first + i, TS + i if magic else -1, b"k%d" % i, b"v" * i) for i in range(10)]


def test_v1_inner_offsets_are_relative_and_v0_absolute() -> None:
    msgs = messages(1, n=3, first=1000)
    v1 = list(iter_message_set(build_message_set(msgs, 1, Compression.GZIP)))
    v0 = list(iter_message_set(build_message_set(messages(0, n=3, first=1000), 0, Compression.GZIP)))
    assert [m.offset for m in v1] == [m.offset for m in v0] == [1000, 1001, 1002]
    wrapper_offset = struct.unpack_from(">q", build_message_set(msgs, 1, Compression.GZIP))[0]
    assert wrapper_offset == 1002


def test_log_append_time_wrapper_timestamp_applies_to_inner_messages() -> None:
    buf = build_message_set(messages(1, n=3), 1, Compression.GZIP, timestamp_type=1)
    got = list(iter_message_set(buf))
    assert {m.timestamp for m in got} == {TS + 2} and {m.timestamp_type for m in got} == {1}


def test_truncated_tail_is_ignored_unless_strict() -> None:
    buf = build_message_set(messages(1, n=3), 1)
    assert len(list(iter_message_set(buf[:-5]))) == 2
    with pytest.raises(CorruptRecords):
        list(iter_message_set(buf[:-5], strict=True))


def test_bad_crc_is_detected() -> None:
    buf = bytearray(build_message_set(messages(0, n=2), 0))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecords, match="CRC"):
        list(iter_message_set(buf))


def test_corrupt_compressed_payload() -> None:
    body = bytes((1, Compression.GZIP)) + struct.pack(">qi", TS, -1) + struct.pack(">i", 4) + b"junk"
    entry = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body
    with pytest.raises(CorruptRecords):
        list(iter_message_set(entry))


@pytest.mark.parametrize("magic,codec", CASES)
def test_upconvert_then_downconvert_is_lossless(magic: int, codec: int) -> None:
    original = build_message_set(messages(magic), magic, codec)
    v2 = upconvert(original, now=TS)
    (header,) = validate_batches(v2)
    assert header.compression == codec
    decoded = list(iter_records(v2))
    expected_ts = [TS + i if magic else TS for i in range(10)]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (m.offset, ts, m.key, m.value) for m, ts in zip(messages(magic), expected_ts, strict=True)
    ]
    assert downconvert(v2, magic) == original  # byte for byte


def test_upconvert_without_now_gives_v0_no_timestamp() -> None:
    v2 = upconvert(build_message_set(messages(0, n=2), 0))
    assert {r.timestamp for r in iter_records(v2)} == {-1}


def test_upconvert_groups_plain_runs_and_wrappers() -> None:
    buf = (
        build_message_set(messages(1, n=2), 1)
        + build_message_set(messages(1, n=3), 1, Compression.SNAPPY)
        + build_message_set(messages(1, n=2), 1)
    )
    headers = validate_batches(upconvert(buf, base_offset=10))
    assert [(h.base_offset, h.records_count, h.compression) for h in headers] == [
        (10, 2, 0),
        (12, 3, Compression.SNAPPY),
        (15, 2, 0),
    ]


def test_upconvert_is_strict_about_truncation() -> None:
    with pytest.raises(CorruptRecords):
        upconvert(build_message_set(messages(1, n=2), 1)[:-1])


def stored_log() -> bytes:
    data = [Record(i, i, b"k%d" % i, b"v%d" % i, [("dropped", b"header")]) for i in range(4)]
    commit = Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")
    return (
        build_batch(data, base_offset=100, base_timestamp=TS)
        + build_batch([commit], base_offset=104, base_timestamp=TS, is_control=True, is_transactional=True)
        + build_batch(data, base_offset=105, base_timestamp=TS, compression=Compression.LZ4)
    )


@pytest.mark.parametrize("magic", [0, 1])
def test_downconvert_keeps_absolute_offsets_drops_control_and_headers(magic: int) -> None:
    out = downconvert(stored_log(), magic)
    offsets = [100, 101, 102, 103, 105, 106, 107, 108]
    expected = [
        (o, TS + d if magic else -1, b"k%d" % d, b"v%d" % d) for o, d in zip(offsets, [0, 1, 2, 3] * 2, strict=True)
    ]
    assert plain(iter_message_set(out)) == expected
    if magic == 1:
        assert read_with_kafka_python(out) == expected


def test_downconvert_keeps_the_codec_as_one_wrapper() -> None:
    out = downconvert(stored_log(), 1)
    entries = []
    pos = 0
    while pos < len(out):
        offset, size = struct.unpack_from(">qi", out, pos)
        entries.append((offset, out[pos + 17] & 0x07))
        pos += 12 + size
    assert entries == [(100, 0), (101, 0), (102, 0), (103, 0), (108, Compression.LZ4)]


def test_downconvert_min_offset_and_partial_tail() -> None:
    log = stored_log()
    out = downconvert(log + log[:30], 1, min_offset=102)
    assert [m.offset for m in iter_message_set(out)] == [102, 103, 105, 106, 107, 108]


def test_downconvert_log_append_time() -> None:
    batch = build_batch([Record(0, 0, b"a", b"1"), Record(1, 5, b"b", b"2")], base_timestamp=TS, timestamp_type=1)
    got = list(iter_message_set(downconvert(batch, 1)))
    assert [m.timestamp for m in got] == [TS + 5, TS + 5]
    assert {m.timestamp_type for m in got} == {1}


def test_zstd_cannot_be_downconverted() -> None:
    with pytest.raises(UnsupportedCompression):
        downconvert(build_batch([Record(0, 0, b"k", b"v")], compression=Compression.ZSTD, base_timestamp=TS), 1)
    with pytest.raises(UnsupportedCompression):
        build_message_set(messages(1), 1, Compression.ZSTD)

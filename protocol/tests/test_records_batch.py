"""RecordBatch v2: golden bytes, validation, stamping, and cross-checks with kafka-python."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from strom.protocol.records.batch import (
    DecodedRecord,
    Record,
    assign_offsets,
    build_batch,
    iter_records,
    read_batch,
    set_log_append_time,
    validate_batches,
    validate_keys,
)
from strom.protocol.records.compression import Compression
from strom.protocol.records.errors import BatchTooLarge, CorruptRecords, InvalidRecord, LegacyFormat
from strom.protocol.records.header import parse_header
from strom.protocol.records.legacy import LegacyMessage, build_message_set

TS = 1_700_000_000_000

# One record, key b"k", value b"v", base offset 0, timestamp TS, no producer: every field by hand.
GOLDEN = bytes.fromhex(
    "0000000000000000"  # base_offset 0
    "0000003a"  # batch_length 58 = 49 + 9 bytes of records
    "ffffffff"  # partition_leader_epoch -1
    "02"  # magic
    "e99b8dd8"  # crc (checked independently below)
    "0000"  # attributes
    "00000000"  # last_offset_delta
    "0000018bcfe56800"  # base_timestamp TS
    "0000018bcfe56800"  # max_timestamp TS
    "ffffffffffffffff"  # producer_id -1
    "ffff"  # producer_epoch -1
    "ffffffff"  # base_sequence -1
    "00000001"  # records_count
    "10"  # record length 8 (zigzag)
    "00"  # attributes
    "00"  # timestamp delta 0
    "00"  # offset delta 0
    "026b"  # key length 1, "k"
    "0276"  # value length 1, "v"
    "00"  # no headers
)


def crc32c_bitwise(data: bytes) -> int:
    """CRC-32C from its definition (reflected polynomial 0x82F63B78), for checking only."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_reference_crc_matches_the_standard_check_value() -> None:
    assert crc32c_bitwise(b"123456789") == 0xE3069283


def test_golden_batch() -> None:
    assert build_batch([Record(0, 0, b"k", b"v")], base_timestamp=TS) == GOLDEN
    assert struct.unpack(">I", GOLDEN[17:21])[0] == crc32c_bitwise(GOLDEN[21:])
    (header,) = validate_batches(GOLDEN)
    assert header.records_count == 1 and header.size == len(GOLDEN)
    assert list(iter_records(GOLDEN)) == [DecodedRecord(0, TS, b"k", b"v", [])]


def sample_records(n: int = 20) -> list[Record]:
    return [
        Record(
            i,
            i * 3,
            None if i == 4 else b"key-%d" % i,
            None if i == 5 else b"value" * i,
            [(f"h{i}", b"x"), ("null", None)],
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip(codec: int) -> None:
    records = sample_records()
    batch = build_batch(
        records,
        base_offset=100,
        compression=codec,
        base_timestamp=TS,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
    )
    (header,) = validate_batches(batch)
    assert (header.compression, header.records_count, header.last_offset) == (codec, 20, 119)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence) == (7, 2, 40, 59)
    assert header.max_timestamp == TS + 57
    decoded = list(iter_records(batch))
    assert decoded == [
        DecodedRecord(100 + r.offset_delta, TS + r.timestamp_delta, r.key, r.value, r.headers) for r in records
    ]
    assert read_batch(batch)[1] == records


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_our_batches(codec: int) -> None:
    batch = build_batch(sample_records(), base_offset=5, compression=codec, base_timestamp=TS, is_transactional=True)
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.is_transactional and theirs.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs]
    assert got == [(5 + r.offset_delta, TS + r.timestamp_delta, r.key, r.value, r.headers) for r in sample_records()]


@pytest.mark.parametrize("codec", list(Compression))
def test_we_read_kafka_python_batches(codec: int) -> None:
    builder = DefaultRecordBatchBuilder(2, codec, False, 9, 1, 0, 1 << 20)
    for i in range(50):
        builder.append(i, TS + i, b"k%d" % i, b"payload" * i, [("trace", b"%d" % i)])
    batch = bytes(builder.build())
    (header,) = validate_batches(batch)
    assert header.compression == codec and header.producer_id == 9 and header.records_count == 50
    decoded = list(iter_records(batch))
    assert decoded[49] == DecodedRecord(49, TS + 49, b"k49", b"payload" * 49, [("trace", b"49")])


def test_control_batch_and_transactional_flags() -> None:
    marker = Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")  # COMMIT marker
    batch = build_batch([marker], is_control=True, is_transactional=True, producer_id=3, base_timestamp=TS)
    (header,) = validate_batches(batch)
    assert header.is_control and header.is_transactional
    assert DefaultRecordBatch(batch).is_control_batch


def blob_of(count: int, **kw) -> bytearray:
    return bytearray(b"".join(build_batch(sample_records(3), base_timestamp=TS, **kw) for _ in range(count)))


def test_validate_walks_every_batch() -> None:
    blob = blob_of(4)
    headers = validate_batches(blob)
    assert len(headers) == 4
    assert sum(h.size for h in headers) == len(blob)
    assert validate_batches(b"") == []


def test_corrupted_byte_fails_the_crc() -> None:
    blob = blob_of(3)
    second = validate_batches(blob)[0].size
    blob[second + 70] ^= 0x01
    with pytest.raises(CorruptRecords, match="CRC"):
        validate_batches(blob)


@pytest.mark.parametrize("cut", [1, 11, 12, 17, 60, 61, 62])
def test_truncated_batch_is_detected(cut: int) -> None:
    blob = blob_of(2)
    with pytest.raises(CorruptRecords):
        validate_batches(blob[: len(blob) - cut])


@pytest.mark.parametrize("length", [-1, 0, 48, 10**6])
def test_bad_length_is_detected(length: int) -> None:
    blob = blob_of(1)
    struct.pack_into(">i", blob, 8, length)
    with pytest.raises(CorruptRecords, match="length|past the end"):
        validate_batches(blob)


def test_unknown_magic() -> None:
    blob = blob_of(1)
    blob[16] = 3
    with pytest.raises(CorruptRecords, match="magic"):
        validate_batches(blob)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets_are_reported_for_conversion(magic: int) -> None:
    legacy = build_message_set([LegacyMessage(0, TS, b"k", b"v")], magic)
    with pytest.raises(LegacyFormat) as info:
        validate_batches(legacy)
    assert info.value.magic == magic


def test_inconsistent_counts_are_corrupt_even_with_a_good_crc() -> None:
    batch = build_batch(sample_records(3), base_timestamp=TS, last_offset_delta=1)
    with pytest.raises(CorruptRecords, match="last offset delta"):
        validate_batches(batch)


def test_max_batch_size() -> None:
    blob = blob_of(1)
    validate_batches(blob, max_batch_size=len(blob))
    with pytest.raises(BatchTooLarge):
        validate_batches(blob, max_batch_size=len(blob) - 1)


def test_assign_offsets_keeps_crcs_valid() -> None:
    blob = blob_of(3)
    headers = validate_batches(blob)
    assert assign_offsets(blob, headers, 1000, 7) == 1009
    stamped = validate_batches(blob)
    assert [h.base_offset for h in stamped] == [1000, 1003, 1006]
    assert {h.partition_leader_epoch for h in stamped} == {7}
    assert [r.offset for r in iter_records(blob)] == list(range(1000, 1009))


def test_set_log_append_time() -> None:
    blob = blob_of(2)
    second = validate_batches(blob)[0].size
    set_log_append_time(blob, second, TS + 5000)
    first, stamped = validate_batches(blob)
    assert first.timestamp_type == 0 and stamped.timestamp_type == 1
    assert stamped.max_timestamp == TS + 5000
    assert {r.timestamp for r in list(iter_records(blob))[3:]} == {TS + 5000}
    assert DefaultRecordBatch(bytes(blob[second:])).validate_crc()


def test_validate_keys_rejects_null_keys() -> None:
    validate_keys(build_batch([Record(0, 0, b"k", None)], base_timestamp=TS, compression=Compression.GZIP))
    with pytest.raises(InvalidRecord):
        validate_keys(build_batch(sample_records(6), base_timestamp=TS, compression=Compression.GZIP))


def test_record_length_mismatch_is_corrupt() -> None:
    batch = bytearray(GOLDEN)
    batch[61] = 0x12  # record claims 9 bytes; 8 follow
    struct.pack_into(">I", batch, 17, crc32c_bitwise(bytes(batch[21:])))
    with pytest.raises(CorruptRecords):
        list(iter_records(batch))


def test_header_parse_matches_build() -> None:
    batch = build_batch(sample_records(2), base_offset=3, partition_leader_epoch=4, base_timestamp=TS)
    header = parse_header(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.magic) == (3, 4, 2)


@pytest.mark.parametrize("count,last_delta", [(0, -1), (1, -1), (-1, 0), (3, 1)])
def test_impossible_counts_are_corrupt_even_with_a_good_crc(count: int, last_delta: int) -> None:
    batch = bytearray(build_batch(sample_records(3), base_timestamp=TS))
    struct.pack_into(">i", batch, 23, last_delta)
    struct.pack_into(">i", batch, 57, count)
    struct.pack_into(">I", batch, 17, crc32c_bitwise(bytes(batch[21:])))
    with pytest.raises(CorruptRecords):
        validate_batches(batch)


def test_unknown_codec_with_a_good_crc_is_corrupt() -> None:
    batch = bytearray(build_batch(sample_records(1), base_timestamp=TS))
    batch[22] |= 0x07
    struct.pack_into(">I", batch, 17, crc32c_bitwise(bytes(batch[21:])))
    with pytest.raises(CorruptRecords, match="codec"):
        validate_batches(batch)

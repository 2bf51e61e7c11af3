"""LogValidator: a produced partition's records checked with Kafka's codes and messages."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.records.compression import Compression
from strom.protocol.records.header import parse_header
from strom.storage.config import LogConfig
from strom.storage.log_validator import (
    LogValidator,
    RecordValidationError,
    TimestampPolicy,
    validate_produce_records,
)

NOW = 1_700_000_000_000


def batch(n: int = 1, **kwargs) -> bytes:
    kwargs.setdefault("base_timestamp", NOW)
    return build_batch([Record(i, 0, b"k", b"v") for i in range(n)], **kwargs)


def refused(call) -> RecordValidationError:
    with pytest.raises(RecordValidationError) as info:
        call()
    return info.value


def test_produce_v3_carries_exactly_one_batch():
    one = batch(2)
    assert validate_produce_records(one + b"\0" * 5, 9) == one  # a cut-short tail is dropped
    two = refused(lambda: validate_produce_records(one + one, 9))
    assert two.code == ErrorCode.INVALID_RECORD
    assert two.message == (
        "Produce requests with version 9 are only allowed to contain exactly one record batch per partition"
    )
    none = refused(lambda: validate_produce_records(b"", 9))
    assert none.message == "Produce requests with version 9 must have at least one record batch per partition"
    assert refused(lambda: validate_produce_records(None, 2)).code == ErrorCode.INVALID_RECORD


def test_an_impossible_length_is_corrupt():
    data = bytearray(batch())
    data[8:12] = (3).to_bytes(4, "big")
    error = refused(lambda: validate_produce_records(bytes(data), 9))
    assert (error.code, error.message) == (
        ErrorCode.CORRUPT_MESSAGE,
        "Record size 3 is less than the minimum record overhead (14)",
    )


def test_header_checks_answer_at_the_log():
    validator = LogValidator("t", 0, LogConfig(), TimestampPolicy())
    control = refused(lambda: validator.validate(batch(is_control=True), 9, NOW))
    assert (control.code, control.at_log) == (ErrorCode.INVALID_RECORD, True)
    no_sequence = refused(lambda: validator.validate(batch(producer_id=7, producer_epoch=0), 9, NOW))
    assert no_sequence.message == "Invalid sequence number -1 in record batch with producerId 7"
    crc = bytearray(batch())
    crc[-1] ^= 0xFF
    assert refused(lambda: validator.validate(bytes(crc), 9, NOW)).code == ErrorCode.CORRUPT_MESSAGE


def test_timestamps_out_of_range_name_each_record():
    validator = LogValidator("t", 0, LogConfig(), TimestampPolicy("CreateTime", 1000, 1000))
    error = refused(lambda: validator.validate(batch(2, base_timestamp=NOW + 5000), 9, NOW))
    assert error.code == ErrorCode.INVALID_TIMESTAMP and [e["batch_index"] for e in error.record_errors] == [0, 1]
    log_append = LogValidator("t", 0, LogConfig(), TimestampPolicy("LogAppendTime", 1000, 1000))
    assert log_append.validate(batch(2, base_timestamp=NOW + 5000), 9, NOW).headers[0].records_count == 2


def test_a_compacted_topic_needs_keys():
    validator = LogValidator("c", 3, LogConfig(cleanup_policy="compact"), TimestampPolicy())
    keyless = build_batch([Record(0, 0, None, b"v")], base_timestamp=NOW)
    error = refused(lambda: validator.validate(keyless, 9, NOW))
    assert error.message == "Compacted topic cannot accept message without key in topic partition c-3"
    assert error.record_errors == [{"batch_index": 0, "batch_index_error_message": error.message}]


def test_the_topic_codec_recompresses_and_zstd_needs_produce_v7():
    gzip = LogValidator("t", 0, LogConfig(compression_type="gzip"), TimestampPolicy())
    validated = gzip.validate(batch(3), 9, NOW)
    assert parse_header(validated.records, 0).compression == Compression.GZIP
    zstd = batch(1, compression=Compression.ZSTD)
    plain = LogValidator("t", 0, LogConfig(), TimestampPolicy())
    assert refused(lambda: plain.validate(zstd, 6, NOW)).code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE

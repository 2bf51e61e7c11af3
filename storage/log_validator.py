"""LogValidator: every check a client's produced records pass before a leader appends them.

Kept in storage, as Kafka keeps its LogValidator in the storage module: it reads bytes and the
partition's settings only (no broker, no network), so every writer of client records uses the
same checks. Batches stay bytes: each is checked by its header and CRC-32C, copied once into a
bytearray whose base offsets the log rewrites in place. v0/v1 message sets from old clients are
converted to v2 first.

Malformed input is answered as Kafka 4.0 answers it: Produce v3+ carries exactly one whole v2
batch per partition (else INVALID_RECORD), a bad CRC or an impossible length is CORRUPT_MESSAGE,
a header that contradicts itself (record count, offsets, a producer id without a sequence) is
INVALID_RECORD. Unlike Kafka, records inside an intact batch are not decoded (nor decompressed)
unless the topic is compacted or recompresses: a client that writes a valid header and CRC over
garbage records gets them stored (FINDINGS.md F11).

What stays elsewhere: the log's own invariants on every append, leader's, follower's or a
coordinator's (magic 2, batch sizes, `Log._check_batches`), and the producer-state checks of
sequences, epochs and transactions (`ProducerStateManager`), which need the log's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import (
    iter_records,
    recompress,
    validate_batches,
    validate_keys,
)
from strom.protocol.records.compression import Compression
from strom.protocol.records.errors import (
    BatchTooLarge,
    InvalidBatch,
    InvalidRecord,
    LegacyFormat,
    RecordsError,
    UnknownCodec,
)
from strom.protocol.records.header import LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader
from strom.protocol.records.legacy import upconvert

from .config import LogConfig

Records = bytes | bytearray | memoryview

# Topic compression.type values other than "producer": the codec batches are stored in.
TOPIC_CODECS = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}

# Kafka's ByteBufferLogInputStream: an entry shorter than a v0 message's overhead cannot be
# anything; an entry cut short ends the records.
_RECORD_OVERHEAD_V0 = 14
_HEADER_UP_TO_MAGIC = MAGIC_OFFSET + 1


class RecordValidationError(Exception):
    """A partition's records refused, with Kafka's error code and message. ``at_log``: found where
    Kafka's log validates a batch, so the answer carries the partition's log start offset, as
    Kafka's does (its request-level checks, CRC and size errors answer -1)."""

    def __init__(
        self,
        code: ErrorCode,
        message: str | None = None,
        at_log: bool = False,
        record_errors: list[dict[str, Any]] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.at_log = at_log
        self.log_start_offset = -1
        self.record_errors = record_errors or []


@dataclass(frozen=True)
class TimestampPolicy:
    """message.timestamp.type and the KIP-937 bounds (ms before and after now) of a topic."""

    timestamp_type: str = "CreateTime"
    before_max_ms: int = (1 << 63) - 1
    after_max_ms: int = 3600000


class ValidatedRecords(NamedTuple):
    """Whole v2 batches ready for `Log.append_as_leader`, their headers, and whether any of them
    is transactional (then the append needs the transaction's verification guard)."""

    records: bytearray
    headers: list[BatchHeader]
    transactional: bool = False


def _entry_size(view: memoryview, pos: int) -> int | None:
    """The size of the log entry at ``pos`` as Kafka's reader sees it: None when it is cut short
    (Kafka's iterator ends there), CORRUPT_MESSAGE when its length or magic is impossible."""
    remaining = len(view) - pos
    if remaining < LOG_OVERHEAD:
        return None
    length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
    if length < _RECORD_OVERHEAD_V0:
        raise RecordValidationError(
            ErrorCode.CORRUPT_MESSAGE,
            f"Record size {length} is less than the minimum record overhead ({_RECORD_OVERHEAD_V0})",
        )
    if remaining < _HEADER_UP_TO_MAGIC:
        return None
    magic = view[pos + MAGIC_OFFSET]
    if magic > 2:  # unsigned here: a negative magic byte reads as > 127
        raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, f"Invalid magic found in record: {magic}")
    size = LOG_OVERHEAD + length
    return size if remaining >= size else None


def validate_produce_records(records: Records | None, version: int) -> Records:
    """The records of one partition of a Produce request (Kafka's ProduceRequest.validateRecords).
    v3+ carries exactly one v2 batch per partition: no whole batch, a magic 0/1 one, or a second
    whole batch is INVALID_RECORD; bytes after the one batch that are not a whole entry are
    dropped, as Kafka's reader drops them. Older versions must carry some records."""
    if version < 3:
        if not records:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD, "a Produce request must carry at least one record batch"
            )
        return records
    records = records or b""
    view = memoryview(records)
    first = _entry_size(view, 0)
    if first is None:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per partition",
        )
    if view[MAGIC_OFFSET] != 2:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record batches with magic version 2",
        )
    if _entry_size(view, first) is not None:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only "
            "allowed to contain exactly one record batch per partition",
        )
    return records if first == len(view) else records[:first]


class LogValidator:
    """The checks of one partition's produced records, against its log config and timestamp policy."""

    def __init__(self, topic: str, index: int, config: LogConfig, timestamps: TimestampPolicy):
        self.topic = topic
        self.index = index
        self.config = config
        self.timestamps = timestamps

    def validate(self, records: Records, version: int, now_ms: int) -> ValidatedRecords:
        """The batches to append, or RecordValidationError with Kafka's code and message."""
        data, headers = self._batches(records, version)
        transactional = False
        for header in headers:
            self._check_client_batch(header)
            transactional = transactional or header.is_transactional
        self._check_timestamps(data, headers, now_ms)
        if self.config.compact_enabled:
            self._check_keys(data)
        return ValidatedRecords(data, headers, transactional)

    def _batches(self, records: Records, version: int) -> tuple[bytearray, list[BatchHeader]]:
        """Whole v2 batches (up-converted, recompressed to the topic's codec) and their headers."""
        max_bytes = self.config.max_message_bytes
        codec = TOPIC_CODECS.get(self.config.compression_type)
        try:
            try:
                headers = validate_batches(records, max_batch_size=max_bytes)
            except LegacyFormat:
                if version >= 3:
                    raise RecordValidationError(
                        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                        f"Produce v{version} requires record batches of magic 2",
                    ) from None
                records = upconvert(records)
                headers = validate_batches(records, max_batch_size=max_bytes)
            if version < 7 and any(h.compression == Compression.ZSTD for h in headers):
                # as Kafka: a client too old for Produce v7 could not read zstd batches back
                raise RecordValidationError(
                    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    f"zstd-compressed batches need Produce v7 or later, not v{version}",
                )
            if codec is not None and any(h.compression != codec for h in headers):
                records = recompress(records, headers, codec)
                headers = validate_batches(records, max_batch_size=max_bytes)
            return bytearray(records), headers
        except BatchTooLarge as exc:
            raise RecordValidationError(ErrorCode.MESSAGE_TOO_LARGE, str(exc)) from None
        except InvalidBatch as exc:
            raise RecordValidationError(ErrorCode.INVALID_RECORD, str(exc), at_log=True) from None
        except UnknownCodec as exc:
            raise RecordValidationError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc), at_log=True) from None
        except RecordsError as exc:
            raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None

    @staticmethod
    def _check_client_batch(header: BatchHeader) -> None:
        """What Kafka's LogValidator refuses in a batch from a client, beyond its framing and CRC."""
        count = header.last_offset_delta + 1
        if header.records_count <= 0:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD,
                f"Invalid reported count for record batch: {header.records_count}",
                at_log=True,
            )
        if count != header.records_count:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD,
                f"Inconsistent batch offset range [0, {count - 1}] and count of records {header.records_count}",
                at_log=True,
            )
        if header.is_control:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD, "control batches are written by transaction coordinators only", at_log=True
            )
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD,
                f"Invalid sequence number {header.base_sequence} in record batch with producerId {header.producer_id}",
                at_log=True,
            )

    def _check_timestamps(self, data: bytearray, headers: Sequence[BatchHeader], now: int) -> None:
        """As Kafka 4.0 (KIP-937): a CreateTime topic refuses records timestamped more than
        message.timestamp.after.max.ms ahead of now (one hour by default) or more than
        message.timestamp.before.max.ms behind it (no bound by default), INVALID_TIMESTAMP with one
        record error per such record. Each batch's first and max timestamps are checked (the records'
        own only when one is out of range, to name them): a batch whose header claims a smaller max
        timestamp than its records carry is not caught here."""
        policy = self.timestamps
        if policy.timestamp_type != "CreateTime":
            return
        low = now - policy.before_max_ms
        high = now + policy.after_max_ms
        if all(
            low <= h.base_timestamp and h.max_timestamp <= high or h.base_timestamp == h.max_timestamp == -1
            for h in headers
        ):
            return
        errors = [
            {
                "batch_index": i,
                "batch_index_error_message": (
                    f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. "
                    f"The timestamp should be within [{low}, {high}]"
                ),
            }
            for i, r in enumerate(iter_records(data))
            if r.timestamp != -1 and not low <= r.timestamp <= high
        ]
        if errors or any(not low <= h.max_timestamp <= high for h in headers if h.max_timestamp != -1):
            raise RecordValidationError(
                ErrorCode.INVALID_TIMESTAMP,
                "One or more records have been rejected due to invalid timestamp",
                at_log=True,
                record_errors=errors,
            )

    def _check_keys(self, data: bytearray) -> None:
        """A compacted topic keeps records by key: each needs one."""
        try:
            validate_keys(data)
        except InvalidRecord as exc:
            why = f"Compacted topic cannot accept message without key in topic partition {self.topic}-{self.index}"
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD,
                why,
                at_log=True,
                record_errors=[{"batch_index": i, "batch_index_error_message": why} for i in exc.indexes],
            ) from None
        except RecordsError as exc:  # records that do not decode
            raise RecordValidationError(
                ErrorCode.INVALID_RECORD, f"Found invalid record structure: {exc}", at_log=True
            ) from None

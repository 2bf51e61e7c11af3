"""RecordBatch v2 (magic 2): building, validating, stamping and decoding.

A batch is the 61-byte header described in :mod:`protocol.records.header`, followed by
``records_count`` records, compressed as one payload when the codec bits are set.
Each record (lengths and deltas are zigzag varints, see :mod:`protocol.records.varint`)::

    length           varint   bytes of the record after this field
    attributes       int8     unused, 0
    timestamp_delta  varlong  timestamp - base_timestamp
    offset_delta     varint   offset - base_offset
    key_length       varint   -1 for a null key
    key              bytes
    value_length     varint   -1 for a null value
    value            bytes
    header_count     varint
    headers          header_count x (key_length varint, key utf-8, value_length varint, value)

The hot path (:func:`validate_batches`, :func:`assign_offsets`) reads headers and CRCs only;
records are decoded by :func:`read_batch` / :func:`iter_records` where semantics need them.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.protocol.records.compression import DEFAULT_MAX_SIZE, Compression, compress, decompress
from strom.protocol.records.crc import crc32c
from strom.protocol.records.errors import (
    BatchTooLarge,
    CorruptRecords,
    InvalidBatch,
    InvalidRecord,
    LegacyFormat,
    UnknownCodec,
)
from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    Buffer,
    parse_header,
    set_base_offset,
    set_partition_leader_epoch,
)
from strom.protocol.records.varint import MAX_VARINT_BYTES, decode_varint, encode_varint

__all__ = [
    "Record",
    "DecodedRecord",
    "build_batch",
    "validate_batches",
    "iter_batches",
    "read_batch",
    "iter_records",
    "validate_keys",
    "assign_offsets",
    "set_log_append_time",
    "MAGIC",
    "MIN_BATCH_LENGTH",
    "LOG_APPEND_TIME",
    "CREATE_TIME",
]

MAGIC = 2
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a header and no records
MIN_RECORD_SIZE = 7  # length, attributes, ts delta, offset delta, key len, value len, header count
CREATE_TIME = 0
LOG_APPEND_TIME = 1
_MAX_CODEC = max(Compression)
_MAX_TIMESTAMP_OFFSET = 35

_HEADER = struct.Struct(">qiibIhiqqqhii")
_FRAME = struct.Struct(">qi")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")


@dataclass
class Record:
    """One record of a v2 batch, with offset and timestamp relative to the batch."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


class DecodedRecord(NamedTuple):
    """A record with its absolute offset and timestamp, as :func:`iter_records` yields it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# --------------------------------------------------------------------------- building


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zigzag(-1)
    else:
        out += encode_varint(len(data))
        out += data


def encode_record(record: Record) -> bytes:
    """The wire bytes of one record, its length prefix included."""
    body = bytearray((record.attributes & 0xFF,))
    body += encode_varint(record.timestamp_delta)
    body += encode_varint(record.offset_delta)
    _put_bytes(body, record.key)
    _put_bytes(body, record.value)
    body += encode_varint(len(record.headers))
    for key, value in record.headers:
        _put_bytes(body, key.encode("utf-8"))
        _put_bytes(body, value)
    return encode_varint(len(body)) + bytes(body)


def _attributes(compression: int, timestamp_type: int, is_transactional: bool, is_control: bool) -> int:
    return (
        (compression & COMPRESSION_MASK)
        | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
    )


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: int = 0,
    timestamp_type: int = 0,
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode ``records`` as one v2 batch with a correct CRC-32C.

    ``base_timestamp`` defaults to the current wall-clock time in milliseconds;
    ``max_timestamp`` is ``base_timestamp`` plus the largest timestamp delta.
    ``last_offset_delta`` defaults to the largest offset delta (0 for no records).
    """
    records = list(records)
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000)
    if last_offset_delta is None:
        last_offset_delta = max((r.offset_delta for r in records), default=0)
    max_delta = max((r.timestamp_delta for r in records), default=0)
    payload = b"".join(encode_record(r) for r in records)
    if compression:
        payload = compress(compression, payload)
    header = _HEADER.pack(
        base_offset,
        MIN_BATCH_LENGTH + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        _attributes(compression, timestamp_type, is_transactional, is_control),
        last_offset_delta,
        base_timestamp,
        base_timestamp + max_delta,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch = bytearray(header + payload)
    _UINT32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


# --------------------------------------------------------------------------- validation


def _check_frame(view: memoryview, pos: int) -> int:
    """Check the entry at ``pos`` is a whole v2 batch inside ``view``; return its end."""
    n = len(view)
    if pos + MAGIC_OFFSET + 1 > n:
        raise CorruptRecords(f"truncated log entry at byte {pos}")
    length: int = _FRAME.unpack_from(view, pos)[1]
    magic = view[pos + MAGIC_OFFSET]
    if magic != MAGIC:
        if magic in (0, 1) and length >= 0:
            raise LegacyFormat(magic, pos)
        raise CorruptRecords(f"unknown magic {magic} at byte {pos}")
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecords(f"batch length {length} at byte {pos} is below the minimum {MIN_BATCH_LENGTH}")
    end = pos + LOG_OVERHEAD + length
    if end > n:
        raise CorruptRecords(f"batch at byte {pos} runs past the end of the records ({end} > {n})")
    return end


def _check_header(h: BatchHeader, view: memoryview, pos: int, end: int) -> None:
    if crc32c(view[pos + ATTRIBUTES_OFFSET : end]) != h.crc:
        raise CorruptRecords(f"CRC-32C mismatch in batch at byte {pos}")
    if h.records_count < 0 or h.last_offset_delta < 0:
        raise InvalidBatch(f"negative record count or offset delta in batch at byte {pos}")
    if h.records_count > h.last_offset_delta + 1:
        raise InvalidBatch(
            f"batch at byte {pos} has {h.records_count} records but last offset delta {h.last_offset_delta}"
        )
    codec = h.attributes & COMPRESSION_MASK
    if codec > _MAX_CODEC:
        raise UnknownCodec(f"unknown compression codec {codec} in batch at byte {pos}")
    if codec == 0 and h.records_count * MIN_RECORD_SIZE > end - pos - HEADER_SIZE:
        raise InvalidBatch(f"batch at byte {pos} is too short for {h.records_count} records")


def validate_batches(buf: Buffer, *, max_batch_size: int | None = None) -> list[BatchHeader]:
    """Check that ``buf`` is a sequence of whole, intact v2 batches; return their headers.

    Per batch: magic 2 (0/1 raise :class:`LegacyFormat`), a sane length inside ``buf``,
    CRC-32C over ``[21, end)``, non-negative counts consistent with ``last_offset_delta``,
    a known codec. Records are neither decoded nor decompressed. Raises
    :class:`CorruptRecords` with a reason, or :class:`BatchTooLarge`. An empty ``buf``
    gives an empty list.

    This is the produce hot path: one struct unpack and one CRC per batch, no calls
    in the common case (the checks mirror :func:`_check_frame` and :func:`_check_header`,
    which produce the error messages).
    """
    view = memoryview(buf)
    n = len(view)
    limit = n if max_batch_size is None else max_batch_size
    unpack = _HEADER.unpack_from
    make = BatchHeader._make
    headers: list[BatchHeader] = []
    pos = 0
    while pos < n:
        if pos + HEADER_SIZE > n or view[pos + MAGIC_OFFSET] != MAGIC:
            _check_frame(view, pos)
        fields = unpack(view, pos)
        size = LOG_OVERHEAD + fields[1]
        end = pos + size
        if fields[1] < MIN_BATCH_LENGTH or end > n:
            _check_frame(view, pos)
        if size > limit:
            raise BatchTooLarge(f"batch of {size} bytes exceeds the limit of {max_batch_size}")
        header = make(fields)
        if (
            crc32c(view[pos + ATTRIBUTES_OFFSET : end]) != fields[4]
            or fields[12] < 0
            or fields[6] < 0
            or fields[12] > fields[6] + 1
            or fields[5] & COMPRESSION_MASK > _MAX_CODEC
            or (fields[5] & COMPRESSION_MASK == 0 and fields[12] * MIN_RECORD_SIZE > size - HEADER_SIZE)
        ):
            _check_header(header, view, pos, end)
        headers.append(header)
        pos = end
    return headers


def iter_batches(buf: Buffer, *, partial_tail: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in ``buf``, each validated as :func:`validate_batches` does.

    With ``partial_tail`` an incomplete last entry (as a size-capped fetch returns) ends the
    iteration instead of raising.
    """
    view = memoryview(buf)
    pos = 0
    n = len(view)
    while pos < n:
        if partial_tail and _is_partial(view, pos):
            return
        end = _check_frame(view, pos)
        header = parse_header(view, pos)
        _check_header(header, view, pos, end)
        yield pos, header
        pos = end


def _is_partial(view: memoryview, pos: int) -> bool:
    if pos + LOG_OVERHEAD > len(view):
        return True
    length: int = _FRAME.unpack_from(view, pos)[1]
    return length >= 0 and pos + LOG_OVERHEAD + length > len(view)


# --------------------------------------------------------------------------- hot-path stamping


def assign_offsets(
    buf: bytearray | memoryview, headers: list[BatchHeader], first_offset: int, leader_epoch: int
) -> int:
    """Give the batches of ``buf`` (as validated into ``headers``) consecutive offsets.

    Rewrites each base_offset and partition_leader_epoch in place (neither is covered by
    the CRC) and returns the offset after the last batch. ``headers`` are not updated.
    """
    pos = 0
    next_offset = first_offset
    for header in headers:
        set_base_offset(buf, pos, next_offset)
        set_partition_leader_epoch(buf, pos, leader_epoch)
        next_offset += header.last_offset_delta + 1
        pos += header.size
    return next_offset


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch at ``pos`` LogAppendTime with ``max_timestamp = timestamp``; recompute its CRC."""
    view = memoryview(buf)
    _, length = _FRAME.unpack_from(view, pos)
    end = pos + LOG_OVERHEAD + length
    (attributes,) = _INT16.unpack_from(view, pos + ATTRIBUTES_OFFSET)
    _INT16.pack_into(view, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(view, pos + _MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(view, pos + CRC_OFFSET, crc32c(view[pos + ATTRIBUTES_OFFSET : end]))


# --------------------------------------------------------------------------- decoding


def _read_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos, MAX_VARINT_BYTES)
    if length < 0:
        if length != -1:
            raise CorruptRecords(f"invalid length {length} in record")
        return None, pos
    if pos + length > end:
        raise CorruptRecords("record field runs past the end of its record")
    return data[pos : pos + length], pos + length


def _read_headers(data: bytes, pos: int, end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    count, pos = decode_varint(data, pos, MAX_VARINT_BYTES)
    if count < 0 or count > end - pos:
        raise CorruptRecords(f"invalid record header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        key, pos = _read_bytes(data, pos, end)
        if key is None:
            raise CorruptRecords("record header key is null")
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecords("record header key is not UTF-8") from None
        value, pos = _read_bytes(data, pos, end)
        headers.append((name, value))
    return headers, pos


def _read_record(data: bytes, pos: int) -> tuple[Record, int]:
    length, pos = decode_varint(data, pos, MAX_VARINT_BYTES)
    end = pos + length
    if length < MIN_RECORD_SIZE - 1 or end > len(data):
        raise CorruptRecords(f"invalid record length {length}")
    attributes = data[pos]
    timestamp_delta, pos = decode_varint(data, pos + 1)
    offset_delta, pos = decode_varint(data, pos, MAX_VARINT_BYTES)
    key, pos = _read_bytes(data, pos, end)
    value, pos = _read_bytes(data, pos, end)
    headers, pos = _read_headers(data, pos, end)
    if pos != end:
        raise CorruptRecords("record length does not match its fields")
    return Record(offset_delta, timestamp_delta, key, value, headers, attributes), end


def decode_records(data: bytes, count: int) -> list[Record]:
    """Decode exactly ``count`` records filling ``data`` (an uncompressed records section)."""
    records: list[Record] = []
    pos = 0
    for _ in range(count):
        record, pos = _read_record(data, pos)
        records.append(record)
    if pos != len(data):
        raise CorruptRecords(f"{len(data) - pos} bytes left after {count} records")
    return records


def read_batch(buf: Buffer, pos: int = 0, *, max_size: int = DEFAULT_MAX_SIZE) -> tuple[BatchHeader, list[Record]]:
    """Validate and decode the batch at ``buf[pos:]``, decompressing at most ``max_size`` bytes."""
    view = memoryview(buf)
    end = _check_frame(view, pos)
    header = parse_header(view, pos)
    _check_header(header, view, pos, end)
    return header, _batch_records(view, pos, end, header, max_size)


def _batch_records(view: memoryview, pos: int, end: int, header: BatchHeader, max_size: int) -> list[Record]:
    payload = bytes(view[pos + HEADER_SIZE : end])
    if header.compression:
        payload = decompress(header.compression, payload, max_size=max_size)
    return decode_records(payload, header.records_count)


def iter_records(buf: Buffer, *, max_size: int = DEFAULT_MAX_SIZE) -> Iterator[DecodedRecord]:
    """Every record of the v2 batches in ``buf`` with absolute offset and timestamp.

    LogAppendTime batches give every record the batch's max_timestamp. Control records
    are included. Each batch is validated (CRC included) before its records are yielded.
    """
    view = memoryview(buf)
    for pos, header in iter_batches(view):
        records = _batch_records(view, pos, pos + header.size, header, max_size)
        log_append = header.timestamp_type == LOG_APPEND_TIME
        for r in records:
            timestamp = header.max_timestamp if log_append else header.base_timestamp + r.timestamp_delta
            yield DecodedRecord(header.base_offset + r.offset_delta, timestamp, r.key, r.value, r.headers)


def validate_keys(buf: Buffer, *, max_size: int = DEFAULT_MAX_SIZE) -> None:
    """Raise :class:`InvalidRecord` if a data record in ``buf`` has a null key (compacted topics);
    its ``indexes`` are the positions of every such record within its batch."""
    view = memoryview(buf)
    indexes: list[int] = []
    first = ""
    for pos, header in iter_batches(view):
        if header.is_control:
            continue
        for i, record in enumerate(_batch_records(view, pos, pos + header.size, header, max_size)):
            if record.key is None:
                indexes.append(i)
                first = first or f"record at offset delta {record.offset_delta} of batch at byte {pos} has a null key"
    if indexes:
        error = InvalidRecord(f"{first} (not allowed on a compacted topic)")
        error.indexes = indexes
        raise error


def recompress(buf: Buffer, headers: list[BatchHeader], codec: int, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Re-encode every batch whose codec is not ``codec`` (a topic's ``compression.type``).

    Producer id, epoch, sequence, timestamps and offset deltas are kept, so idempotence checks
    and offsets work on the result as on the original. Batches already in ``codec`` are copied.
    """
    view = memoryview(buf)
    out = []
    pos = 0
    for header in headers:
        end = pos + header.size
        if header.compression == codec:
            out.append(bytes(view[pos:end]))
        else:
            records = _batch_records(view, pos, end, header, max_size)
            out.append(
                build_batch(
                    records,
                    base_offset=header.base_offset,
                    compression=codec,
                    timestamp_type=header.timestamp_type,
                    base_timestamp=header.base_timestamp,
                    producer_id=header.producer_id,
                    producer_epoch=header.producer_epoch,
                    base_sequence=header.base_sequence,
                    partition_leader_epoch=header.partition_leader_epoch,
                    is_transactional=header.is_transactional,
                    is_control=header.is_control,
                    last_offset_delta=header.last_offset_delta,
                )
            )
        pos = end
    return b"".join(out)

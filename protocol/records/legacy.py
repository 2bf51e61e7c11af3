"""Message sets v0 and v1 (magic 0/1), as pre-0.11 clients produce and fetch them.

A message set is a sequence of log entries, each (big-endian)::

     0  offset      int64
     8  size        int32    bytes after this field
    12  crc         uint32   CRC-32 (IEEE) of bytes [16, 12 + size)
    16  magic       int8     0 or 1
    17  attributes  int8     bits 0-2 codec (none, gzip, snappy, lz4), bit 3 timestamp type (v1)
    18  timestamp   int64    v1 only
    18/26  key      int32 length (-1 = null) + bytes
           value    int32 length (-1 = null) + bytes

A compressed entry is a *wrapper*: its value is the compressed bytes of an inner message
set of uncompressed messages. In v1 the inner offsets are relative (0, 1, ...) and the
wrapper carries the absolute offset of the last inner message; in v0 inner offsets are
absolute. A v1 LogAppendTime wrapper's timestamp applies to every inner message.

Conversions (Strom stores only v2):

* :func:`upconvert` turns a produced message set into v2 batches: each compressed wrapper
  becomes one batch with the same codec, each run of uncompressed messages one
  uncompressed batch. Offsets are numbered consecutively from ``base_offset`` (default 0):
  producers' offsets are placeholders (a v1 producer's wrapper has offset 0, making its
  inner offsets negative) and the broker assigns real ones. v0 messages get ``now``
  (default -1) as timestamp.
* :func:`downconvert` turns stored v2 batches into a v0/v1 message set for Fetch v0-v3:
  control batches and records below ``min_offset`` are dropped, headers are lost, a
  compressed batch becomes one wrapper with the same codec (as Kafka does; magic 0 LZ4
  uses the pre-0.10 frame checksum), and zstd raises :class:`UnsupportedCompression`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from strom.protocol.records.batch import LOG_APPEND_TIME, Record, build_batch, iter_batches, read_batch
from strom.protocol.records.compression import DEFAULT_MAX_SIZE, Compression, compress, decompress
from strom.protocol.records.crc import crc32
from strom.protocol.records.errors import CorruptRecords, UnsupportedCompression

__all__ = [
    "LegacyMessage",
    "iter_message_set",
    "build_message_set",
    "upconvert",
    "downconvert",
]

NO_TIMESTAMP = -1
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
LEGACY_CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)

_ENTRY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LOG_OVERHEAD = 12
_CRC_START = 16
_KEY_OFFSET = {0: 18, 1: 26}  # where the key length sits, from the start of the entry


class LegacyMessage(NamedTuple):
    """A message with its absolute offset; ``timestamp`` is -1 for magic 0."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    timestamp_type: int = 0
    magic: int = 1


class _Entry(NamedTuple):
    """One top-level entry: a plain message, or a wrapper and its inner messages."""

    codec: int
    magic: int
    timestamp_type: int
    messages: list[LegacyMessage]


# --------------------------------------------------------------------------- parsing


def _read_field(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecords("message key/value length runs past the message")
    (length,) = _LENGTH.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        if length != -1:
            raise CorruptRecords(f"invalid message key/value length {length}")
        return None, pos
    if pos + length > end:
        raise CorruptRecords("message key/value runs past the message")
    return bytes(buf[pos : pos + length]), pos + length


def _read_message(buf: memoryview, pos: int, end: int) -> tuple[int, int, int, int, bytes | None, bytes | None]:
    """(offset, magic, attributes, timestamp, key, value) of the whole entry [pos, end)."""
    offset, _, crc, magic, attributes = _ENTRY.unpack_from(buf, pos)
    if magic not in _KEY_OFFSET:
        raise CorruptRecords(f"unknown message magic {magic} at byte {pos}")
    if pos + _KEY_OFFSET[magic] > end:
        raise CorruptRecords(f"message at byte {pos} is too short")
    if crc32(buf[pos + _CRC_START : end]) != crc:
        raise CorruptRecords(f"CRC-32 mismatch in message at byte {pos}")
    timestamp = _TIMESTAMP.unpack_from(buf, pos + 18)[0] if magic == 1 else NO_TIMESTAMP
    key, p = _read_field(buf, pos + _KEY_OFFSET[magic], end)
    value, p = _read_field(buf, p, end)
    if p != end:
        raise CorruptRecords(f"message at byte {pos} has {end - p} stray bytes")
    return offset, magic, attributes, timestamp, key, value


def _iter_raw(buf: memoryview, strict: bool) -> Iterator[tuple[int, int, int, int, bytes | None, bytes | None]]:
    pos = 0
    n = len(buf)
    while pos < n:
        if pos + _LOG_OVERHEAD > n:
            if strict:
                raise CorruptRecords(f"truncated message at byte {pos}")
            return
        (size,) = _LENGTH.unpack_from(buf, pos + 8)
        if size < 0:
            raise CorruptRecords(f"negative message size at byte {pos}")
        end = pos + _LOG_OVERHEAD + size
        if end > n:
            if strict:
                raise CorruptRecords(f"message at byte {pos} runs past the end of the set")
            return
        if size < _CRC_START - _LOG_OVERHEAD + 2:
            raise CorruptRecords(f"message at byte {pos} is too short")
        yield _read_message(buf, pos, end)
        pos = end


def _inner_messages(
    wrapper_offset: int,
    magic: int,
    codec: int,
    timestamp_type: int,
    wrapper_ts: int,
    value: bytes | None,
    max_size: int,
) -> list[LegacyMessage]:
    if value is None:
        raise CorruptRecords("compressed message has a null value")
    inner = list(_iter_raw(memoryview(decompress(codec, value, max_size=max_size)), strict=True))
    if not inner:
        raise CorruptRecords("compressed message holds no messages")
    shift = wrapper_offset - inner[-1][0] if magic == 1 else 0
    messages = []
    for offset, inner_magic, attributes, timestamp, key, value in inner:
        if inner_magic != magic or attributes & CODEC_MASK:
            raise CorruptRecords("compressed message holds a compressed or different-magic message")
        if timestamp_type == LOG_APPEND_TIME:
            timestamp = wrapper_ts
        messages.append(LegacyMessage(offset + shift, timestamp, key, value, timestamp_type, magic))
    return messages


def _iter_entries(buf: bytes | bytearray | memoryview, strict: bool, max_size: int) -> Iterator[_Entry]:
    for offset, magic, attributes, timestamp, key, value in _iter_raw(memoryview(buf), strict):
        codec = attributes & CODEC_MASK
        timestamp_type = 1 if magic == 1 and attributes & TIMESTAMP_TYPE_MASK else 0
        if codec not in LEGACY_CODECS:
            raise CorruptRecords(f"compression codec {codec} is not valid in a magic {magic} message")
        if codec == Compression.NONE:
            messages = [LegacyMessage(offset, timestamp, key, value, timestamp_type, magic)]
        else:
            messages = _inner_messages(offset, magic, codec, timestamp_type, timestamp, value, max_size)
        yield _Entry(codec, magic, timestamp_type, messages)


def iter_message_set(
    buf: bytes | bytearray | memoryview, *, strict: bool = False, max_size: int = DEFAULT_MAX_SIZE
) -> Iterator[LegacyMessage]:
    """Every message of a v0/v1 message set, wrappers unpacked, with absolute offsets.

    A partial trailing entry is ignored unless ``strict``; anything else malformed raises
    :class:`CorruptRecords` (each message's CRC-32 is checked).
    """
    for entry in _iter_entries(buf, strict, max_size):
        yield from entry.messages


# --------------------------------------------------------------------------- building


def _encode_field(data: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if data is None else _LENGTH.pack(len(data)) + data


def encode_message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One log entry of a v0/v1 message set, CRC-32 included."""
    body = bytes((magic, attributes & 0xFF))
    if magic == 1:
        body += _TIMESTAMP.pack(timestamp)
    body += _encode_field(key) + _encode_field(value)
    return struct.pack(">qiI", offset, 4 + len(body), crc32(body)) + body


def _check_magic(magic: int) -> None:
    if magic not in _KEY_OFFSET:
        raise ValueError(f"message set magic must be 0 or 1, not {magic}")


def build_message_set(
    messages: Iterable[LegacyMessage], magic: int, compression: int = 0, *, timestamp_type: int = 0
) -> bytes:
    """Encode ``messages`` (their offset, timestamp, key, value) as a v0/v1 message set.

    With ``compression`` they become the inner messages of one wrapper whose offset is the
    last message's (inner offsets relative for v1, as given for v0) and whose v1 timestamp
    is the largest. ``timestamp_type`` sets the v1 timestamp-type attribute bit.
    """
    _check_magic(magic)
    if compression not in LEGACY_CODECS:
        raise UnsupportedCompression(f"codec {compression} cannot be used in a magic {magic} message set")
    messages = list(messages)
    ts_bit = TIMESTAMP_TYPE_MASK if magic == 1 and timestamp_type else 0
    if compression == Compression.NONE:
        return b"".join(encode_message(m.offset, magic, ts_bit, m.timestamp, m.key, m.value) for m in messages)
    if not messages:
        return b""
    first = messages[0].offset if magic == 1 else 0
    inner = b"".join(encode_message(m.offset - first, magic, 0, m.timestamp, m.key, m.value) for m in messages)
    wrapper_ts = max(m.timestamp for m in messages)
    payload = compress(compression, inner, magic=magic)
    return encode_message(messages[-1].offset, magic, compression | ts_bit, wrapper_ts, None, payload)


# --------------------------------------------------------------------------- conversion


def _to_batch(
    messages: list[LegacyMessage], base_offset: int, codec: int, timestamp_type: int, now: int | None
) -> bytes:
    def ts(m: LegacyMessage) -> int:
        return now if m.magic == 0 and now is not None else m.timestamp

    base_ts = ts(messages[0])
    records = [Record(i, ts(m) - base_ts, m.key, m.value) for i, m in enumerate(messages)]
    return build_batch(
        records, base_offset=base_offset, compression=codec, timestamp_type=timestamp_type, base_timestamp=base_ts
    )


def upconvert(
    buf: bytes | bytearray | memoryview,
    *,
    now: int | None = None,
    base_offset: int = 0,
    max_size: int = DEFAULT_MAX_SIZE,
) -> bytes:
    """Convert a produced v0/v1 message set into v2 batches (see the module docstring).

    Parsing is strict: a truncated or corrupt entry raises :class:`CorruptRecords`.
    """
    batches: list[bytes] = []
    run: list[LegacyMessage] = []
    run_type = 0
    next_offset = base_offset

    def flush() -> None:
        nonlocal next_offset
        if run:
            batches.append(_to_batch(run, next_offset, Compression.NONE, run_type, now))
            next_offset += len(run)
            run.clear()

    for entry in _iter_entries(buf, True, max_size):
        if entry.codec == Compression.NONE:
            if run and entry.timestamp_type != run_type:
                flush()
            run_type = entry.timestamp_type
            run.extend(entry.messages)
            continue
        flush()
        batches.append(_to_batch(entry.messages, next_offset, entry.codec, entry.timestamp_type, now))
        next_offset += len(entry.messages)
    flush()
    return b"".join(batches)


def downconvert(
    buf: bytes | bytearray | memoryview, magic: int, *, min_offset: int | None = None, max_size: int = DEFAULT_MAX_SIZE
) -> bytes:
    """Convert v2 batches into a v0/v1 message set (see the module docstring).

    An incomplete last batch (a size-capped read) is ignored, as a client would.
    """
    _check_magic(magic)
    view = memoryview(buf)
    out: list[bytes] = []
    for pos, header in iter_batches(view, partial_tail=True):
        if header.is_control:
            continue
        if header.compression not in LEGACY_CODECS:
            raise UnsupportedCompression(
                f"{Compression(header.compression).name} batches cannot be sent as a magic {magic} message set"
            )
        _, records = read_batch(view, pos, max_size=max_size)
        log_append = header.timestamp_type == LOG_APPEND_TIME
        messages = [
            LegacyMessage(
                header.base_offset + r.offset_delta,
                header.max_timestamp if log_append else header.base_timestamp + r.timestamp_delta,
                r.key,
                r.value,
            )
            for r in records
            if min_offset is None or header.base_offset + r.offset_delta >= min_offset
        ]
        if messages:
            out.append(build_message_set(messages, magic, header.compression, timestamp_type=header.timestamp_type))
    return b"".join(out)

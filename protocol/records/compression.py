"""Compression codecs for record batches and message sets, with Kafka's framings.

Codec ids live in bits 0-2 of a batch's (or a v0/v1 message's) attributes.

Payload layouts:

* GZIP (1): an RFC 1952 gzip stream (one or more members).
* SNAPPY (2): written in the xerial framing the Java client uses::

      0  magic            8 bytes  \\x82 S N A P P Y \\x00
      8  version          int32    1
     12  compat version   int32    1
     16  blocks...        int32 compressed length, then that many bytes of raw snappy
                          (each block holds at most 32 KiB of input)

  Raw snappy (a varint uncompressed length, then the data), as librdkafka sends it, is
  decoded too: a payload not starting with the xerial magic is taken as raw snappy.
* LZ4 (3): the LZ4 frame format. Written like the Java client: independent 64 KiB blocks,
  no block or content checksum, no content size. Kafka before 0.10 computed the frame
  header checksum (HC) over the magic number too; for magic 0 message sets that broken HC
  is written (``compress(..., magic=0)``), and decoding always ignores the stored HC
  (it recomputes it), so both variants decode.
* ZSTD (4): standard zstd frames, with or without a content size.

Decompression is bounded: ``decompress(..., max_size=n)`` raises
:class:`DecompressedTooLarge` instead of producing more than ``n`` bytes. Exact or block-wise
upper bounds are read from the framing before any output is allocated; gzip is inflated
incrementally. Any undecodable input raises :class:`CorruptRecords`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from enum import IntEnum

import cramjam

from strom.protocol.records.errors import (
    CorruptRecords,
    DecompressedTooLarge,
    RecordsError,
    UnsupportedCompression,
)

__all__ = [
    "Compression",
    "compress",
    "decompress",
    "DEFAULT_MAX_SIZE",
    "xxh32",
]

DEFAULT_MAX_SIZE = 64 * 1024 * 1024


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


Buffer = bytes | bytearray | memoryview

_CODEC_ERRORS = (cramjam.DecompressionError, zlib.error, ValueError, OverflowError)


# --------------------------------------------------------------------------- xxh32

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: Buffer, seed: int = 0) -> int:
    """XXH32 of ``data`` (pure Python; used only for LZ4 frame descriptors of a few bytes)."""
    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 16:
        acc = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i + 16 <= n:
            for lane in range(4):
                word = int.from_bytes(data[i : i + 4], "little")
                acc[lane] = _rotl((acc[lane] + word * _P2) & _M32, 13) * _P1 & _M32
                i += 4
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = _rotl((h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32, 17) * _P4 & _M32
        i += 4
    while i < n:
        h = _rotl((h + data[i] * _P5) & _M32, 11) * _P1 & _M32
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    h ^= h >> 16
    return h


# --------------------------------------------------------------------------- bounded output


def _check_limit(size: int, max_size: int) -> None:
    if size > max_size:
        raise DecompressedTooLarge(f"decompressed data exceeds the limit of {max_size} bytes")


def _bounded(
    data: bytes,
    bound: int,
    max_size: int,
    whole: Callable[[bytes], cramjam.Buffer],
    into: Callable[[bytes, bytearray], int],
) -> bytes:
    """Decompress with a codec whose output is at most ``bound`` bytes (from the framing).

    Within the limit the codec allocates exactly what it needs; past it, the output goes
    into a ``max_size`` buffer, which the codec refuses to overrun.
    """
    try:
        if bound <= max_size:
            out = bytes(whole(data))
            _check_limit(len(out), max_size)
            return out
        buf = bytearray(max_size)
        n = into(data, buf)
    except cramjam.DecompressionError as exc:
        if bound > max_size and "whole buffer" in str(exc):
            raise DecompressedTooLarge(f"decompressed data exceeds the limit of {max_size} bytes") from None
        raise CorruptRecords(f"invalid compressed data: {exc}") from None
    return bytes(memoryview(buf)[:n])


# --------------------------------------------------------------------------- gzip


def _gzip_compress(data: bytes, magic: int) -> bytes:
    co = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return co.compress(data) + co.flush()


def _gzip_decompress(data: bytes, max_size: int) -> bytes:
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += d.decompress(rest, max_size + 1 - len(out))
        _check_limit(len(out), max_size)
        if not d.eof:
            if d.unconsumed_tail:
                raise DecompressedTooLarge(f"decompressed data exceeds the limit of {max_size} bytes")
            raise CorruptRecords("gzip stream is truncated")
        rest = d.unused_data
        if not rest:
            return bytes(out)


# --------------------------------------------------------------------------- snappy

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def _snappy_compress(data: bytes, magic: int) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, max(len(data), 1), _XERIAL_BLOCK):  # empty input: one empty block
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: bytes, produced: int, max_size: int) -> bytes:
    """Decode one raw snappy block after ``produced`` bytes of output."""
    _check_limit(produced + cramjam.snappy.decompress_raw_len(block), max_size)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw(data, 0, max_size)
    if len(data) < len(_XERIAL_HEADER):
        raise CorruptRecords("xerial snappy header is truncated")
    pos = len(_XERIAL_HEADER)
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecords("xerial snappy block length is truncated")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CorruptRecords("xerial snappy block runs past the payload")
        block = _snappy_raw(data[pos : pos + length], total, max_size)
        total += len(block)
        parts.append(block)
        pos += length
    return b"".join(parts)


# --------------------------------------------------------------------------- lz4

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK = 64 * 1024
_LZ4_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
_LZ4_BD = 0x40  # 64 KiB maximum block size
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_UINT32_LE = struct.Struct("<I")
_LZ4_UNCOMPRESSED = 0x80000000


def _lz4_hc(descriptor: bytes) -> int:
    return (xxh32(descriptor) >> 8) & 0xFF


def _lz4_compress(data: bytes, magic: int) -> bytes:
    descriptor = bytes((_LZ4_FLG, _LZ4_BD))
    hc = _lz4_hc(_LZ4_MAGIC + descriptor if magic == 0 else descriptor)
    parts = [_LZ4_MAGIC, descriptor, bytes((hc,))]
    for start in range(0, len(data), _LZ4_BLOCK):
        chunk = data[start : start + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            parts += [_UINT32_LE.pack(len(chunk) | _LZ4_UNCOMPRESSED), chunk]
        else:
            parts += [_UINT32_LE.pack(len(block)), block]
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def _lz4_walk_frame(data: bytearray, pos: int) -> tuple[int, int]:
    """Check one frame's framing, rewrite its HC to the correct value, return (end, bound)."""
    if data[pos : pos + 4] != _LZ4_MAGIC:
        raise CorruptRecords("not an LZ4 frame")
    if pos + 7 > len(data):
        raise CorruptRecords("LZ4 frame header is truncated")
    flg, bd = data[pos + 4], data[pos + 5]
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
    if flg >> 6 != 1 or block_max is None:
        raise CorruptRecords("unsupported LZ4 frame descriptor")
    hc_pos = pos + 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if hc_pos >= len(data):
        raise CorruptRecords("LZ4 frame header is truncated")
    data[hc_pos] = _lz4_hc(bytes(data[pos + 4 : hc_pos]))
    pos = hc_pos + 1
    block_checksum = 4 if flg & 0x10 else 0
    bound = 0
    while True:
        if pos + 4 > len(data):
            raise CorruptRecords("LZ4 frame is truncated")
        (word,) = _UINT32_LE.unpack_from(data, pos)
        pos += 4
        if word == 0:
            break
        size = word & ~_LZ4_UNCOMPRESSED
        if size > block_max:
            raise CorruptRecords("LZ4 block is larger than the frame's block size")
        bound += size if word & _LZ4_UNCOMPRESSED else block_max
        pos += size + block_checksum
    pos += 4 if flg & 0x04 else 0
    if pos > len(data):
        raise CorruptRecords("LZ4 frame is truncated")
    return pos, bound


def _lz4_decompress(data: bytes, max_size: int) -> bytes:
    frames = bytearray(data)
    pos = bound = 0
    while pos < len(frames):
        pos, frame_bound = _lz4_walk_frame(frames, pos)
        bound += frame_bound
    return _bounded(bytes(frames), bound, max_size, cramjam.lz4.decompress, cramjam.lz4.decompress_into)


# --------------------------------------------------------------------------- zstd

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DICT_ID_SIZE = (0, 1, 2, 4)
_ZSTD_RAW, _ZSTD_RLE, _ZSTD_COMPRESSED = 0, 1, 2


def _zstd_compress(data: bytes, magic: int) -> bytes:
    return bytes(cramjam.zstd.compress(data))


def _zstd_walk_frame(data: bytes, pos: int) -> tuple[int, int]:
    """Check one frame's framing and return (end, upper bound of its decompressed size)."""
    if pos + 4 > len(data):
        raise CorruptRecords("zstd frame is truncated")
    (magic,) = _UINT32_LE.unpack_from(data, pos)
    if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
        if pos + 8 > len(data):
            raise CorruptRecords("zstd skippable frame is truncated")
        return pos + 8 + _UINT32_LE.unpack_from(data, pos + 4)[0], 0
    if magic != _ZSTD_MAGIC:
        raise CorruptRecords("not a zstd frame")
    if pos + 5 > len(data):
        raise CorruptRecords("zstd frame header is truncated")
    fhd = data[pos + 4]
    single_segment = (fhd >> 5) & 1
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
    pos += 5 + (0 if single_segment else 1) + _ZSTD_DICT_ID_SIZE[fhd & 3] + fcs_size
    bound = 0
    while True:
        if pos + 3 > len(data):
            raise CorruptRecords("zstd frame is truncated")
        header = int.from_bytes(data[pos : pos + 3], "little")
        pos += 3
        kind, size = (header >> 1) & 3, header >> 3
        if kind == 3 or size > _ZSTD_BLOCK_MAX:
            raise CorruptRecords("invalid zstd block header")
        bound += _ZSTD_BLOCK_MAX if kind == _ZSTD_COMPRESSED else size
        pos += 1 if kind == _ZSTD_RLE else size
        if header & 1:
            break
    pos += 4 if fhd & 0x04 else 0
    if pos > len(data):
        raise CorruptRecords("zstd frame is truncated")
    return pos, bound


def _zstd_decompress(data: bytes, max_size: int) -> bytes:
    pos = bound = 0
    while pos < len(data):
        pos, frame_bound = _zstd_walk_frame(data, pos)
        bound += frame_bound
    return _bounded(data, bound, max_size, cramjam.zstd.decompress, cramjam.zstd.decompress_into)


# --------------------------------------------------------------------------- dispatch


def _identity_compress(data: bytes, magic: int) -> bytes:
    return data


def _identity_decompress(data: bytes, max_size: int) -> bytes:
    _check_limit(len(data), max_size)
    return data


_COMPRESSORS: dict[int, Callable[[bytes, int], bytes]] = {
    Compression.NONE: _identity_compress,
    Compression.GZIP: _gzip_compress,
    Compression.SNAPPY: _snappy_compress,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: _zstd_compress,
}

_DECOMPRESSORS: dict[int, Callable[[bytes, int], bytes]] = {
    Compression.NONE: _identity_decompress,
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_decompress,
    Compression.ZSTD: _zstd_decompress,
}


def compress(codec: int, data: Buffer, *, magic: int = 2) -> bytes:
    """Compress ``data`` with ``codec`` in the framing Kafka clients expect.

    ``magic`` matters only for LZ4: with ``magic=0`` the frame carries the header checksum
    pre-0.10 Kafka clients compute (over the magic number too).
    """
    try:
        fn = _COMPRESSORS[codec]
    except KeyError:
        raise UnsupportedCompression(f"unknown compression codec {codec}") from None
    return fn(bytes(data), magic)


def decompress(codec: int, data: Buffer, *, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Decompress a ``codec`` payload, producing at most ``max_size`` bytes.

    Raises :class:`CorruptRecords` for invalid data or an unknown codec id and
    :class:`DecompressedTooLarge` (a :class:`RecordsError`) past ``max_size``.
    """
    try:
        fn = _DECOMPRESSORS[codec]
    except KeyError:
        raise CorruptRecords(f"unknown compression codec {codec}") from None
    try:
        return fn(bytes(data), max_size)
    except RecordsError:
        raise
    except _CODEC_ERRORS as exc:
        raise CorruptRecords(f"invalid {Compression(codec).name} data: {exc}") from None

"""Zigzag varints, as in Kafka's v2 record format (protobuf's encoding).

A value is zigzag-mapped (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...) and written 7 bits per byte,
least significant group first, the high bit set on every byte but the last. ``varint``
fields hold 32-bit values (at most 5 bytes), ``varlong`` fields 64-bit (at most 10).
"""

from __future__ import annotations

from strom.protocol.records.errors import CorruptRecords

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


def encode_varint(value: int) -> bytes:
    """Zigzag varint/varlong bytes for a signed 64-bit ``value``."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int, max_bytes: int = MAX_VARLONG_BYTES) -> tuple[int, int]:
    """(value, next position) of the zigzag varint at ``buf[pos]``.

    Raises :class:`CorruptRecords` if the varint runs past the buffer or past ``max_bytes``.
    """
    try:
        b = buf[pos]
    except IndexError:
        raise CorruptRecords("varint runs past the end of the records") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    end = pos + max_bytes
    pos += 1
    while True:
        if pos >= end:
            raise CorruptRecords("varint is too long")
        try:
            b = buf[pos]
        except IndexError:
            raise CorruptRecords("varint runs past the end of the records") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7

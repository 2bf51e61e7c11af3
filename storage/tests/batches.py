"""Test helper: build valid v2 record batches (header + opaque record bytes + CRC-32C)."""

from __future__ import annotations

import struct

import crc32c

from strom.protocol.records.header import BatchHeader, parse_header
from strom.storage.synthetic import make_batch as make_batch  # the tests' helper, shared with storage/bench.py


def headers_of(data: bytes) -> list[BatchHeader]:
    headers, pos = [], 0
    while pos < len(data):
        header = parse_header(data, pos)
        headers.append(header)
        pos += header.size
    return headers


def split(data: bytes) -> list[tuple[BatchHeader, bytes]]:
    """(header, batch bytes) of every batch in ``data``."""
    out, pos = [], 0
    while pos < len(data):
        header = parse_header(data, pos)
        out.append((header, data[pos : pos + header.size]))
        pos += header.size
    return out


def append(log, *batches: bytes, epoch: int = 0):
    data = b"".join(batches)
    return log.append_as_leader(data, headers_of(data), epoch)


def crc_valid(batch: bytes) -> bool:
    stored: int = struct.unpack_from(">I", batch, 17)[0]
    return stored == crc32c.crc32c(batch[21:])

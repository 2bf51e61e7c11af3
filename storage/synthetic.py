"""Synthetic v2 record batches (header + opaque record bytes + CRC-32C) for benchmarks and tests.

Not test-only: ``python -m strom.storage.bench`` builds its batches with it from an installed wheel,
which carries no tests packages.
"""

from __future__ import annotations

import struct

from strom.protocol.records import crc as crc32c  # crc32c.crc32c: the C function, loaded lean
from strom.protocol.records.header import HEADER_SIZE, LOG_OVERHEAD

_HEADER = struct.Struct(">qiibIhiqqqhii")


def make_batch(
    records: int = 1,
    *,
    payload: bytes | int = 16,
    base_offset: int = 0,
    timestamp: int = 1_000,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """One v2 batch of ``records`` records whose body is ``payload`` (opaque to storage)."""
    body = payload if isinstance(payload, bytes) else bytes((i * 7) & 0xFF for i in range(payload))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    max_ts = timestamp if max_timestamp is None else max_timestamp
    header = bytearray(
        _HEADER.pack(
            base_offset,
            batch_length,
            -1,
            2,
            0,
            attributes,
            records - 1,
            timestamp,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            records,
        )
    )
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch)

"""The one place checksums come from.

``crc32c`` (Castagnoli, v2 batches) is the C implementation from the ``crc32c`` package;
``crc32`` (IEEE, v0/v1 messages) is zlib's. Both accept bytes, bytearray and memoryview,
so callers checksum a slice of a larger buffer without copying it.
"""
from __future__ import annotations

import zlib
from typing import Callable

from crc32c import crc32c as _crc32c

__all__ = ["crc32c", "crc32"]

# The C function itself, not a wrapper: the produce path calls it once per batch.
crc32c: Callable[..., int] = _crc32c
"""CRC-32C of ``data``, continuing from an optional second argument."""


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32 (IEEE, as zlib) of ``data``, continuing from ``value``."""
    return zlib.crc32(data, value)

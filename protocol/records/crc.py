"""The one place checksums come from.

``crc32c`` (Castagnoli, v2 batches) is the C implementation from the ``crc32c`` package;
``crc32`` (IEEE, v0/v1 messages) is zlib's. Both accept bytes, bytearray and memoryview,
so callers checksum a slice of a larger buffer without copying it.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from importlib import machinery, util
from pathlib import Path

__all__ = ["crc32c", "crc32"]


def _load_crc32c() -> Callable[..., int]:
    """The C function from the ``crc32c`` package's extension module, loaded without running the
    package's ``__init__``: that one reads its own version through ``importlib.metadata``
    (importing email, zipfile, csv...), about 8 ms of every broker start for nothing the broker
    uses. Falls back to the ordinary import when the package is already loaded or laid out
    differently."""
    if "crc32c" not in sys.modules:
        spec = util.find_spec("crc32c")  # finds the package without executing it
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            for suffix in machinery.EXTENSION_SUFFIXES:
                path = Path(folder) / f"_crc32c{suffix}"
                ext = util.spec_from_file_location("crc32c._crc32c", path) if path.is_file() else None
                if ext is not None and ext.loader is not None:
                    module = util.module_from_spec(ext)
                    ext.loader.exec_module(module)
                    loaded: Callable[..., int] = module.crc32c
                    return loaded
    from crc32c import crc32c as function

    return function


# The C function itself, not a wrapper: the produce path calls it once per batch.
crc32c: Callable[..., int] = _load_crc32c()
"""CRC-32C of ``data``, continuing from an optional second argument."""


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32 (IEEE, as zlib) of ``data``, continuing from ``value``."""
    return zlib.crc32(data, value)

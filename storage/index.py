"""The sparse per-segment indexes: ``.index`` (offset -> file position) and ``.timeindex``.

Both are plain append-only files of fixed-size big-endian entries, named after the segment's
base offset like the ``.log`` they index. Offsets are stored relative to that base offset.

``.index`` entry (8 bytes)::  relative_offset int32 | position int32
    relative_offset is the LAST offset of the batch that starts at byte ``position`` of the
    ``.log`` (as Kafka since 0.11); entries are strictly increasing in both fields.

``.timeindex`` entry (12 bytes)::  timestamp int64 | relative_offset int32
    "up to and including offset base+relative_offset, the largest batch max timestamp is
    ``timestamp``"; timestamps strictly increase, offsets never decrease.

Strom does not preallocate or mmap them (Kafka does): entries are appended with one write each
and mirrored in memory, so the file always has its real size and nothing needs trimming on close.
An index is "full" when it reaches ``segment.index.bytes``, which makes the log roll.

After a crash: an index may be short (entries not yet written), torn (size not a multiple of the
entry size) or point past the recovered log. :meth:`sanity_error` detects the latter two cheaply;
the log rebuilds such an index (and always rebuilds indexes of segments it re-validates), so an
index is never trusted beyond the data it indexes.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

from strom.storage import files
from strom.storage.errors import CorruptLog
from strom.storage.files import FileHandle

_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND


class _Index:
    """Common machinery: a file of fixed-size entries mirrored in two parallel arrays."""

    ENTRY: struct.Struct
    KEY_TYPE: str
    VALUE_TYPE: str

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.ENTRY.size)
        self._closed = False
        self.keys: array[int] = array(self.KEY_TYPE)
        self.values: array[int] = array(self.VALUE_TYPE)
        self.torn = False
        self._load(files.cache.open(str(self.path), _CREATE_FLAGS))

    def _load(self, handle: FileHandle) -> None:
        size = os.fstat(handle.fd).st_size
        data = os.pread(handle.fd, size, 0) if size else b""
        whole = len(data) - len(data) % self.ENTRY.size
        self.torn = whole != len(data)
        for key, value in self.ENTRY.iter_unpack(data[:whole]):
            self.keys.append(key)
            self.values.append(value)

    @property
    def handle(self) -> FileHandle:
        """The open file (from the file cache; reopened if it was evicted)."""
        if self._closed:
            raise CorruptLog(f"{self.path}: index is closed")
        return files.cache.get(str(self.path), _OPEN_FLAGS)

    @property
    def entries(self) -> int:
        return len(self.keys)

    @property
    def size_in_bytes(self) -> int:
        return len(self.keys) * self.ENTRY.size

    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    def _write(self, key: int, value: int) -> None:
        """Append one entry; on a failed (or short) write the file is cut back to its entries."""
        handle = self.handle
        if self.torn:
            self._cut(handle)
        try:
            handle.write_all(self.ENTRY.pack(key, value))
        except OSError:
            try:
                self._cut(handle)
            except OSError:
                pass  # torn stays set: cut before the next write, rebuilt if reopened
            raise
        self.keys.append(key)
        self.values.append(value)

    def _cut(self, handle: FileHandle) -> None:
        self.torn = True
        handle.truncate(len(self.keys) * self.ENTRY.size)
        self.torn = False

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries (memory at once; the file, or OSError and the
        file is cut before the next write)."""
        if count < len(self.keys) or self.torn:
            del self.keys[count:], self.values[count:]
            self._cut(self.handle)

    def reset(self) -> None:
        self.truncate_entries(0)

    def flush(self) -> None:
        self.handle.fsync()

    def close(self) -> None:
        """Drop the cached descriptor (it closes once nothing in flight holds it)."""
        self._closed = True
        files.cache.forget(str(self.path))

    def release(self) -> None:
        """Drop the cached descriptor but stay usable (the next use reopens the file)."""
        files.cache.forget(str(self.path))

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        files.cache.forget(str(self.path))
        self.path = path


class OffsetIndex(_Index):
    """Sparse offset index: find where in the ``.log`` to start looking for an offset."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPE = "i"
    VALUE_TYPE = "i"

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offset and position must exceed the last entry's."""
        rel = offset - self.base_offset
        if self.keys and (rel <= self.keys[-1] or position <= self.values[-1]):
            return
        self._write(rel, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry whose offset <= ``offset``, else (base, 0)."""
        i = bisect.bisect_right(self.keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.keys[i], self.values[i]

    def last_entry(self) -> tuple[int, int]:
        if not self.keys:
            return self.base_offset, 0
        return self.base_offset + self.keys[-1], self.values[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        self.truncate_entries(bisect.bisect_left(self.keys, offset - self.base_offset))

    def sanity_error(self, log_size: int) -> str | None:
        """Why this index cannot be trusted for a log of ``log_size`` bytes, or None."""
        if self.torn:
            return "size is not a multiple of 8"
        for prev, cur in ((self.keys[i - 1], self.keys[i]) for i in range(1, len(self.keys))):
            if cur <= prev:
                return "offsets not increasing"
        if any(self.values[i] <= self.values[i - 1] for i in range(1, len(self.values))):
            return "positions not increasing"
        if self.keys and (self.keys[0] < 0 or self.values[-1] >= log_size):
            return "last entry beyond the segment"
        return None


class TimeIndex(_Index):
    """Sparse time index: find where to start scanning for a timestamp."""

    ENTRY = struct.Struct(">qi")
    KEY_TYPE = "q"
    VALUE_TYPE = "i"

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add an entry if ``timestamp`` exceeds the last one (and the index has room)."""
        if timestamp < 0 or (self.keys and timestamp <= self.keys[-1]):
            return
        if not skip_full_check and self.is_full():
            return
        rel = offset - self.base_offset
        if self.values and rel < self.values[-1]:
            return
        self._write(timestamp, rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp < ``timestamp``, else (-1, base).

        Every batch up to and including that offset has a max timestamp below ``timestamp``.
        """
        i = bisect.bisect_left(self.keys, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self.keys[i], self.base_offset + self.values[i]

    def last_entry(self) -> tuple[int, int]:
        if not self.keys:
            return -1, self.base_offset
        return self.keys[-1], self.base_offset + self.values[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        self.truncate_entries(bisect.bisect_left(self.values, offset - self.base_offset))

    def sanity_error(self, last_offset: int) -> str | None:
        """Why this index cannot be trusted for a segment ending at ``last_offset``, or None."""
        if self.torn:
            return "size is not a multiple of 12"
        if any(self.keys[i] <= self.keys[i - 1] for i in range(1, len(self.keys))):
            return "timestamps not increasing"
        if any(self.values[i] < self.values[i - 1] for i in range(1, len(self.values))):
            return "offsets decreasing"
        if self.values and (self.values[0] < 0 or self.base_offset + self.values[-1] > last_offset):
            return "last entry beyond the segment"
        return None

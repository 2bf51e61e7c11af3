"""One log segment: a ``.log`` file of record batches plus its two sparse indexes."""

from __future__ import annotations

import bisect
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from strom.protocol.records import crc as crc32c  # crc32c.crc32c: the C function, loaded lean
from strom.protocol.records.header import (
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    Buffer,
    entry_frame,
    parse_header,
)
from strom.storage import files
from strom.storage.errors import CorruptLog
from strom.storage.files import FileHandle, FileRegion
from strom.storage.index import OffsetIndex, TimeIndex

INT32_MAX = (1 << 31) - 1
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # batch_length of a v2 batch with no records
_SCAN_BLOCK = 64 * 1024
_CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND  # reopening never recreates a deleted file

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"


def file_name(base_offset: int, suffix: str) -> str:
    """Kafka's segment file name: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}{suffix}"


def header_error(buf: Buffer, pos: int, end: int) -> str | None:
    """Why ``buf[pos:end]`` does not start with a plausible v2 batch header, or None."""
    if end - pos < HEADER_SIZE:
        return "truncated batch header"
    _, length = entry_frame(buf, pos)
    if length < MIN_BATCH_LENGTH:
        return f"batch length {length} too small"
    if buf[pos + MAGIC_OFFSET] != 2:
        return f"magic {buf[pos + MAGIC_OFFSET]} is not 2"
    return None


def frame_error(buf: Buffer, pos: int, end: int) -> str | None:
    """Why the v2 batch framed at ``buf[pos:]`` is not whole and well-formed (CRC not checked)."""
    error = header_error(buf, pos, end)
    if error is None and pos + LOG_OVERHEAD + entry_frame(buf, pos)[1] > end:
        error = "batch extends past the end of the file"
    return error


def crc_ok(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    with memoryview(buf) as view:
        body = view[pos + CRC_OFFSET + 4 : pos + header.size]
        try:
            return crc32c.crc32c(body) == header.crc
        finally:
            body.release()


class LogSegment:
    """A segment: ``<base>.log`` + ``<base>.index`` + ``<base>.timeindex`` in the partition dir.

    ``.log`` layout: v2 record batches back to back, exactly as on the wire (61-byte header, see
    protocol.records.header, then the records), offsets strictly increasing, the first batch's
    base offset >= the segment's base offset (the file name), every offset within int32 of it.
    Index layouts: see storage.index. Appends go to the end with one ``write`` (O_APPEND).

    After a crash the ``.log`` can end in a torn batch or hold garbage the page cache never wrote;
    :meth:`recover` re-validates it batch by batch (framing, magic, CRC-32C, offsets increasing),
    truncates at the first bad batch, and rebuilds both indexes from what survived.

    Thread safety: all mutation happens on one thread; :meth:`flush` only fsyncs descriptors and
    may run on another thread (the descriptors stay open while it holds the handles).
    """

    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, max_index_size: int, created_ms: int
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = self.directory / file_name(base_offset, LOG_SUFFIX)
        self._closed = False
        self.size = os.fstat(files.cache.open(self._log_name, _CREATE_FLAGS).fd).st_size
        self.offset_index = OffsetIndex(
            self.directory / file_name(base_offset, INDEX_SUFFIX), base_offset, max_index_size
        )
        self.time_index = TimeIndex(
            self.directory / file_name(base_offset, TIME_INDEX_SUFFIX), base_offset, max_index_size
        )
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = base_offset
        self.next_offset = base_offset
        self.bytes_since_last_index_entry = 0
        self._rolling_timestamp: int | None = None

    # ---------------------------------------------------------------- state
    @property
    def log_path(self) -> Path:
        return self._log_path

    @log_path.setter
    def log_path(self, path: Path) -> None:
        self._log_path = Path(path)
        self._log_name = str(self._log_path)  # the file cache's key, computed once

    @property
    def handle(self) -> FileHandle:
        """The ``.log`` file's descriptor, from the file cache (reopened if it was evicted)."""
        if self._closed:
            raise CorruptLog(f"{self._log_path}: segment is closed")
        return files.cache.get(self._log_name, _OPEN_FLAGS)

    def flush_handles(self) -> tuple[FileHandle, ...]:
        """The descriptors a flush must fsync (captured under the log's lock)."""
        return self.handle, self.offset_index.handle, self.time_index.handle

    @property
    def largest_timestamp(self) -> int:
        """The largest batch max timestamp, or the file's mtime if no batch has a timestamp."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    def first_batch_timestamp(self) -> int | None:
        """Max timestamp of the first batch (what segment.ms is measured from), None if empty."""
        if self._rolling_timestamp is None and self.size >= HEADER_SIZE:
            self._rolling_timestamp = self._read_header(0).max_timestamp
        return self._rolling_timestamp

    def should_roll(
        self, batch_bytes: int, max_timestamp: int, last_offset: int, segment_bytes: int, segment_ms: int, now_ms: int
    ) -> bool:
        """Whether an append of ``batch_bytes`` ending at ``last_offset`` needs a new segment."""
        if self.size == 0:
            return False
        first_ts = self.first_batch_timestamp()
        waited = (max_timestamp - first_ts) if first_ts is not None and first_ts >= 0 else now_ms - self.created_ms
        return (
            self.size > segment_bytes - batch_bytes
            or waited >= segment_ms
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or last_offset - self.base_offset > INT32_MAX
        )

    # ---------------------------------------------------------------- write
    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[tuple[int, int, int]]) -> None:
        """Write ``data`` (whole batches) with one write; ``batches`` = (size, last_offset, max_ts).

        All or nothing: if the write (or an index entry's) fails or is short, the ``.log`` and
        both indexes are cut back to what they held before, the in-memory state is restored and
        the OSError is raised. If even that truncation fails, :attr:`dirty_tail` stays set and
        the next append retries it first; bytes past ``size`` are never read either way.
        """
        handle = self.handle
        if self.dirty_tail:
            self.repair_tail(handle)
        start = position = self.size
        try:
            handle.write_all(data)
        except OSError:
            self._cut_back(handle, start)
            raise
        self.size = start + len(data)
        if self._rolling_timestamp is None and start == 0 and batches:
            self._rolling_timestamp = batches[0][2]
        try:
            for size, last_offset, max_ts in batches:
                self._index_batch(position, size, last_offset, max_ts)
                position += size
        except OSError:  # an index entry could not be written: undo the whole append
            self._undo_indexed(handle, start)
            raise
        if batches:
            self.next_offset = batches[-1][1] + 1

    dirty_tail = False  # the .log holds bytes past ``size`` that a failed append left there

    def _cut_back(self, handle: FileHandle, size: int) -> None:
        """The .log back to ``size`` bytes (or :attr:`dirty_tail` if even that fails)."""
        self.size = size
        self.dirty_tail = True
        try:
            self.repair_tail(handle)
        except OSError:
            pass  # retried before the next append; bytes past ``size`` are never read

    def _undo_indexed(self, handle: FileHandle, start: int) -> None:
        """Undo an append whose data was written but an index entry failed: drop the entries it
        added (by offset: this append's offsets start at ``next_offset``), cut the .log back and
        recompute the tail state from what is left (the failure path only)."""
        for index in (self.offset_index, self.time_index):
            try:
                index.truncate_to(self.next_offset)
            except OSError:
                pass  # memory is cut; the file is cut before the index's next write
        if start == 0:
            self._rolling_timestamp = None
        self._cut_back(handle, start)
        self.load_tail_state()

    def repair_tail(self, handle: FileHandle | None = None) -> None:
        """Cut the ``.log`` back to ``size`` after a failed append (OSError if it cannot)."""
        (handle or self.handle).truncate(self.size)
        self.dirty_tail = False

    def _index_batch(self, position: int, size: int, last_offset: int, max_ts: int) -> None:
        if max_ts > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_ts
            self.offset_of_max_timestamp = last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index (on roll and close), as Kafka does.

        Best effort: if the entry cannot be written (full disk) the index just lacks it; the max
        timestamp is recomputed from the batches after the last entry whenever the segment loads.
        """
        if not self._closed:
            try:
                self.time_index.maybe_append(
                    self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
                )
            except OSError:
                pass

    def flush(self) -> None:
        for handle in self.flush_handles():
            handle.fsync()

    # ---------------------------------------------------------------- read
    def _read_header(self, position: int) -> BatchHeader:
        data = os.pread(self.handle.fd, HEADER_SIZE, position)
        error = header_error(data, 0, len(data))
        if error is None and position + LOG_OVERHEAD + entry_frame(data)[1] > self.size:
            error = "batch extends past the end of the file"
        if error is not None:
            raise CorruptLog(f"{self.log_path}@{position}: {error}")
        return parse_header(data)

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from byte ``start`` (a batch boundary) to ``end``.

        Reads in 64 KiB blocks and parses headers only. Raises CorruptLog on a malformed frame
        or a batch that runs past the end of the file.
        """
        end = self.size if end is None else min(end, self.size)
        pos = start
        handle = self.handle if pos < end else None  # held: the fd stays open while iterating
        fd = handle.fd if handle is not None else -1
        buf, buf_start = b"", start
        while pos < end:
            rel = pos - buf_start
            if len(buf) - rel < HEADER_SIZE:
                buf, buf_start, rel = os.pread(fd, _SCAN_BLOCK, pos), pos, 0
            error = header_error(buf, rel, len(buf))
            if error is None and pos + LOG_OVERHEAD + entry_frame(buf, rel)[1] > self.size:
                error = "batch extends past the end of the file"
            if error is not None:
                raise CorruptLog(f"{self.log_path}@{pos}: {error}")
            header = parse_header(buf, rel)
            yield pos, header
            pos += header.size

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset >= ``offset``, or None."""
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(max(position, start_position)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def _boundary_at_or_below(self, target: int, start: int) -> int:
        """The largest batch boundary <= ``target`` and >= ``start`` (``start`` is one)."""
        if target >= self.size:
            return self.size
        positions = self.offset_index.values
        i = bisect.bisect_right(positions, target) - 1
        pos = max(start, positions[i]) if i >= 0 else start
        boundary = pos
        for position, header in self.iter_headers(pos, target + HEADER_SIZE):
            if position + header.size > target:
                break
            boundary = position + header.size
        return boundary

    def read(
        self, start_offset: int, max_size: int, max_offset: int | None, min_one_message: bool
    ) -> FileRegion | None:
        """Whole batches from the one containing ``start_offset``; None if no batch is there.

        Stops before the first batch whose last offset >= ``max_offset`` and at ``max_size``
        bytes; with ``min_one_message`` the first batch is returned even if larger.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start, first = found
        limit = self.size
        if max_offset is not None and max_offset < self.next_offset:
            stop = self.translate_offset(max_offset, start)
            if stop is not None:
                limit = stop[0]
        if start >= limit:
            return FileRegion(self.handle, start, 0)
        end = self._boundary_at_or_below(min(limit, start + max(0, max_size)), start)
        if end == start and min_one_message:
            end = start + first.size
        return FileRegion(self.handle, start, end - start)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> BatchHeader | None:
        """The first batch with max timestamp >= ``timestamp`` and last offset >= ``start_offset``."""
        _, offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(offset, start_offset))
        for _, header in self.iter_headers(position):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                return header
        return None

    # ---------------------------------------------------------------- load / recover
    def load_tail_state(self) -> None:
        """Restore next offset, max timestamp and index bookkeeping from the indexes + a tail scan.

        Used on a clean open and after truncation; scans only the batches after the last index
        entry. Raises CorruptLog if that tail is malformed (the caller then recovers).
        """
        ts, ts_offset = self.time_index.last_entry()
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, ts_offset
        _, start = self.offset_index.lookup(ts_offset)
        last_indexed = self.offset_index.last_entry()[1] if self.offset_index.entries else 0
        start = min(start, last_indexed)
        self.next_offset = self.base_offset
        self.bytes_since_last_index_entry = 0
        for pos, header in self.iter_headers(start):
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.next_offset = header.last_offset + 1
            if pos >= last_indexed:
                self.bytes_since_last_index_entry = pos + header.size - last_indexed
        if self.size and self.next_offset == self.base_offset and start > 0:
            raise CorruptLog(f"{self.log_path}: index points past the last batch")

    def sanity_error(self) -> str | None:
        """Cheap checks that both indexes fit this segment (a clean shutdown still runs them)."""
        error = self.offset_index.sanity_error(self.size)
        if error is None and self.offset_index.entries:
            offset, position = self.offset_index.last_entry()
            try:
                header = self._read_header(position)
            except CorruptLog as exc:
                return str(exc)
            if header.last_offset != offset:
                error = "last entry does not point at the batch it names"
        if error is None:
            try:
                self.load_tail_state()
            except CorruptLog as exc:
                return str(exc)
            error = self.time_index.sanity_error(self.next_offset - 1)
        return error

    def recover(self, start_offset: int) -> int:
        """Re-validate every batch, rebuild both indexes, truncate at the first bad batch.

        ``start_offset`` is the smallest acceptable base offset of the first batch (the end of
        the previous segment). Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        self._rolling_timestamp = None
        expected = max(start_offset, self.base_offset)
        valid = 0
        handle = self.handle
        if self.size:
            with mmap.mmap(handle.fd, self.size, access=mmap.ACCESS_READ) as mm:
                valid, expected = self._validate(mm, expected)
        self.next_offset = expected if valid else self.base_offset
        truncated = self.size - valid
        if truncated:
            handle.truncate(valid)
            self.size = valid
        return truncated

    def _validate(self, mm: mmap.mmap, expected: int) -> tuple[int, int]:
        pos, size = 0, len(mm)
        while pos < size:
            if frame_error(mm, pos, size) is not None:
                break
            header = parse_header(mm, pos)
            if (
                header.base_offset < expected
                or header.last_offset_delta < 0
                or header.last_offset - self.base_offset > INT32_MAX
                or not crc_ok(mm, pos, header)
            ):
                break
            if pos == 0:
                self._rolling_timestamp = header.max_timestamp
            self._index_batch(pos, header.size, header.last_offset, header.max_timestamp)
            pos += header.size
            expected = header.last_offset + 1
        return pos, expected

    # ---------------------------------------------------------------- truncate / delete
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        self.handle.truncate(position)
        self.size = position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        if position == 0:
            self._rolling_timestamp = None
        self.load_tail_state()
        return removed

    def close(self) -> None:
        """Finish the time index and drop this segment's descriptors (regions keep theirs)."""
        self.on_become_inactive()
        self._closed = True
        files.cache.forget(str(self.log_path))
        self.offset_index.close()
        self.time_index.close()

    def release(self) -> None:
        """Drop this segment's cached descriptors; the next use reopens them (an old segment)."""
        files.cache.forget(str(self.log_path))
        self.offset_index.release()
        self.time_index.release()

    def paths(self) -> list[Path]:
        """The segment's files; the ``.txnindex`` (storage.txn_index) only when it exists."""
        txn_index = self.directory / file_name(self.base_offset, ".txnindex")
        extra = [txn_index] if txn_index.exists() else []
        return [self.log_path, self.offset_index.path, self.time_index.path, *extra]

    def rename_to_deleted(self) -> list[Path]:
        """Rename the three files to ``*.deleted`` (Kafka's marker of a pending delete)."""
        renamed = []
        for path in self.paths():
            target = path.with_name(path.name + DELETED_SUFFIX)
            files.cache.forget(str(path))
            try:
                os.rename(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        self.log_path = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        for index in (self.offset_index, self.time_index):
            index.path = index.path.with_name(index.path.name + DELETED_SUFFIX)
        return renamed

    def delete(self) -> None:
        self.close()
        for path in self.paths():
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"

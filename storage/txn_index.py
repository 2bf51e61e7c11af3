"""Transactions in a partition's log: aborted-transaction indexes and the last stable offset.

``<base offset:020d>.txnindex`` beside each segment is Kafka's aborted-transaction index: one
34-byte entry (big-endian) per transaction aborted by a marker in that segment::

    version             int16   0
    producer_id         int64
    first_offset        int64   the transaction's first offset in this partition
    last_offset         int64   the offset of its ABORT marker
    last_stable_offset  int64   the partition's LSO once the abort was written

read_committed fetches return the entries whose last offset is at or above the fetch offset and
whose first offset lies below the fetch's upper bound, and consumers drop the aborted batches
with them. Commits need no entry.

:class:`TxnLogState` keeps one log's newest entries in memory, sorted by last offset. Older
entries are read from their files when a fetch reaches back to them, so memory stays bounded.
It also keeps the transactions completed above the high watermark. The last stable offset (LSO) is the smallest of
the high watermark, the first offset of every open transaction (kept by the producer state) and
the first offset of every completed transaction whose marker the high watermark has not yet
passed.

Crash behaviour: an entry is appended and fsynced when its marker is appended (aborts are rare),
so entries below the recovery point are durable. On recovery the producer state replays batch
headers from its snapshot; every entry at or above the replay start is dropped first and
re-derived from the replayed markers, so the index never holds an abort whose marker was lost,
and a torn index tail is simply re-derived. Compaction (storage.cleaner) rewrites a run's
entries into the cleaned segment's ``.txnindex``, which is swapped in with the segment.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from strom.protocol.records.control import ABORT, control_type
from strom.protocol.records.header import BatchHeader

log = logging.getLogger("strom.storage.txn")
TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def txn_index_path(directory: Path, base_offset: int) -> Path:
    return Path(directory) / f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


def read_index(path: Path) -> list[AbortedTxn]:
    """Entries of one ``.txnindex`` (a torn last entry or unknown version ends the read)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != VERSION:
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def _encode(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(VERSION, *e) for e in entries)


def write_index(path: Path, entries: list[AbortedTxn], keep_empty: bool = False) -> None:
    """Replace a ``.txnindex`` (removed when no entry is left, unless ``keep_empty``)."""
    if not entries and not keep_empty:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_encode(entries))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_entry(path: Path, entry: AbortedTxn) -> None:
    with open(path, "ab") as f:
        f.write(_encode([entry]))
        f.flush()
        os.fsync(f.fileno())


MAX_IN_MEMORY = 10_000  # aborted transactions kept in memory per log; older ones are read from files
SEGMENTS_CACHED = 8  # parsed ``.txnindex`` files below the memory floor kept for fetches of old data


class TxnLogState:
    """One log's aborted transactions and completed-but-unreplicated transactions.

    Memory stays bounded: the newest entries (those whose marker is at or above :attr:`floor`,
    at most about MAX_IN_MEMORY) are kept in a list sorted by marker offset, and serve the
    read_committed fetches near the log end from memory. Entries below the floor live only in
    their segments' ``.txnindex`` files. A fetch of older data reads those files, as Kafka
    does for every fetch, through a small cache of parsed files (SEGMENTS_CACHED). The floor
    only rises, and only while every entry below it is in a file.

    Threads: appends, truncation and retention run on the event-loop thread under the log's
    lock; compaction's :meth:`replace_range` runs on a worker thread under that lock. Fetches
    (:meth:`collect`) read without it, so the entry list and its offsets are one pair
    (``_entries``) that compaction replaces whole.
    """

    def __init__(self, directory: Path, bases: Callable[[], Sequence[int]] = lambda: []) -> None:
        self.directory = Path(directory)
        self._bases = bases  # () -> the log's segment base offsets, ascending
        self._entries: tuple[list[AbortedTxn], list[int]] = ([], [])  # sorted by last_offset
        self.floor = 0  # entries whose marker is below it are only in files
        self._cache: OrderedDict[int, list[AbortedTxn]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.unreplicated: list[tuple[int, int]] = []  # (first offset, marker offset)
        self.unwritten: set[int] = set()  # segments whose index file missed an entry (write failed)

    @property
    def aborted(self) -> list[AbortedTxn]:
        """The entries in memory (those at or above :attr:`floor`)."""
        return self._entries[0]

    @property
    def _lasts(self) -> list[int]:
        return self._entries[1]

    # ------------------------------------------------------------ loading
    def load(self, segment_bases: list[int]) -> None:
        """Read the newest segments' files until about MAX_IN_MEMORY entries are in memory."""
        entries: list[AbortedTxn] = []
        self.floor = 0
        for base in reversed(segment_bases):
            if len(entries) >= MAX_IN_MEMORY:
                self.floor = self._next_base(base, segment_bases)
                break
            entries[:0] = read_index(txn_index_path(self.directory, base))
        entries.sort(key=lambda e: e.last_offset)
        self._entries = (entries, [e.last_offset for e in entries])
        self._forget_cache()
        self.unreplicated = []

    @staticmethod
    def _next_base(base: int, segment_bases: list[int]) -> int:
        i = bisect.bisect_right(segment_bases, base)
        return segment_bases[i] if i < len(segment_bases) else base

    def _bound_memory(self) -> None:
        """Raise the floor so that about half of MAX_IN_MEMORY entries stay in memory."""
        aborted, lasts = self._entries
        if len(aborted) <= MAX_IN_MEMORY or self.unwritten:
            return  # every entry below a floor must be in a file: not while a write failed
        cut = len(aborted) - MAX_IN_MEMORY // 2
        self.floor = lasts[cut]
        cut = bisect.bisect_left(lasts, self.floor)
        self._entries = (aborted[cut:], lasts[cut:])

    def truncate_from(self, offset: int, segment_bases: list[int]) -> None:
        """Forget every abort whose marker is at or above ``offset`` (memory and files)."""
        aborted, lasts = self._entries
        cut = bisect.bisect_left(lasts, offset)
        bases = {self._segment_of(e.last_offset, segment_bases) for e in aborted[cut:]}
        if offset < self.floor:  # entries only in files may be cut as well
            first = max(0, bisect.bisect_right(segment_bases, offset) - 1)
            bases.update(b for b in segment_bases[first:] if b < self.floor)
        if cut < len(aborted):
            del aborted[cut:], lasts[cut:]
        for base in bases:
            if base is None:
                continue
            path = txn_index_path(self.directory, base)
            keep = [e for e in self._segment_entries(base, segment_bases) if e.last_offset < offset]
            if keep != read_index(path):
                write_index(path, keep)
        self.floor = min(self.floor, offset)
        self._forget_cache()
        self.unreplicated = [u for u in self.unreplicated if u[1] < offset]

    def _segment_entries(self, base: int, segment_bases: list[int]) -> list[AbortedTxn]:
        """A segment's entries: its file's, and those in memory (a failed write may have left
        the file short)."""
        i = bisect.bisect_right(segment_bases, base)
        end = segment_bases[i] if i < len(segment_bases) else 1 << 62
        aborted, lasts = self._entries
        mine = aborted[bisect.bisect_left(lasts, base) : bisect.bisect_left(lasts, end)]
        on_disk = [e for e in read_index(txn_index_path(self.directory, base)) if e.last_offset < self.floor]
        return on_disk + mine

    def drop_below(self, log_start_offset: int) -> None:
        """Retention moved the log start: entries wholly below it are of no use to a fetch."""
        aborted, lasts = self._entries
        cut = bisect.bisect_left(lasts, log_start_offset)
        if cut:
            del aborted[:cut], lasts[:cut]
        self._forget_cache()

    def clear(self) -> None:
        for path in self.directory.glob("*" + TXN_INDEX_SUFFIX):
            path.unlink(missing_ok=True)
        self._entries, self.unreplicated, self.floor = ([], []), [], 0
        self._forget_cache()

    def _forget_cache(self, start: int = 0, end: int = 1 << 62) -> None:
        with self._cache_lock:
            for base in [b for b in self._cache if start <= b < end]:
                del self._cache[base]

    @staticmethod
    def _segment_of(offset: int, segment_bases: list[int]) -> int | None:
        i = bisect.bisect_right(segment_bases, offset) - 1
        return segment_bases[i] if i >= 0 else None

    def write_unwritten(self, segment_bases: list[int]) -> None:
        """Rewrite the index files that missed an entry (at close), from memory."""
        for base in sorted(self.unwritten):
            i = bisect.bisect_left(segment_bases, base)
            if i < len(segment_bases) and segment_bases[i] == base:
                end = segment_bases[i + 1] if i + 1 < len(segment_bases) else 1 << 62
                try:
                    self.rewrite_segment(base, end)
                except OSError as exc:
                    log.error("could not write %s: %s", txn_index_path(self.directory, base), exc)
                    continue
            self.unwritten.discard(base)

    def replace_range(self, base: int, next_offset: int, entries: list[AbortedTxn]) -> None:
        """Compaction swapped in a segment for ``[base, next_offset)`` whose ``.txnindex`` holds
        ``entries`` (already written): the entries in memory for that range become those (the
        ones at or above the floor). A fetch reading meanwhile sees the old list or the new."""
        aborted, lasts = self._entries
        lo = bisect.bisect_left(lasts, max(base, self.floor))
        hi = bisect.bisect_left(lasts, next_offset)
        entries = sorted((e for e in entries if e.last_offset >= self.floor), key=lambda e: e.last_offset)
        new = aborted[:lo] + entries + aborted[hi:]
        self._entries = (new, [e.last_offset for e in new])
        self._forget_cache(base, next_offset)
        self.unwritten = {b for b in self.unwritten if not base <= b < next_offset}

    def rewrite_segment(self, base: int, next_offset: int) -> None:
        """Write a segment's index from the entries in memory (and its file's below the floor)."""
        aborted, lasts = self._entries
        lo = bisect.bisect_left(lasts, max(base, self.floor))
        hi = bisect.bisect_left(lasts, next_offset)
        below = (
            []
            if base >= self.floor
            else [e for e in read_index(txn_index_path(self.directory, base)) if e.last_offset < self.floor]
        )
        write_index(txn_index_path(self.directory, base), below + aborted[lo:hi])

    def all_entries(self) -> list[AbortedTxn]:
        """Every entry of the log, from files below the floor and memory above (for the cleaner)."""
        out: list[AbortedTxn] = []
        if self.floor:
            for base in self._bases():
                if base >= self.floor:
                    break
                out.extend(e for e in read_index(txn_index_path(self.directory, base)) if e.last_offset < self.floor)
        return out + list(self._entries[0])

    # ------------------------------------------------------------ appends
    def on_control(
        self,
        buf: bytes | bytearray | memoryview,
        pos: int,
        header: BatchHeader,
        first_offset: int | None,
        segment_base: int,
        stable_after: int,
        high_watermark: int,
    ) -> None:
        """A marker was appended at ``header.base_offset`` ending ``first_offset``'s transaction."""
        if first_offset is None:
            return  # no open transaction of that producer here: nothing to index or hold
        marker = header.base_offset
        if control_type(buf, pos) == ABORT:
            entry = AbortedTxn(header.producer_id, first_offset, marker, stable_after)
            aborted, lasts = self._entries
            aborted.append(entry)
            lasts.append(marker)
            try:
                append_entry(txn_index_path(self.directory, segment_base), entry)
            except OSError as exc:  # the marker is written: keep serving from memory
                log.error(
                    "could not write the aborted-transaction index of %s (producer %d, offsets %d-%d): "
                    "%s; written again when the log closes",
                    self.directory,
                    entry.producer_id,
                    entry.first_offset,
                    entry.last_offset,
                    exc,
                )
                self.unwritten.add(segment_base)
            if len(aborted) > MAX_IN_MEMORY:
                self._bound_memory()
        if self.unreplicated:  # bounded on followers too, whose LSO nobody asks for
            self.unreplicated = [u for u in self.unreplicated if u[1] >= high_watermark]
        if marker >= high_watermark:
            self.unreplicated.append((first_offset, marker))

    # ------------------------------------------------------------ queries
    def last_stable_offset(self, high_watermark: int, first_unstable: int | None) -> int:
        if self.unreplicated:
            self.unreplicated = [u for u in self.unreplicated if u[1] >= high_watermark]
        lso = high_watermark
        if first_unstable is not None and first_unstable < lso:
            lso = first_unstable
        for first, _ in self.unreplicated:
            if first < lso:
                lso = first
        return lso

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions a read_committed fetch from ``fetch_offset`` needs to know of:
        those whose marker is at or after it and whose first offset is below ``upper_bound``."""
        aborted, lasts = self._entries
        out = []
        if fetch_offset < self.floor:
            bases = self._bases()
            first = max(0, bisect.bisect_right(bases, fetch_offset) - 1)
            for base in bases[first:]:
                if base >= self.floor:
                    break
                for e in self._cached(base):
                    if e.last_offset >= self.floor:
                        break
                    if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                        out.append(e)
                    if e.last_stable_offset >= upper_bound:
                        return out  # no later abort can reach below the bound (Kafka's rule)
        for i in range(bisect.bisect_left(lasts, fetch_offset), len(aborted)):
            e = aborted[i]
            if e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                break
        return out

    def _cached(self, base: int) -> list[AbortedTxn]:
        with self._cache_lock:
            entries = self._cache.get(base)
            if entries is not None:
                self._cache.move_to_end(base)
                return entries
        entries = read_index(txn_index_path(self.directory, base))
        with self._cache_lock:
            self._cache[base] = entries
            while len(self._cache) > SEGMENTS_CACHED:
                self._cache.popitem(last=False)
        return entries

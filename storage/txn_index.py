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

:class:`TxnLogState` keeps one log's entries in memory (sorted by last offset) and the
transactions completed above the high watermark. The last stable offset (LSO) is the smallest of
the high watermark, the first offset of every open transaction (kept by the producer state) and
the first offset of every completed transaction whose marker the high watermark has not yet
passed.

Crash behaviour: an entry is appended and fsynced when its marker is appended (aborts are rare),
so entries below the recovery point are durable. On recovery the producer state replays batch
headers from its snapshot; every entry at or above the replay start is dropped first and
re-derived from the replayed markers, so the index never holds an abort whose marker was lost,
and a torn index tail is simply re-derived.
"""
from __future__ import annotations

import bisect
import logging
import os
import struct
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


def _encode(entries) -> bytes:
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


class TxnLogState:
    """One log's aborted transactions and completed-but-unreplicated transactions."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.aborted: list[AbortedTxn] = []       # sorted by last_offset
        self._lasts: list[int] = []
        self.unreplicated: list[tuple[int, int]] = []  # (first offset, marker offset)
        self.unwritten: set[int] = set()  # segments whose index file missed an entry (write failed)

    # ------------------------------------------------------------ loading
    def load(self, segment_bases: list[int]) -> None:
        entries = []
        for base in segment_bases:
            entries.extend(read_index(txn_index_path(self.directory, base)))
        entries.sort(key=lambda e: e.last_offset)
        self.aborted = entries
        self._lasts = [e.last_offset for e in entries]
        self.unreplicated = []

    def truncate_from(self, offset: int, segment_bases: list[int]) -> None:
        """Forget every abort whose marker is at or above ``offset`` (memory and files)."""
        cut = bisect.bisect_left(self._lasts, offset)
        if cut < len(self.aborted):
            dropped = self.aborted[cut:]
            del self.aborted[cut:], self._lasts[cut:]
            for base in {self._segment_of(e.last_offset, segment_bases) for e in dropped}:
                if base is not None:
                    keep = [e for e in self.aborted if self._segment_of(e.last_offset, segment_bases) == base]
                    write_index(txn_index_path(self.directory, base), keep)
        self.unreplicated = [u for u in self.unreplicated if u[1] < offset]

    def drop_below(self, log_start_offset: int) -> None:
        """Retention moved the log start: entries wholly below it are of no use to a fetch."""
        cut = bisect.bisect_left(self._lasts, log_start_offset)
        if cut:
            del self.aborted[:cut], self._lasts[:cut]

    def clear(self) -> None:
        for path in self.directory.glob("*" + TXN_INDEX_SUFFIX):
            path.unlink(missing_ok=True)
        self.aborted, self._lasts, self.unreplicated = [], [], []

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
        ``entries`` (already written): the entries in memory for that range become those."""
        lo = bisect.bisect_left(self._lasts, base)
        hi = bisect.bisect_left(self._lasts, next_offset)
        entries = sorted(entries, key=lambda e: e.last_offset)
        self.aborted[lo:hi] = entries
        self._lasts[lo:hi] = [e.last_offset for e in entries]
        self.unwritten = {b for b in self.unwritten if not base <= b < next_offset}

    def rewrite_segment(self, base: int, next_offset: int) -> None:
        """Write the index of a segment swapped in by compaction from the entries in memory."""
        lo = bisect.bisect_left(self._lasts, base)
        hi = bisect.bisect_left(self._lasts, next_offset)
        write_index(txn_index_path(self.directory, base), self.aborted[lo:hi])

    # ------------------------------------------------------------ appends
    def on_control(self, buf, pos: int, header: BatchHeader, first_offset: int | None,
                   segment_base: int, stable_after: int, high_watermark: int) -> None:
        """A marker was appended at ``header.base_offset`` ending ``first_offset``'s transaction."""
        if first_offset is None:
            return  # no open transaction of that producer here: nothing to index or hold
        marker = header.base_offset
        if control_type(buf, pos) == ABORT:
            entry = AbortedTxn(header.producer_id, first_offset, marker, stable_after)
            self.aborted.append(entry)
            self._lasts.append(marker)
            try:
                append_entry(txn_index_path(self.directory, segment_base), entry)
            except OSError as exc:  # the marker is written: keep serving from memory
                log.error("could not write the aborted-transaction index of %s (producer %d, offsets %d-%d): "
                          "%s; written again when the log closes", self.directory,
                          entry.producer_id, entry.first_offset, entry.last_offset, exc)
                self.unwritten.add(segment_base)
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
        """Aborted transactions a read_committed fetch from ``fetch_offset`` needs to know of."""
        lo = bisect.bisect_left(self._lasts, fetch_offset)
        return [e for e in self.aborted[lo:] if e.first_offset < upper_bound]

"""Log compaction for ``cleanup.policy=compact``: Kafka's LogCleaner.

A compacted log keeps, for every key, only the record with the highest offset. Cleaning works
on the *cleanable* prefix of the log: the segments before the active segment that lie wholly
below the high watermark (and, with ``min.compaction.lag.ms``, are old enough). The part of it
above the log's *first dirty offset* (where the previous cleaning stopped) is the dirty section.

One pass (:meth:`LogCleaner.clean`):

1. Build an offset map ``key -> highest offset`` from the dirty section.
2. Group the cleanable segments into runs that fit one segment (``segment.bytes``, the index
   size, int32 relative offsets) and rewrite each run into one cleaned segment named after the
   run's first base offset. A record survives if no later record has its key; a record with a
   null key never survives (compacted topics reject them at Produce); a tombstone (null value)
   survives until its batch's delete horizon has passed.
3. Offsets never change. A rewritten batch keeps its base offset, ``last_offset_delta``,
   producer id/epoch/base sequence, partition leader epoch, timestamp type, transactional flag
   and codec (records are re-compressed with it); record timestamps are kept exactly. A batch
   that loses every record is dropped, except the batches producer state needs and the last
   batch of the run (so the cleaned segment ends at the same offset as the segments it
   replaces): those are kept as empty batches (see Transactions below).

Transactions (Kafka's LogCleaner and its CleanedTransactionMetadata, followed rule for rule):

* The cleanable range ends at the last stable offset, so an open transaction's batches are never
  cleaned.
* The batches of a pass are walked in offset order with the log's aborted transactions
  (storage.txn_index) sorted by first offset: a transactional batch of a producer with an
  aborted transaction in progress (its first offset reached, its ABORT marker not yet) is
  aborted data. It takes no part in the offset map and is removed whole. Any other
  transactional batch marks its producer's transaction as having data, and is compacted like
  any other batch.
* A COMMIT marker is "empty" when no batch of its transaction was met in this pass. An ABORT
  marker is empty when none of its aborted batches was met. A marker with data is kept
  verbatim. An ABORT marker with data also keeps its aborted-transaction entry, which is
  written to the cleaned segment's ``.txnindex``. So an entry goes away in the pass that finds
  its data gone, never later than its marker does. A consumer that met the entry without the
  marker would skip that producer's later committed batches.
* An empty marker is removed in two passes (KIP-534, as tombstones): the first rewrites it with
  the delete-horizon bit and ``base_timestamp = now + delete.retention.ms``. A pass at or after
  that horizon removes it. A control batch with no record (a marker emptied earlier) is
  removed.
* Producer state, as Kafka keeps it: the batch holding a producer's last data offset is kept
  (emptied if nothing in it survives), so its sequence survives for idempotence. A producer whose
  last entry is a marker (an epoch bump cleared its batches) keeps every marker of its current
  epoch, emptied once removable, for fencing. The last batch of every run is kept (emptied if
  need be) so the cleaned segment ends where the run did. Kafka keeps only the last batch of the
  round; the difference is one empty batch per run, which no consumer sees.
* An empty batch is written as Kafka's ``writeEmptyHeader`` writes it (no records, no codec,
  base timestamp -1, the control flag kept), except that its max timestamp is -1 too.

Delete horizon (KIP-534, attributes bit 6 = 0x40): when a batch holding tombstones (or an
empty marker) is first rewritten, its ``base_timestamp`` is set to ``now + delete.retention.ms``
and the bit is set. Record timestamp deltas are re-based on it, so ``base_timestamp + delta``
still gives every record's original timestamp, and ``max_timestamp`` stays the largest record
timestamp. Once a pass runs at or after the horizon, the tombstones (and the empty marker) are
removed. As in Kafka, a batch rewritten later keeps the horizon it has. Tombstones are
therefore kept at least ``delete.retention.ms`` after the segment holding them was first
cleaned. Kafka's cleaner starts a pass only on the dirty ratio or max.compaction.lag.ms.
Strom's also starts one when the earliest horizon that still guards a tombstone or a marker
has passed.

Files and crash safety. A run is written to ``<base>.log.cleaned``, ``<base>.index.cleaned``,
``<base>.timeindex.cleaned`` and ``<base>.txnindex.cleaned`` (same layouts as a segment, see
LogSegment / storage.index / storage.txn_index; the last one is written even when it has no
entry), all fsynced. Then, under the log's lock: the four files are renamed to ``*.swap`` (the
``.log`` last) and the directory fsynced. The old segments' files (with their ``.txnindex``)
are renamed to ``*.deleted``. The swap files are renamed to their final names (``.log`` last)
and the directory fsynced; an empty ``.txnindex`` is then removed. On :func:`recover_swaps`
(run by ``Log.open`` before anything else), a ``.log.swap`` is complete. Every ``.log`` whose
base offset lies in ``[swap base, swap next offset)`` is deleted with its indexes. The
``.txnindex`` comes from ``.txnindex.swap``, or ``.txnindex.cleaned``, or, when neither is
left, the final name (it was already renamed). The swap becomes ``<base>.log`` and its offset
and time indexes are rebuilt. ``*.cleaned`` files (a pass that had not reached the swap) are
deleted by the log's leftover sweep, leaving the old segments. The cleaned segment always ends
at the replaced run's end offset, so that range is exactly the replaced run. A crash at any
point leaves, for each run, either the old segment files and their ``.txnindex`` or the new
ones, never a mix. It never loses the latest record of a key.

Locking: :meth:`LogCleaner.clean` is synchronous and may run on a worker thread while the
event-loop thread appends and reads. It takes the log's lock only to capture the segment list
(and each producer's last offset) at the start and to swap each run in at the end; reading old
segments and writing cleaned files happens without it (non-active segments never change; their
descriptors stay open through the captured handles). If the log changed underneath (truncation,
retention, close), the run is not swapped and the pass reports ``aborted``. A per-log lock
(``CleanerState.lock``) keeps two passes over one log from overlapping.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from strom.protocol.records import crc as crc32c  # crc32c.crc32c: the C function, loaded lean
from strom.protocol.records.batch import Record, build_batch, read_batch
from strom.protocol.records.control import ABORT, COMMIT, control_type
from strom.protocol.records.errors import RecordsError
from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    entry_frame,
    parse_header,
)
from strom.storage import files
from strom.storage.checkpoint import fsync_dir
from strom.storage.errors import CorruptLog, StorageError
from strom.storage.files import FileHandle
from strom.storage.index import OffsetIndex, TimeIndex
from strom.storage.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    file_name,
    header_error,
)
from strom.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, read_index, write_index

if TYPE_CHECKING:
    from strom.storage.log import Log

DELETE_HORIZON_MASK = 0x40  # attributes bit 6: base_timestamp is the delete horizon (KIP-534)
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
NO_TIMESTAMP = -1
SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)  # renamed in this order: .log last

_READ_BLOCK = 1 << 20
_WRITE_BUFFER = 1 << 20
_MAX_TIMESTAMP_OFFSET = 35
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_CLEANED_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


# ==================================================================== state and results
@dataclass
class CleanerState:
    """What the cleaner remembers about one log.

    ``first_dirty_offset``: where the last pass stopped (Kafka's cleaner checkpoint, kept by
    LogManager in ``cleaner-offset-checkpoint``); 0 means "clean everything".
    ``next_horizon_ms``: the earliest delete horizon among cleaned batches, or None when unknown
    (after a restart it is recomputed from batch headers on demand).
    """

    first_dirty_offset: int = 0
    next_horizon_ms: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


class CleanView(NamedTuple):
    """What ``Log.cleaning_view`` captures under the log's lock."""

    segments: list[LogSegment]
    handles: list[FileHandle]
    producer_last_offsets: dict[int, ProducerLast]
    high_watermark: int  # the last stable offset when transactions are open (never cleaned past)
    log_start_offset: int
    aborted: tuple[AbortedTxn, ...] = ()  # storage.txn_index.AbortedTxn of the log: whose data the cleaner removes


class ProducerLast(NamedTuple):
    """What the cleaner keeps of a producer (Kafka's LastRecord): the last offset of its last
    data batch (-1 when a marker with a newer epoch cleared its batches) and its epoch."""

    last_data_offset: int
    epoch: int


@dataclass(frozen=True)
class CleanResult:
    """Outcome of one pass over one log."""

    start_offset: int  # first offset of the cleaned range (the log start)
    end_offset: int  # first offset not cleaned: the new first dirty offset
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int = 0
    tombstones_removed: int = 0
    aborted: bool = False  # the log changed underneath; the remaining runs were left as they were
    markers_removed: int = 0  # transaction markers (control batches) removed


@dataclass
class _Stats:
    records_removed: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0
    min_horizon: int | None = None

    def horizon(self, value: int) -> None:
        self.min_horizon = value if self.min_horizon is None else min(self.min_horizon, value)


# ==================================================================== policy
def first_dirty_offset(log: Log) -> int:
    """The log's first dirty offset, clamped to [log start, log end]."""
    offset = log.cleaner_state.first_dirty_offset
    if offset < log.log_start_offset or offset > log.log_end_offset:
        return log.log_start_offset
    return offset


def cleanable_segments(log: Log, now_ms: int, view: CleanView | None = None) -> list[LogSegment]:
    """The prefix of non-active segments below min(active base, high watermark), old enough."""
    view = log.cleaning_view() if view is None else view
    segments = view.segments
    limit = min(segments[-1].base_offset, view.high_watermark)
    lag = log.config.min_compaction_lag_ms
    out = []
    for segment in segments[:-1]:
        if segment.next_offset > limit or (lag > 0 and segment.largest_timestamp > now_ms - lag):
            break
        out.append(segment)
    return out


def dirty_ratio(log: Log, now_ms: int, view: CleanView | None = None) -> float:
    """Dirty bytes / all bytes of the cleanable part (0.0 when nothing is cleanable)."""
    segments = cleanable_segments(log, now_ms, view)
    first_dirty = first_dirty_offset(log)
    total = sum(s.size for s in segments)
    dirty = sum(s.size for s in segments if s.next_offset > first_dirty)
    return dirty / total if total else 0.0


def needs_cleaning(log: Log, now_ms: int) -> bool:
    """Kafka's choice: compact policy, and the dirty ratio exceeds min.cleanable.dirty.ratio,
    or a dirty segment is older than max.compaction.lag.ms, or a delete horizon has passed."""
    if not log.config.compact_enabled:
        return False
    view = log.cleaning_view()
    segments = cleanable_segments(log, now_ms, view)
    if not segments:
        return False
    first_dirty = first_dirty_offset(log)
    handles = dict(zip(map(id, view.segments), view.handles, strict=True))
    dirty = [s for s in segments if s.next_offset > first_dirty]
    if dirty and dirty_ratio(log, now_ms, view) > log.config.min_cleanable_dirty_ratio:
        return True
    if dirty and _first_timestamp(dirty[0], handles[id(dirty[0])]) <= now_ms - log.config.max_compaction_lag_ms:
        return True
    clean = [(s, handles[id(s)]) for s in segments if s.next_offset <= first_dirty]
    horizon = _next_horizon(log, clean)
    return horizon is not None and horizon <= now_ms


def _first_timestamp(segment: LogSegment, handle: FileHandle) -> int:
    """Max timestamp of the segment's first batch (what max.compaction.lag.ms is measured from)."""
    if segment.size >= HEADER_SIZE:
        first = parse_header(handle.pread(HEADER_SIZE, 0)).max_timestamp
        if first >= 0:
            return first
    return segment.largest_timestamp


def _next_horizon(log: Log, clean: list[tuple[LogSegment, FileHandle]]) -> int | None:
    """The earliest delete horizon in the clean section (found once from batch headers, then
    kept up to date by each pass)."""
    state = log.cleaner_state
    if state.next_horizon_ms is None:
        horizons = [
            h.base_timestamp
            for s, handle in clean
            for h, _ in iter_segment_batches(handle, s.size, str(s.log_path))
            if h.attributes & DELETE_HORIZON_MASK
        ]
        state.next_horizon_ms = min(horizons, default=-1)
    return None if state.next_horizon_ms < 0 else state.next_horizon_ms


def group_segments(segments: list[LogSegment], max_bytes: int, max_index_bytes: int) -> list[list[LogSegment]]:
    """Consecutive runs that fit one segment: bytes, index bytes and int32 relative offsets."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        current = groups[-1] if groups else None
        if current is not None and _fits(current, segment, max_bytes, max_index_bytes):
            current.append(segment)
        else:
            groups.append([segment])
    return groups


def _fits(group: list[LogSegment], segment: LogSegment, max_bytes: int, max_index_bytes: int) -> bool:
    size = sum(s.size for s in group) + segment.size
    index = sum(s.offset_index.size_in_bytes for s in group) + segment.offset_index.size_in_bytes
    time_index = sum(s.time_index.size_in_bytes for s in group) + segment.time_index.size_in_bytes
    return (
        size <= max_bytes
        and index <= max_index_bytes
        and time_index <= max_index_bytes
        and segment.next_offset - 1 - group[0].base_offset <= INT32_MAX
    )


# ==================================================================== reading
def iter_segment_batches(handle: FileHandle, size: int, name: str) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of every batch in the first ``size`` bytes of a segment file."""
    buf, buf_start, pos = b"", 0, 0
    while pos < size:
        rel = pos - buf_start
        if len(buf) - rel < HEADER_SIZE:
            buf, buf_start, rel = handle.pread(min(_READ_BLOCK, size - pos), pos), pos, 0
        error = header_error(buf, rel, len(buf))
        if error is None and pos + LOG_OVERHEAD + entry_frame(buf, rel)[1] > size:
            error = "batch extends past the end of the segment"
        if error is not None:
            raise CorruptLog(f"{name}@{pos}: {error}")
        header = parse_header(buf, rel)
        if rel + header.size > len(buf):
            buf, buf_start, rel = handle.pread(max(_READ_BLOCK, header.size), pos), pos, 0
        yield header, buf[rel : rel + header.size]
        pos += header.size


def _decode(header: BatchHeader, raw: bytes, name: str) -> list[Record]:
    try:
        return read_batch(raw)[1]
    except RecordsError as exc:
        raise CorruptLog(f"{name}: batch at offset {header.base_offset} cannot be cleaned: {exc}") from None


class TxnTracker:
    """Kafka's CleanedTransactionMetadata: the transactions a pass is inside of, batch by batch.

    Fed every batch of a pass in offset order (:meth:`on_batch`, :meth:`on_control`) and the
    log's aborted transactions. It says which data batches are aborted and which markers no
    longer have data. ``kept`` collects the aborted-transaction entries whose ABORT marker stays
    (with data); the caller takes them per run for the cleaned ``.txnindex``.
    """

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda e: e.first_offset)
        self._next = 0
        self._committed: set[int] = set()  # producers with data in an open committed txn
        self._aborted: dict[int, list[Any]] = {}  # producer -> [entry, whether data was met]
        self.kept: list[AbortedTxn] = []

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            entry = pending[self._next]
            self._next += 1
            self._aborted.setdefault(entry.producer_id, [entry, False])

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction (to be discarded)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._aborted.get(header.producer_id)
        if state is not None:
            state[1] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, raw: bytes) -> bool:
        """A marker: True when no data of its transaction was met (it may be removed)."""
        self._consume_up_to(header.last_offset)
        if not header.records_count:
            return True  # emptied by an earlier pass
        kind = control_type(raw, 0)
        pid = header.producer_id
        if kind == ABORT:
            state = self._aborted.pop(pid, None)
            if state is not None and state[1]:
                self.kept.append(state[0])
                return False
            return True
        if kind == COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False

    def take_kept(self) -> list[AbortedTxn]:
        kept, self.kept = self.kept, []
        return sorted(kept, key=lambda e: e.last_offset)


def build_offset_map(
    segments: list[LogSegment], handles: list[FileHandle], first_dirty: int, aborted: Iterable[AbortedTxn] = ()
) -> dict[bytes, int]:
    """key -> highest offset among the records at or above ``first_dirty`` in ``segments``
    (records of aborted transactions excluded). Only the dirty section is read, so only the
    aborts whose marker lies in it count (Kafka's collectAbortedTransactions(firstDirty, end)):
    an abort ended in the clean section must not make later data of its producer look aborted."""
    offsets: dict[bytes, int] = {}
    tracker = TxnTracker(e for e in aborted if e.last_offset >= first_dirty)
    for segment, handle in zip(segments, handles, strict=True):
        if segment.next_offset <= first_dirty:
            continue
        for header, raw in iter_segment_batches(handle, segment.size, str(segment.log_path)):
            if header.is_control:
                tracker.on_control(header, raw)
                continue
            if tracker.on_batch(header) or header.last_offset < first_dirty:
                continue
            for record in _decode(header, raw, str(segment.log_path)):
                offset = header.base_offset + record.offset_delta
                if record.key is not None and offset >= first_dirty:
                    offsets[record.key] = offset
    return offsets


# ==================================================================== filtering one batch
def _retained(
    header: BatchHeader, records: list[Record], offsets: dict[bytes, int], now_ms: int, stats: _Stats
) -> list[Record]:
    expired = bool(header.attributes & DELETE_HORIZON_MASK) and now_ms >= header.base_timestamp
    kept = []
    for record in records:
        latest = offsets.get(record.key) if record.key is not None else None
        if record.key is None or (latest is not None and header.base_offset + record.offset_delta < latest):
            stats.records_removed += 1
        elif record.value is None and expired:
            stats.tombstones_removed += 1
        else:
            kept.append(record)
    return kept


def filter_batch(
    header: BatchHeader,
    raw: bytes,
    offsets: dict[bytes, int],
    keep_header: bool,
    now_ms: int,
    delete_retention_ms: int,
    stats: _Stats,
    name: str = "",
) -> bytes | None:
    """The batch as it is after cleaning: ``raw`` itself if unchanged, a rebuilt batch, an empty
    batch (``keep_header``), or None when it disappears."""
    if header.is_control:
        return raw
    records = _decode(header, raw, name)
    kept = _retained(header, records, offsets, now_ms, stats)
    had_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
    tombstones = any(r.value is None for r in kept)
    if not kept:
        if not keep_header:
            return None
        return raw if not records else _empty_batch(header)
    # as Kafka: a horizon is set on the first rewrite that finds a tombstone, and kept after
    horizon = header.base_timestamp if had_horizon else (now_ms + delete_retention_ms if tombstones else None)
    if tombstones and horizon is not None:  # never None with tombstones
        stats.horizon(horizon)
    if len(kept) == len(records) and (had_horizon or not tombstones):
        return raw
    return _rebuild(header, kept, horizon)


def filter_control(
    header: BatchHeader,
    raw: bytes,
    removable: bool,
    keep_header: bool,
    now_ms: int,
    delete_retention_ms: int,
    stats: _Stats,
    name: str = "",
) -> bytes | None:
    """A marker that is not yet removed: kept verbatim while its transaction has data; once it
    has none (``removable``), rewritten with a delete horizon (first pass), then removed at the
    horizon (the caller does that). An emptied control batch goes unless ``keep_header``."""
    if not header.records_count:
        return raw if keep_header else None
    if not removable:
        return raw
    if header.attributes & DELETE_HORIZON_MASK:
        stats.horizon(header.base_timestamp)
        return raw
    horizon = now_ms + delete_retention_ms
    stats.horizon(horizon)
    return _rebuild(header, _decode(header, raw, name), horizon)


def _rebuild(header: BatchHeader, kept: list[Record], horizon: int | None) -> bytes:
    timestamps = [header.base_timestamp + r.timestamp_delta for r in kept]
    if horizon is not None:
        base = horizon
    elif header.attributes & DELETE_HORIZON_MASK:
        base = min(timestamps)
    else:
        base = header.base_timestamp
    rebased = [dataclasses.replace(r, timestamp_delta=ts - base) for r, ts in zip(kept, timestamps, strict=True)]
    batch = bytearray(
        build_batch(
            rebased,
            base_offset=header.base_offset,
            compression=header.compression,
            timestamp_type=header.timestamp_type,
            base_timestamp=base,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            last_offset_delta=header.last_offset_delta,
        )
    )
    max_timestamp = header.max_timestamp if header.timestamp_type else max(timestamps)
    attributes = _INT16.unpack_from(batch, ATTRIBUTES_OFFSET)[0] | (DELETE_HORIZON_MASK if horizon is not None else 0)
    return _stamp(batch, attributes, max_timestamp)


def _empty_batch(header: BatchHeader) -> bytes:
    """A batch with no records covering the same offsets, for the producer state / run end:
    as Kafka's ``writeEmptyHeader`` (no codec, base timestamp -1, the control flag kept) but
    with max timestamp -1, so a ListOffsets by timestamp never lands on a batch with nothing
    to return (Strom's time lookup trusts batch max timestamps)."""
    batch = bytearray(
        build_batch(
            [],
            base_offset=header.base_offset,
            timestamp_type=header.timestamp_type,
            base_timestamp=NO_TIMESTAMP,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            last_offset_delta=header.last_offset_delta,
        )
    )
    return bytes(batch)


def _stamp(batch: bytearray, attributes: int, max_timestamp: int) -> bytes:
    _INT16.pack_into(batch, ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(batch, _MAX_TIMESTAMP_OFFSET, max_timestamp)
    _UINT32.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


# ==================================================================== writing a cleaned segment
def cleaned_path(directory: Path, base_offset: int, suffix: str, state: str) -> Path:
    """``<base><suffix><state>``, e.g. ``00000000000000000000.log.cleaned``."""
    return Path(directory) / (file_name(base_offset, suffix) + state)


class CleanedSegment:
    """A segment being written as ``<base>.log.cleaned`` + ``.index.cleaned`` + ``.timeindex.cleaned``
    + ``.txnindex.cleaned`` (the aborted transactions in :attr:`aborted`, written by :meth:`finish`).

    The layouts are a segment's (LogSegment, storage.index); batches are appended in offset
    order through a write buffer and indexed exactly as LogSegment indexes appends. After a
    crash these files are garbage: ``Log.open`` deletes them.
    """

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, max_index_size: int) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        for suffix in SEGMENT_SUFFIXES:
            self.path(suffix).unlink(missing_ok=True)
        self._log = FileHandle(str(self.path(LOG_SUFFIX)), _CLEANED_FLAGS)
        self.offset_index = OffsetIndex(self.path(INDEX_SUFFIX), base_offset, max_index_size)
        self.time_index = TimeIndex(self.path(TIME_INDEX_SUFFIX), base_offset, max_index_size)
        self.size = 0
        self.batches = 0
        self._buffer = bytearray()
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max = base_offset
        self._since_index = 0
        self.aborted: list[AbortedTxn] = []

    def path(self, suffix: str, state: str = CLEANED_SUFFIX) -> Path:
        return cleaned_path(self.directory, self.base_offset, suffix, state)

    def append(self, batch: bytes) -> None:
        header = parse_header(batch)
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max = header.max_timestamp, header.last_offset
        if self._since_index > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, self.size)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max)
            self._since_index = 0
        self._since_index += len(batch)
        self._buffer += batch
        self.size += len(batch)
        self.batches += 1
        if len(self._buffer) >= _WRITE_BUFFER:
            self._write_buffer()

    def _write_buffer(self) -> None:
        self._log.write_all(self._buffer)
        self._buffer.clear()

    def finish(self) -> None:
        """Write the rest, add the final time index entry, write the ``.txnindex`` (even with no
        entry: recovery tells a renamed one from an old one by it), fsync all four files."""
        self._write_buffer()
        self.time_index.maybe_append(self._max_timestamp, self._offset_of_max, skip_full_check=True)
        for handle in (self._log, self.offset_index.handle, self.time_index.handle):
            handle.fsync()
        write_index(self.path(TXN_INDEX_SUFFIX), self.aborted, keep_empty=True)

    def discard(self) -> None:
        for suffix in SEGMENT_SUFFIXES:
            for state in (CLEANED_SUFFIX, SWAP_SUFFIX):
                self.path(suffix, state).unlink(missing_ok=True)

    def install(
        self, replaced: list[LogSegment], open_segment: Callable[[int], LogSegment]
    ) -> tuple[LogSegment, list[Path]]:
        """The swap (call under the log's lock): cleaned -> swap, old -> deleted, swap -> final."""
        for suffix in SEGMENT_SUFFIXES:
            files.cache.forget(str(self.path(suffix)))
            os.rename(self.path(suffix), self.path(suffix, SWAP_SUFFIX))
        fsync_dir(self.directory)
        deleted = [path for segment in replaced for path in segment.rename_to_deleted()]
        for suffix in SEGMENT_SUFFIXES:
            os.rename(self.path(suffix, SWAP_SUFFIX), self.directory / file_name(self.base_offset, suffix))
        fsync_dir(self.directory)
        if not self.aborted:
            (self.directory / file_name(self.base_offset, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)
        segment = open_segment(self.base_offset)
        segment.load_tail_state()
        return segment, deleted


# ==================================================================== recovery at open
def recover_swaps(directory: Path) -> set[int]:
    """Complete interrupted swaps in a partition dir; returns base offsets whose indexes must
    be rebuilt. Called by ``Log.open`` before leftover files are swept."""
    directory = Path(directory)
    completed: set[int] = set()
    for swap in sorted(directory.glob("*" + LOG_SUFFIX + SWAP_SUFFIX)):
        stem = swap.name[: -len(LOG_SUFFIX + SWAP_SUFFIX)]
        if len(stem) != 20 or not stem.isdigit():
            continue
        base = int(stem)
        end = _next_offset_of(swap)
        if end is None:
            swap.unlink()
            continue
        txn_index = directory / file_name(base, TXN_INDEX_SUFFIX)
        new_txn_index = next(
            (
                path
                for path in (
                    cleaned_path(directory, base, TXN_INDEX_SUFFIX, SWAP_SUFFIX),
                    cleaned_path(directory, base, TXN_INDEX_SUFFIX, CLEANED_SUFFIX),
                )
                if path.exists()
            ),
            None,
        )
        for old in _log_bases(directory):
            if base <= old < end:
                for suffix in SEGMENT_SUFFIXES:
                    if old == base and suffix == TXN_INDEX_SUFFIX and new_txn_index is None:
                        continue  # renamed already: the new one
                    (directory / file_name(old, suffix)).unlink(missing_ok=True)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (directory / file_name(base, suffix)).unlink(missing_ok=True)
            cleaned_path(directory, base, suffix, SWAP_SUFFIX).unlink(missing_ok=True)
        if new_txn_index is not None:
            os.rename(new_txn_index, txn_index)
        if txn_index.exists() and not read_index(txn_index):
            txn_index.unlink()
        os.rename(swap, directory / file_name(base, LOG_SUFFIX))
        completed.add(base)
    if completed:
        fsync_dir(directory)
    return completed


def _next_offset_of(path: Path) -> int | None:
    """The offset after the last whole batch of a ``.log.swap`` file (None if it has none)."""
    handle = FileHandle(str(path), os.O_RDONLY)
    size = os.fstat(handle.fd).st_size
    end = None
    try:
        for header, _ in iter_segment_batches(handle, size, str(path)):
            end = header.last_offset + 1
    except CorruptLog:
        pass  # fsynced before it was renamed: a torn tail means a lying disk; recovery truncates
    return end


def _log_bases(directory: Path) -> list[int]:
    bases = []
    for path in directory.glob("*" + LOG_SUFFIX):
        stem = path.name[: -len(LOG_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


# ==================================================================== the cleaner
class LogCleaner:
    """Compacts logs (see the module docstring for semantics, file protocol and locking).

    ``clean(log, now_ms)`` cleans one log unconditionally (its cleanable part);
    ``choose(logs, now_ms)`` applies :func:`needs_cleaning` and orders the dirtiest first;
    ``clean_logs(logs, now_ms)`` does both.
    Stateless apart from what each log keeps in ``log.cleaner_state``.
    """

    def choose(self, logs: Iterable[Log], now_ms: int) -> list[Log]:
        """The logs :func:`needs_cleaning` picks, dirtiest first."""
        chosen = []
        for log in logs:
            try:
                if needs_cleaning(log, now_ms):
                    chosen.append((dirty_ratio(log, now_ms), log))
            except (StorageError, OSError):
                continue  # closed or deleted meanwhile; retried next time
        chosen.sort(key=lambda pair: pair[0], reverse=True)
        return [log for _, log in chosen]

    def clean_logs(self, logs: Iterable[Log], now_ms: int) -> list[tuple[Log, CleanResult]]:
        """Clean every log :meth:`choose` picks."""
        return [(log, self.clean(log, now_ms)) for log in self.choose(logs, now_ms)]

    def clean(self, log: Log, now_ms: int) -> CleanResult:
        state = log.cleaner_state
        with state.lock:
            view = log.cleaning_view()
            segments = cleanable_segments(log, now_ms, view)
            handles = view.handles[: len(segments)]
            if not segments:
                return CleanResult(view.log_start_offset, first_dirty_offset(log), 0, 0, 0, 0)
            first_dirty = first_dirty_offset(log)
            offsets = build_offset_map(segments, handles, first_dirty, view.aborted)
            return self._clean_groups(log, view, segments, handles, offsets, now_ms)

    def _clean_groups(
        self,
        log: Log,
        view: CleanView,
        segments: list[LogSegment],
        handles: list[FileHandle],
        offsets: dict[bytes, int],
        now_ms: int,
    ) -> CleanResult:
        config = log.config
        handle_of = {id(s): h for s, h in zip(segments, handles, strict=True)}
        groups = group_segments(segments, config.segment_bytes, config.segment_index_bytes)
        stats = _Stats()
        tracker = TxnTracker(view.aborted)  # carried from run to run, as Kafka's
        after = 0
        count_after = 0
        aborted = False
        for group in groups:
            outcome = self._clean_group(
                log,
                group,
                [handle_of[id(s)] for s in group],
                offsets,
                view.producer_last_offsets,
                now_ms,
                stats,
                tracker,
            )
            if outcome is None:
                aborted = True
                break
            after += outcome
            count_after += 1
        end = segments[-1].next_offset
        if not aborted:
            log.cleaner_state.first_dirty_offset = end
            log.cleaner_state.next_horizon_ms = -1 if stats.min_horizon is None else stats.min_horizon
        return CleanResult(
            view.log_start_offset,
            end,
            len(segments),
            count_after,
            sum(s.size for s in segments),
            after,
            stats.records_removed,
            stats.tombstones_removed,
            aborted,
            stats.markers_removed,
        )

    def _clean_group(
        self,
        log: Log,
        group: list[LogSegment],
        handles: list[FileHandle],
        offsets: dict[bytes, int],
        producers: dict[int, ProducerLast],
        now_ms: int,
        stats: _Stats,
        tracker: TxnTracker,
    ) -> int | None:
        """Rewrite one run and swap it in; returns its new size, None if the log changed."""
        config = log.config
        cleaned = CleanedSegment(log.dir, group[0].base_offset, config.index_interval_bytes, config.segment_index_bytes)
        kept_last: set[tuple[int, int]] = set()
        unchanged = True
        try:
            run_end = group[-1].next_offset - 1
            for segment, handle in zip(group, handles, strict=True):
                name = str(segment.log_path)
                for header, raw in iter_segment_batches(handle, segment.size, name):
                    keep = header.last_offset == run_end or _last_of_producer(header, producers)
                    if header.is_control:
                        removable = tracker.on_control(header, raw)
                        discard = (
                            removable
                            and bool(header.attributes & DELETE_HORIZON_MASK)
                            and header.base_timestamp <= now_ms
                        )
                    else:
                        removable = False
                        discard = tracker.on_batch(header)  # aborted data
                    if discard:
                        if header.is_control:
                            stats.markers_removed += 1 if header.records_count else 0
                        else:
                            stats.records_removed += header.records_count
                        batch = (raw if not header.records_count else _empty_batch(header)) if keep else None
                    elif header.is_control:
                        batch = filter_control(
                            header, raw, removable, keep, now_ms, config.delete_retention_ms, stats, name
                        )
                    else:
                        batch = filter_batch(
                            header, raw, offsets, keep, now_ms, config.delete_retention_ms, stats, name
                        )
                    unchanged = unchanged and batch is raw
                    if batch is None:
                        continue
                    cleaned.append(batch)
                    if header.producer_id >= 0 and not header.is_control:
                        kept_last.add((header.producer_id, header.last_offset))
            cleaned.aborted = tracker.take_kept()
            if unchanged and len(group) == 1 and cleaned.aborted == _index_entries(group[0]):
                cleaned.discard()
                return group[0].size
            cleaned.finish()
            range_ = (group[0].base_offset, group[-1].next_offset)
            swapped = log.replace_segments(
                group,
                lambda open_segment: cleaned.install(group, open_segment),
                lambda current: _producers_kept(current, range_, kept_last),
                aborted=cleaned.aborted,
            )
        except BaseException:
            cleaned.discard()
            raise
        if not swapped:
            cleaned.discard()
            return None
        return cleaned.size


def _last_of_producer(header: BatchHeader, producers: dict[int, ProducerLast]) -> bool:
    """Kafka's isBatchLastRecordOfProducer: the batch with the producer's last data offset, or,
    when a marker cleared its batches, a marker of its current epoch (fencing needs it)."""
    if header.producer_id < 0:
        return False
    last = producers.get(header.producer_id)
    if last is None:
        return False
    if last.last_data_offset >= 0:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.epoch


def _index_entries(segment: LogSegment) -> list[AbortedTxn]:
    return read_index(segment.directory / file_name(segment.base_offset, TXN_INDEX_SUFFIX))


def _producers_kept(producers: dict[int, ProducerLast], range_: tuple[int, int], kept: set[tuple[int, int]]) -> bool:
    """Whether every producer whose last data batch lies in the run still has that batch."""
    start, end = range_
    return all(
        (pid, last.last_data_offset) in kept for pid, last in producers.items() if start <= last.last_data_offset < end
    )

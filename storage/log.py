"""One partition's log: an ordered list of segments plus its caches and recovery."""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeGuard, TypeVar

from strom.protocol.records import crc as crc32c  # crc32c.crc32c: the C function, loaded lean
from strom.protocol.records.batch import DecodedRecord, iter_records
from strom.protocol.records.errors import RecordsError
from strom.protocol.records.header import (
    CRC_OFFSET,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    parse_header,
    set_base_offset,
    set_partition_leader_epoch,
)
from strom.storage import clock
from strom.storage.checkpoint import fsync_dir
from strom.storage.cleaner import (
    CleanerState,
    CleanResult,
    CleanView,
    LogCleaner,
    ProducerLast,
    needs_cleaning,
    recover_swaps,
)
from strom.storage.config import LogConfig
from strom.storage.errors import (
    CorruptLog,
    CorruptRecord,
    KafkaStorageError,
    LogDirOffline,
    OffsetOutOfRange,
    RecordBatchTooLarge,
    RecordTooLarge,
    UnexpectedAppendOffset,
)
from strom.storage.faults import storage_error
from strom.storage.files import FileRegion
from strom.storage.leader_epoch import FILE_NAME as EPOCH_FILE
from strom.storage.leader_epoch import LeaderEpochFileCache
from strom.storage.producer_state import AppendOrigin, ProducerStateManager, VerificationGuard
from strom.storage.segment import DELETED_SUFFIX, LOG_SUFFIX, LogSegment
from strom.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TxnLogState

_log = logging.getLogger("strom.storage")

_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".tmp", ".cleaned", ".swap")


def wall_clock_ms() -> int:
    return clock.wall_ms()


def parse_dir_name(name: str) -> tuple[str, int]:
    """``<topic>-<partition>`` -> (topic, partition); ValueError if it is not one."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


@dataclass(frozen=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    num_batches: int
    valid_bytes: int
    duplicate: bool = False


@dataclass(frozen=True)
class FetchDataInfo:
    fetch_offset: int
    records: FileRegion | None  # None when there is nothing to return


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int


class Log:
    """A partition's log in ``<log.dir>/<topic>-<partition>/``.

    Directory layout (Kafka's): ``<base offset:020d>.log`` / ``.index`` / ``.timeindex`` per
    segment (see LogSegment, storage.index), ``leader-epoch-checkpoint`` (LeaderEpochFileCache),
    ``<offset:020d>.snapshot`` producer-state snapshots (ProducerStateManager). The recovery
    point, log start offset and high watermark live in the log dir's checkpoint files, kept by
    LogManager and passed to :meth:`open`.

    After a crash (``clean_shutdown=False``): segments below the one holding the recovery point
    only get the cheap index sanity check (they were fsynced); that segment and every later one
    are re-validated batch by batch. At the first torn or corrupt batch the segment is truncated
    there and every later segment deleted, indexes of recovered segments are rebuilt, the leader
    epoch cache is truncated to the recovered log end offset and producer state is rebuilt from
    the newest snapshot at or below the recovery point plus a replay of batch headers. Leftover
    ``*.deleted``/``*.tmp`` files are removed and orphan index files dropped.

    Compaction (storage.cleaner): before anything else, :meth:`open` completes an interrupted
    swap of cleaned segments (a ``<base>.log.swap`` replaces every segment whose base offset it
    covers, and its indexes are rebuilt) and deletes ``*.cleaned`` files, so a crash during
    cleaning leaves either the old or the new segments of each run.

    Threading: everything runs on one thread except :meth:`flush`, which may run on a worker
    thread. A ``threading.Lock`` guards structural changes (append, roll, truncation, segment
    deletion, close); flush takes it only to capture the descriptors to fsync and again to
    advance the recovery point, and fsyncs in between without holding it. :meth:`compact` may
    run on a worker thread too: it takes the lock to capture the segments and to swap each
    cleaned run in (:meth:`cleaning_view`, :meth:`replace_segments`), and reads/writes files
    without it.
    """

    def __init__(self, directory: Path, config: LogConfig, now_ms: Callable[[], int]) -> None:
        self.dir = Path(directory)
        self.topic, self.partition = parse_dir_name(self.dir.name)
        self.config = config
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self._high_watermark = 0
        self._pending_deletes: list[tuple[int, list[Path]]] = []
        self._dir_dirty = False
        self._closed = False
        self.leader_epoch_cache = LeaderEpochFileCache(self.dir / EPOCH_FILE)
        self.producer_state = ProducerStateManager(self.dir)
        self.txn = TxnLogState(self.dir, lambda: self._bases)
        self.cleaner_state = CleanerState()

    # ================================================================ open / recovery
    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        now_ms: Callable[[], int] = wall_clock_ms,
        clean_shutdown: bool = False,
    ) -> Log:
        """Open (creating if needed) the log in ``dir``, recovering it unless shut down cleanly."""
        directory = Path(dir)
        directory.mkdir(parents=True, exist_ok=True)
        swapped = recover_swaps(directory)
        _remove_leftovers(directory)
        log = cls(directory, config, now_ms)
        log._load(recovery_point, log_start_offset, clean_shutdown, swapped)
        log.high_watermark = high_watermark
        return log

    def _load(
        self, recovery_point: int, log_start_offset: int, clean: bool, rebuild: Collection[int] = frozenset()
    ) -> None:
        bases = _segment_bases(self.dir)
        for base in bases:
            self._add_segment(self._new_segment(base))
        if not self._segments:
            self._add_segment(self._new_segment(log_start_offset))
        recovered = self._check_segments(clean, recovery_point, rebuild)
        self.log_end_offset = self._segments[-1].next_offset
        self.log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self._truncate_fully_locked(self.log_start_offset)
            return
        for segment in recovered:
            if segment.size:  # an empty segment (a new log) has nothing to make durable
                segment.flush()
        self.recovery_point = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        snapshot_limit = self.log_end_offset if clean else min(recovery_point, self.log_end_offset)
        self.txn.load(self._bases)
        self._rebuild_producer_state(snapshot_limit)

    def _check_segments(
        self, clean: bool, recovery_point: int, rebuild: Collection[int] = frozenset()
    ) -> list[LogSegment]:
        """Validate the segments; returns those re-validated batch by batch.

        Segments whose base offset is in ``rebuild`` (just swapped in) are always re-validated.

        After a crash, an empty segment that starts past the end of the data before it, above
        the recovery point, is deleted (with any after it): a power loss right after a roll
        keeps the new segment's file, empty, while the previous segment may lose its unflushed
        tail, and the empty segment's base offset would otherwise become the log end offset,
        past a hole of offsets that hold nothing and that a follower never fetches again. Below
        the recovery point such a gap was flushed as it is (compaction leaves them) and stays.
        """
        first_unflushed = len(self._segments) if clean else max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
        recovered: list[LogSegment] = []
        previous_end = self._segments[0].base_offset
        for i, segment in enumerate(list(self._segments)):
            if segment.base_offset < previous_end:
                self._delete_segments_from(i)  # overlaps the data before it: cannot be trusted
                break
            if i >= first_unflushed or segment.base_offset in rebuild or segment.sanity_error() is not None:
                truncated = segment.recover(previous_end)
                recovered.append(segment)
                if truncated:
                    self._delete_segments_from(i + 1)
                    break
                if (
                    not clean
                    and i > 0
                    and segment.size == 0
                    and segment.base_offset > previous_end
                    and segment.base_offset > recovery_point
                ):
                    _log.warning(
                        "%s-%d: recovery deleted the empty segment at %d past the end of the data at %d "
                        "(a tail lost in a crash)",
                        self.topic,
                        self.partition,
                        segment.base_offset,
                        previous_end,
                    )
                    recovered.remove(segment)
                    self._delete_segments_from(i)  # nothing proves the offsets below its base exist
                    break
            previous_end = segment.next_offset
        return recovered

    def _delete_segments_from(self, index: int) -> None:
        for segment in self._segments[index:]:
            segment.delete()
        del self._segments[index:], self._bases[index:]
        if not self._segments:
            self._add_segment(self._new_segment(0))

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.dir, base_offset, self.config.index_interval_bytes, self.config.segment_index_bytes, self._now_ms()
        )

    def _add_segment(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._dir_dirty = True

    def _rebuild_producer_state(self, snapshot_limit: int) -> None:
        """Newest snapshot at or below ``snapshot_limit``, then replay batch headers to the LEO."""
        start = self.producer_state.load_latest_snapshot(snapshot_limit)
        start = self.log_start_offset if start is None else max(start, self.log_start_offset)
        self.txn.truncate_from(start, self._bases)
        for header in self._headers_from(start):
            if header.is_control:
                self._replay_control(header)
            else:
                self.producer_state.update(header)

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch whose last offset >= ``offset``, in log order."""
        first = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for segment in self._segments[first:]:
            found = segment.translate_offset(offset)
            if found is None:
                continue
            for _, header in segment.iter_headers(found[0]):
                yield header

    # ================================================================ properties
    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    # ================================================================ append
    def _check_batches(self, records: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]) -> int:
        if not headers:
            raise CorruptRecord("append of no batches")
        total = 0
        for header in headers:
            if header.magic != 2:
                raise CorruptRecord(f"magic {header.magic} batches are not stored (up-convert first)")
            if header.batch_length < HEADER_SIZE - 12 or header.last_offset_delta < 0:
                raise CorruptRecord("malformed batch header")
            if header.size > self.config.max_message_bytes:
                raise RecordTooLarge(
                    f"batch of {header.size} bytes exceeds max.message.bytes {self.config.max_message_bytes}"
                )
            total += header.size
        if total != len(records):
            raise CorruptRecord(f"headers describe {total} bytes but {len(records)} were given")
        if total > self.config.segment_bytes:
            raise RecordBatchTooLarge(f"{total} bytes exceed segment.bytes {self.config.segment_bytes}")
        return total

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Assign offsets to validated v2 batches and append them (see module docs for rules).

        A writable buffer (bytearray, writable memoryview) is rewritten in place: base offsets,
        partition leader epoch, and with LogAppendTime the timestamp type, max timestamp and CRC.
        Idempotence is checked for every batch before anything is written; a COORDINATOR append
        (the broker's own records) is never a duplicate and has only its producer epochs checked.

        ``verification_guard``: given by a caller that verified the batches' transaction with the
        transaction coordinator (a client's Produce): a transactional batch that would open a
        transaction here is refused (InvalidTxnState) unless it is its producer's guard from
        :meth:`verification_guard`, still unchanged (no marker or transactional batch of that
        producer was written since). None: the caller does not verify (coordinators' own writes).
        """
        self._check_batches(records, headers)
        with self._lock:
            self._ensure_open()
            duplicate = self.producer_state.validate(records, headers, origin)
            if duplicate is not None:
                return LogAppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp,
                    duplicate.last_offset,
                    -1,
                    self.log_start_offset,
                    0,
                    0,
                    duplicate=True,
                )
            if verification_guard is not None:
                self.producer_state.check_verified(headers, verification_guard)
            buf = records if _writable(records) else bytearray(records)
            append_time = self._now_ms() if self.config.log_append_time else -1
            final = _assign(buf, headers, self.log_end_offset, leader_epoch, append_time)
            return self._append_locked(buf, final, append_time)

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        """Start verifying ``producer_id``'s transaction here: the guard its append must present."""
        with self._lock:
            return self.producer_state.verification_guard(producer_id, self._now_ms())

    def append_as_follower(self, records: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> LogAppendInfo:
        """Append replicated batches with the offsets and epochs they carry."""
        self._check_batches(records, headers)
        with self._lock:
            self._ensure_open()
            previous = self.log_end_offset - 1
            for header in headers:
                if header.base_offset <= previous:
                    raise UnexpectedAppendOffset(
                        f"batch at offset {header.base_offset} does not follow offset {previous}"
                    )
                previous = header.last_offset
            return self._append_locked(records, list(headers), -1)

    def _append_locked(
        self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader], append_time: int
    ) -> LogAppendInfo:
        """Write whole batches or nothing.

        A failed write (full disk, I/O error, no descriptor for a new segment) leaves the log
        exactly as before: the segment is cut back to its last whole batch, indexes, producer
        state, leader epochs and the log end offset untouched; KafkaStorageError is raised
        (the client retries: KAFKA_STORAGE_ERROR is retriable) and the next append tries again.
        """
        first, last = headers[0].base_offset, headers[-1].last_offset
        max_header = max(headers, key=lambda h: h.max_timestamp)
        try:
            for header in headers:  # a new epoch reaches its checkpoint before its data does
                self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            segment = self.active_segment
            if segment.should_roll(
                len(buf),
                max_header.max_timestamp,
                last,
                self.config.segment_bytes,
                self.config.segment_ms,
                self._now_ms(),
            ):
                segment = self._roll_locked(first)
            segment.append(buf, [(h.size, h.last_offset, h.max_timestamp) for h in headers])
        except OSError as exc:
            raise self._io_failure(exc, "append to") from None
        position = 0
        for header in headers:
            if header.is_control:
                self._on_control(buf, position, header, segment.base_offset)
            else:
                self.producer_state.update(header)
            position += header.size
        self.log_end_offset = last + 1
        return LogAppendInfo(
            first,
            last,
            max_header.max_timestamp,
            max_header.last_offset,
            append_time,
            self.log_start_offset,
            len(headers),
            len(buf),
        )

    # ================================================================ transactions
    def _on_control(
        self, buf: bytes | bytearray | memoryview, position: int, header: BatchHeader, segment_base: int
    ) -> None:
        """A transaction marker was appended: close the producer's transaction here, index aborts."""
        from strom.protocol.records.control import coordinator_epoch_of

        first = self.producer_state.complete_txn(header, coordinator_epoch_of(buf, position))
        after = self.producer_state.first_unstable_offset()
        self.txn.on_control(
            buf,
            position,
            header,
            first,
            segment_base,
            header.base_offset + 1 if after is None else after,
            self._high_watermark,
        )

    def _replay_control(self, header: BatchHeader) -> None:
        """Recovery: re-apply a marker found by the header replay (its record says commit/abort)."""
        data = self.read(header.base_offset, header.size, max_offset=None, min_one_message=True).records
        raw = data.read() if data is not None else b""
        base = self._bases[max(0, bisect.bisect_right(self._bases, header.base_offset) - 1)]
        self._on_control(raw, 0, header, base)

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it belong to no open transaction (and are below the high watermark)."""
        if not self.producer_state.ongoing and not self.txn.unreplicated:
            return self._high_watermark
        return self.txn.last_stable_offset(self._high_watermark, self.producer_state.first_unstable_offset())

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound) (read_committed fetch)."""
        return self.txn.collect(fetch_offset, upper_bound)

    # ================================================================ roll
    def roll(self) -> None:
        """Start a new segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._ensure_open()
            if self.active_segment.size:
                self._roll_locked(self.log_end_offset)

    def _roll_locked(self, base_offset: int) -> LogSegment:
        """Start a new active segment; OSError (e.g. EMFILE, ENOSPC) leaves the old one active."""
        if self.active_segment.size == 0 and self.active_segment.base_offset == base_offset:
            return self.active_segment
        old = self.active_segment
        segment = self._new_segment(base_offset)  # first: if it cannot be created, nothing changed
        old.on_become_inactive()
        if old.size == 0:  # an empty segment is replaced, not kept
            self._segments.pop().delete()
            self._bases.pop()
        self._add_segment(segment)
        try:
            self.producer_state.take_snapshot(base_offset)
        except OSError:
            pass  # only speeds up recovery: producer state is rebuilt from an older one + the log
        return segment

    # ================================================================ storage failures
    io_failure_listener: Callable[[Log, KafkaStorageError], None] | None = None

    def _io_failure(self, exc: OSError, op: str) -> KafkaStorageError:
        """The KafkaStorageError to raise for ``exc`` (logged with dir, partition and errno);
        tells the listener (the log manager, which may take the log dir offline)."""
        error = storage_error(exc, op, f"{self.topic}-{self.partition}", str(self.dir.parent))
        listener = self.io_failure_listener
        if listener is not None:
            listener(self, error)
        return error

    # ================================================================ read
    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, min_one_message: bool = True
    ) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset``, within one segment.

        Up to ``max_bytes`` (the first batch regardless with ``min_one_message``), never a
        batch whose last offset reaches ``max_offset``. Raises OffsetOutOfRange outside
        [log_start_offset, log_end_offset].
        """
        if self.offline is not None:
            self._ensure_open()
        if start_offset < self.log_start_offset or start_offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {start_offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}"
            )
        if start_offset == self.log_end_offset or (max_offset is not None and start_offset >= max_offset):
            return FetchDataInfo(start_offset, None)
        segments = self._segments
        first = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        try:
            for segment in segments[first:]:
                region = segment.read(start_offset, max_bytes, max_offset, min_one_message)
                if region is not None:
                    return FetchDataInfo(start_offset, region if region.size else None)
        except OSError as exc:
            raise self._io_failure(exc, "read from") from None
        return FetchDataInfo(start_offset, None)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record whose timestamp >= ``timestamp``, or None.

        The time index and batch headers find the batch; only that batch's records are decoded.
        """
        for segment in self._segments:
            if segment.max_timestamp_so_far < timestamp:
                continue
            header = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if header is not None:
                for record in self._batch_records(header.base_offset):
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return TimestampAndOffset(record.timestamp, record.offset, self._epoch_at(record.offset))
                offset = max(header.base_offset, self.log_start_offset)
                return TimestampAndOffset(header.max_timestamp, offset, self._epoch_at(offset))
        return None

    def offset_for_max_timestamp(self) -> TimestampAndOffset | None:
        """The record with the largest timestamp (the first of equals): (timestamp, offset, epoch)."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp_so_far >= 0 and (
                best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
            ):
                best = segment
        if best is None:
            return None
        wanted = best.max_timestamp_so_far
        for record in self._batch_records(best.offset_of_max_timestamp):
            if record.timestamp == wanted:
                return TimestampAndOffset(wanted, record.offset, self._epoch_at(record.offset))
        offset = best.offset_of_max_timestamp
        return TimestampAndOffset(wanted, offset, self._epoch_at(offset))

    def _batch_records(self, offset: int) -> list[DecodedRecord]:
        """The records of the batch holding ``offset`` (decoded: only ListOffsets needs this).

        A batch whose records cannot be decoded gives none, and callers fall back to the batch
        header's precision.
        """
        data = self.read(offset, 1, max_offset=None, min_one_message=True).records
        if data is None:
            return []
        raw = data.read()
        try:
            return list(iter_records(memoryview(raw)[: parse_header(raw, 0).size]))
        except RecordsError:
            return []

    def _epoch_at(self, offset: int) -> int:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    # ================================================================ truncation
    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (a whole batch if ``offset`` is inside it).

        With nothing to drop (``offset`` at or past the log end) the leader-epoch cache still
        loses its entries that start at the log end, as Kafka's truncateTo does: such an entry
        names an epoch this replica led without appending anything to it, which the new leader
        never had; kept, the follower goes on reporting it as its last fetched epoch and is
        told it diverged at every fetch, so it never rejoins the ISR.
        """
        with self._lock:
            self._ensure_open()
            if offset >= self.log_end_offset:  # nothing to drop but an empty epoch (see above)
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return
            if offset <= self._segments[0].base_offset:
                self._truncate_fully_locked(offset)
                return
            try:
                keep = bisect.bisect_left(self._bases, offset)
                for segment in self._segments[keep:]:
                    segment.delete()
                del self._segments[keep:], self._bases[keep:]
                self.active_segment.truncate_to(offset)
            except OSError as exc:
                raise self._io_failure(exc, "truncate") from None
            self.log_end_offset = self.active_segment.next_offset
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self._high_watermark = min(self._high_watermark, self.log_end_offset)
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            self._rebuild_producer_state(self.log_end_offset)
            self.cleaner_state.first_dirty_offset = min(self.cleaner_state.first_dirty_offset, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts empty at ``offset``."""
        with self._lock:
            self._ensure_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._bases.clear()
        self._add_segment(self._new_segment(offset))
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
        self._high_watermark = offset
        self.leader_epoch_cache.clear()
        self.producer_state.clear()
        self.txn.clear()
        self.cleaner_state.first_dirty_offset = offset
        self.producer_state.delete_snapshots(lambda _: True)

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: raise the log start offset and delete segments wholly below it."""
        with self._lock:
            self._ensure_open()
            if offset <= self.log_start_offset:
                return
            if offset > self._high_watermark:
                raise OffsetOutOfRange(
                    f"cannot delete records up to {offset}: beyond the high watermark "
                    f"{self._high_watermark} of {self.topic}-{self.partition}"
                )
            self.log_start_offset = offset
            self._delete_segments_locked(self._breached_log_start())
            self.leader_epoch_cache.truncate_from_start(offset)
            self.producer_state.remove_below(offset)

    # ================================================================ producer expiry
    def remove_expired_producers(self, expiration_ms: int) -> int:
        """producer.id.expiration.ms: forget idle producers (see ProducerStateManager)."""
        with self._lock:
            if self._closed or self.offline is not None:
                return 0
            return self.producer_state.remove_expired(self._now_ms(), expiration_ms)

    # ================================================================ retention
    def delete_old_segments(self) -> int:
        """Retention: delete old segments by time, size and log start; returns how many.

        As Kafka's deletableSegments: only segments wholly below the high watermark (the next
        segment starts at or below it) may go, whatever retention says, so the log start offset
        never passes the high watermark and no record the followers may still need, or that
        acks=all still waits for, is deleted.
        """
        with self._lock:
            self._ensure_open()
            now = self._now_ms()
            count = 0
            if self.config.delete_enabled:
                count += self._delete_segments_locked(self._expired_by_time(now))
                count += self._delete_segments_locked(self._over_size())
            count += self._delete_segments_locked(self._breached_log_start())
            self._purge_pending(now)
            return count

    def _below_high_watermark(self) -> int:
        """How many leading segments lie wholly below the high watermark (never the active one)."""
        return _prefix_count(range(len(self._segments) - 1), lambda i: self._bases[i + 1] <= self._high_watermark)

    def _expired_by_time(self, now: int) -> int:
        if self.config.retention_ms < 0:
            return 0
        return min(
            self._below_high_watermark(),
            _prefix_count(self._segments[:-1], lambda s: now - s.largest_timestamp > self.config.retention_ms),
        )

    def _over_size(self) -> int:
        if self.config.retention_bytes < 0:
            return 0
        excess = self.size_in_bytes - self.config.retention_bytes
        count = 0
        for segment in self._segments[: self._below_high_watermark()]:
            if excess - segment.size < 0:
                break
            excess -= segment.size
            count += 1
        return count

    def _breached_log_start(self) -> int:
        return min(
            self._below_high_watermark(),
            _prefix_count(range(len(self._segments) - 1), lambda i: self._bases[i + 1] <= self.log_start_offset),
        )

    def _delete_segments_locked(self, count: int) -> int:
        """Remove the ``count`` oldest segments (never the active one)."""
        count = min(count, len(self._segments) - 1)
        if count <= 0:
            return 0
        doomed = self._segments[:count]
        del self._segments[:count], self._bases[:count]
        deadline = self._now_ms() + self.config.file_delete_delay_ms
        for segment in doomed:
            segment.close()
            self._pending_deletes.append((deadline, segment.rename_to_deleted()))
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.remove_below(self.log_start_offset)
        self.txn.drop_below(self.log_start_offset)
        return count

    def _purge_pending(self, now: int | None) -> None:
        """Unlink ``*.deleted`` files whose file.delete.delay.ms has passed (all if now is None)."""
        keep = []
        for deadline, paths in self._pending_deletes:
            if now is not None and deadline > now:
                keep.append((deadline, paths))
                continue
            for path in paths:
                path.unlink(missing_ok=True)
        self._pending_deletes = keep

    # ================================================================ compaction
    def compact(self, now_ms: int | None = None) -> CleanResult | None:
        """Clean the log if the compaction policy says it needs it (see storage.cleaner).

        Returns None when it did not (not compacted, or not dirty enough). Synchronous; may run
        on a worker thread.
        """
        now = self._now_ms() if now_ms is None else now_ms
        if self._closed or not self.config.compact_enabled or not needs_cleaning(self, now):
            return None
        return LogCleaner().clean(self, now)

    def cleaning_view(self) -> CleanView:
        """Under the lock: segments, their descriptors, producers' last offsets, watermarks."""
        with self._lock:
            self._ensure_open()
            segments = list(self._segments)
            return CleanView(
                segments,
                [s.handle for s in segments],
                self._producer_last_offsets(),
                self.last_stable_offset,
                self.log_start_offset,
                tuple(self.txn.all_entries()),
            )

    def _producer_last_offsets(self) -> dict[int, ProducerLast]:
        return {
            pid: ProducerLast(entry.last_offset, entry.producer_epoch)
            for pid, entry in self.producer_state.producers.items()
        }

    def replace_segments(
        self,
        old: Sequence[LogSegment],
        install: Callable[[Callable[[int], LogSegment]], tuple[LogSegment, list[Path]]],
        check: Callable[[dict[int, ProducerLast]], bool],
        aborted: list[AbortedTxn] | None = None,
    ) -> bool:
        """Swap consecutive non-active segments ``old`` for one cleaned segment, under the lock.

        Returns False (and calls nothing) if ``old`` are no longer consecutive non-active
        segments of this log or ``check(producer last offsets)`` fails. ``install`` renames the
        files (see storage.cleaner) and returns the new segment and the ``*.deleted`` paths,
        which are unlinked after file.delete.delay.ms like retention's. ``aborted``: the
        aborted-transaction entries of the new segment's ``.txnindex`` (written by ``install``);
        None rewrites that index from the entries in memory.
        """
        with self._lock:
            if self._closed:
                return False
            index = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
            if index is None or index + len(old) >= len(self._segments):
                return False
            if any(a is not b for a, b in zip(self._segments[index : index + len(old)], old, strict=True)):
                return False
            if not check(self._producer_last_offsets()):
                return False
            segment, deleted = install(self._new_segment)
            if aborted is None:
                self.txn.rewrite_segment(segment.base_offset, segment.next_offset)
            else:
                self.txn.replace_range(segment.base_offset, segment.next_offset, aborted)
            segments = list(self._segments)
            segments[index : index + len(old)] = [segment]
            self._segments = segments
            self._bases = [s.base_offset for s in segments]
            self._pending_deletes.append((self._now_ms() + self.config.file_delete_delay_ms, deleted))
            return True

    # ================================================================ flush / close
    def flush(self, offset: int | None = None) -> None:
        """fsync everything below ``offset`` (default: the LEO) and advance the recovery point.

        Safe to call from a worker thread while the event-loop thread appends.
        """
        with self._lock:
            if self._closed or self.offline is not None:
                return
            target = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
            if target <= self.recovery_point and not self._dir_dirty:
                return
            handles = [
                h
                for s in self._segments
                if s.next_offset > self.recovery_point and s.base_offset < target or s is self.active_segment
                for h in s.flush_handles()
            ]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            for handle in handles:
                handle.fsync()
            if dir_dirty:
                fsync_dir(self.dir)
            self.leader_epoch_cache.flush_if_dirty()
        except OSError as exc:  # the recovery point stays: recovery re-validates this data
            self._dir_dirty = self._dir_dirty or dir_dirty
            raise self._io_failure(exc, "flush") from None
        with self._lock:
            self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))

    def close(self) -> None:
        """Flush, finish the time indexes, write a producer snapshot, release descriptors."""
        with self._lock:
            if self._closed:
                return
            if self.offline is not None:  # nothing can be written there: just let go
                for segment in self._segments:
                    segment.close()
                self._closed = True
                return
            failure: OSError | None = None
            try:
                for segment in self._segments:
                    segment.on_become_inactive()
                    segment.flush()
                fsync_dir(self.dir)
                self.recovery_point = self.log_end_offset
                self.leader_epoch_cache.flush_if_dirty()
                if self.txn.unwritten:
                    self.txn.write_unwritten(self._bases)
                self.producer_state.take_snapshot(self.log_end_offset)
            except OSError as exc:
                failure = exc  # the recovery point stays where it was: the next start recovers
            for segment in self._segments:
                segment.close()
            try:
                self._purge_pending(None)
            except OSError:
                pass
            self._closed = True
        if failure is not None:
            raise self._io_failure(failure, "close")

    def delete(self) -> None:
        """Close without flushing and remove the whole directory."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True
            shutil.rmtree(self.dir, ignore_errors=True)

    def _ensure_open(self) -> None:
        if self._closed:
            raise CorruptLog(f"log {self.topic}-{self.partition} is closed")
        if self.offline is not None:
            raise LogDirOffline(
                f"{self.topic}-{self.partition} is in offline log dir {self.dir.parent}: {self.offline}",
                str(self.dir.parent),
            )

    # ================================================================ offline
    offline: str | None = None  # why the log dir failed, once it has

    def mark_offline(self, reason: str) -> None:
        """The log dir failed: every later append, read and flush raises LogDirOffline."""
        self.offline = reason

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )


# ==================================================================== helpers
def _writable(records: bytes | bytearray | memoryview) -> TypeGuard[bytearray | memoryview]:
    return isinstance(records, bytearray) or (isinstance(records, memoryview) and not records.readonly)


def _assign(
    buf: bytearray | memoryview, headers: Sequence[BatchHeader], next_offset: int, leader_epoch: int, append_time: int
) -> list[BatchHeader]:
    """Rewrite base offsets/epochs (and LogAppendTime fields) in ``buf``; return final headers."""
    final: list[BatchHeader] = []
    position = 0
    view = memoryview(buf)
    for header in headers:
        set_base_offset(buf, position, next_offset)
        set_partition_leader_epoch(buf, position, leader_epoch)
        changes = {"base_offset": next_offset, "partition_leader_epoch": leader_epoch}
        if append_time >= 0:
            attributes = header.attributes | TIMESTAMP_TYPE_MASK
            _ATTRIBUTES.pack_into(buf, position + _ATTRIBUTES_OFFSET, attributes)
            _MAX_TIMESTAMP.pack_into(buf, position + _MAX_TIMESTAMP_OFFSET, append_time)
            crc = crc32c.crc32c(view[position + CRC_OFFSET + 4 : position + header.size])
            _CRC.pack_into(buf, position + CRC_OFFSET, crc)
            changes.update(attributes=attributes, max_timestamp=append_time, crc=crc)
        final.append(header._replace(**changes))
        next_offset += header.last_offset_delta + 1
        position += header.size
    view.release()
    return final


_T = TypeVar("_T")


def _prefix_count(items: Iterable[_T], predicate: Callable[[_T], bool]) -> int:
    count = 0
    for item in items:
        if not predicate(item):
            break
        count += 1
    return count


def _segment_bases(directory: Path) -> list[int]:
    bases = []
    for path in directory.iterdir():
        stem, suffix = os.path.splitext(path.name)
        if suffix == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def _remove_leftovers(directory: Path) -> None:
    """Delete files of interrupted deletes/writes and index files without their ``.log``."""
    logs = {p.stem for p in directory.glob("*" + LOG_SUFFIX)}
    for path in directory.iterdir():
        if path.name.endswith(_LEFTOVER_SUFFIXES):
            path.unlink(missing_ok=True)
        elif path.suffix in (".index", ".timeindex", TXN_INDEX_SUFFIX) and path.stem not in logs:
            path.unlink(missing_ok=True)

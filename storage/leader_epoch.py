"""The leader-epoch cache: which leader epoch began at which offset.

On disk it is ``<partition dir>/leader-epoch-checkpoint`` in Kafka's text checkpoint format
(see storage.checkpoint): version ``0``, the entry count, then ``epoch start_offset`` lines in
increasing epoch and offset order. Every change rewrites the file atomically (temp + fsync +
rename), so after a crash the file holds either the old or the new list; recovery then truncates
it to the recovered log end offset (an entry may name offsets whose data did not survive).
A new epoch is written before any data of it (if that write fails, the append fails); a failed
write after a truncation leaves extra entries in the file, harmless and rewritten later.
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from strom.storage.checkpoint import LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochFileCache:
    """Ordered (epoch, start_offset) entries with Kafka's OffsetForLeaderEpoch semantics."""

    def __init__(self, path: Path) -> None:
        self._file = LeaderEpochCheckpointFile(path)
        self._lock = threading.Lock()
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in self._file.read():
            self._append(epoch, offset)

    def _append(self, epoch: int, start_offset: int) -> None:
        # Drop entries the new one supersedes (same/higher epoch or same/higher start offset).
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``; no-op if already the latest epoch."""
        if epoch < 0 or (self._epochs and self._epochs[-1] >= epoch):
            return
        with self._lock:
            saved = list(self._epochs), list(self._offsets)
            self._append(epoch, start_offset)
            try:
                self._flush()
            except OSError:  # the new epoch must be on disk before data of it is: undo, re-raise
                self._epochs, self._offsets = saved
                raise

    def epoch_for_offset(self, offset: int) -> int:
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers.

        The latest epoch ends at the log end offset; an older one ends where the next higher
        epoch starts, reported with the largest known epoch <= the requested one (or the
        requested epoch if it is below every known one); unknown-higher gives (-1, -1).
        """
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = higher - 1
        reported = self._epochs[floor] if floor >= 0 else epoch
        return reported, self._offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after ``end_offset`` (the log was truncated there)."""
        keep = bisect.bisect_left(self._offsets, end_offset)
        if keep == len(self._offsets):
            return
        with self._lock:
            del self._epochs[keep:], self._offsets[keep:]
            self._flush_tolerant()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset``; the epoch covering it now starts there."""
        i = bisect.bisect_right(self._offsets, start_offset) - 1
        if i < 0 or (i == 0 and self._offsets[0] == start_offset):
            return
        with self._lock:
            del self._epochs[:i], self._offsets[:i]
            self._offsets[0] = start_offset
            self._flush_tolerant()

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._offsets.clear()
            self._flush_tolerant()

    dirty = False  # the file lags memory after a failed write (retried by flush_if_dirty)

    def _flush(self) -> None:
        self._file.write(self.entries())
        self.dirty = False

    def _flush_tolerant(self) -> None:
        """Write the file after a truncation; if that fails the file keeps extra entries, which
        is safe (loading truncates them to the log again) and is retried by flush_if_dirty."""
        try:
            self._flush()
        except OSError:
            self.dirty = True

    def flush_if_dirty(self) -> None:
        """Rewrite the file if an earlier write failed (OSError if it still cannot)."""
        if self.dirty:
            with self._lock:
                self._flush()

"""The coordinator loader: replaying a partition of an internal topic (`__consumer_offsets`,
`__transaction_state`), as Kafka's CoordinatorLoader does.

A coordinator rebuilds its memory from the partitions it leads by reading each from its log start
to its high watermark, batch by batch; the records' framing is `protocol.internal_records`, what
the records mean is the coordinator's (``on_batch``). An unreadable batch ends the replay of that
partition with a log line: what came before it stays applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from strom.protocol.records.batch import iter_batches
from strom.protocol.records.errors import RecordsError
from strom.protocol.records.header import BatchHeader

LOAD_READ_BYTES = 1 << 20


class RecordsRegion(Protocol):
    """Batches read from a log (`storage.files.FileRegion`)."""

    def read(self) -> bytes: ...


class LogRead(Protocol):
    """What a read of a log gives (`storage.log.FetchDataInfo`): None when there is nothing."""

    @property
    def records(self) -> RecordsRegion | None: ...


class ReplayLog(Protocol):
    """What the loader reads of the local replica's log (`storage.log.Log`)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def read(self, start_offset: int, max_bytes: int, /, *, max_offset: int) -> LogRead:
        """Whole batches from the one holding ``start_offset``, none reaching ``max_offset``, up to
        ``max_bytes`` (the first whatever its size)."""
        ...


def replay_partition(
    plog: ReplayLog, topic: str, index: int, on_batch: Callable[[BatchHeader, memoryview], None], log: logging.Logger
) -> bool:
    """Call ``on_batch(header, batch)`` for every batch of ``plog`` (the log of the local replica
    of ``topic``-``index``, whose leader this broker has just become) from its log start up to its log
    end, in order, as Kafka's coordinators load. Not only up to the high watermark: a new leader's
    is the last one its old leader told it, often below the last batches it holds (a transaction
    marker among them), and what it holds is what its followers will have. False when an
    unreadable batch ended the replay early."""
    offset, end = plog.log_start_offset, plog.log_end_offset
    while offset < end:
        region = plog.read(offset, LOAD_READ_BYTES, max_offset=end).records
        if region is None:
            break
        data = region.read()
        last = offset
        try:
            view = memoryview(data)
            for pos, header in iter_batches(data, partial_tail=True):
                last = header.last_offset
                if header.last_offset < offset:
                    continue
                on_batch(header, view[pos : pos + header.size])
        except RecordsError as exc:
            log.error(
                "%s-%d: unreadable batch at offset %d (%s); rest of the partition skipped", topic, index, offset, exc
            )
            return False
        if last < offset:
            break
        offset = last + 1
    return True

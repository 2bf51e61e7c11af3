"""Idempotent-producer state: per producer id, its epoch and its last five batches.

Snapshot files ``<offset, 20 digits>.snapshot`` in the partition dir use Kafka's layout
(big-endian)::

    version                   int16   1
    crc                       uint32  CRC-32C of every byte after this field
    count                     int32   number of entries
    count x entry (42 bytes):
        producer_id           int64
        producer_epoch        int16
        last_sequence         int32
        last_offset           int64
        offset_delta          int32   last_offset - first_offset of that batch
        timestamp             int64   the batch's max timestamp
        coordinator_epoch     int32   epoch of the coordinator that wrote its last marker, or -1
        current_txn_first_offset int64  first offset of its open transaction here, or -1

Kafka writes one entry per producer (its latest batch). Strom writes one entry per cached batch,
oldest first, so Kafka's reader (last entry per id wins) still sees the latest batch while Strom
restores all five and keeps detecting duplicates of older in-flight batches after a restart.

A snapshot at offset N holds the state after every batch below N. Snapshots are written on roll
and on close, to a temp file that is fsynced and renamed. After a crash the log loads the newest
snapshot at or below the recovery point whose CRC checks (corrupt ones are deleted), then replays
the batch headers from there to the log end offset; snapshots above the recovered log end are
deleted.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.protocol.records import crc as crc32c  # crc32c.crc32c: the C function, loaded lean
from strom.protocol.records.control import coordinator_epoch_of
from strom.protocol.records.header import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader, Buffer
from strom.storage.checkpoint import atomic_write
from strom.storage.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5
SNAPSHOTS_TO_KEEP = 2
INT32_MAX = (1 << 31) - 1

_PREFIX = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


class AppendOrigin(enum.Enum):
    """Who appends to a leader's log (Kafka's AppendOrigin; followers append with their own method).

    CLIENT: a producer's batches: duplicates are looked up and sequences checked.
    COORDINATOR: the broker's own records (group and transaction state, transactional offset
    commits, transaction markers): always written. Their batches carry no sequence, so a lookup
    would take each transactional offset commit of a producer epoch for a repeat of the first.
    Epochs are checked for both: an older epoch is still fenced.
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == header.last_sequence:
                return batch
        return None


class VerificationGuard:
    """Kafka's VerificationGuard (KIP-890 part 1): made when a partition leader starts verifying a
    producer's first transactional batch with the transaction coordinator, dropped when a
    transactional batch or a marker of that producer is written. Compared by identity only: the
    append after the verification must present the very guard that is still in the producer
    state, so an answer that was overtaken by a marker (the transaction ended meanwhile) cannot
    open a transaction nobody will ever end."""

    __slots__ = ("producer_id", "created_ms")

    def __init__(self, producer_id: int, created_ms: int) -> None:
        self.producer_id = producer_id
        self.created_ms = created_ms

    def __repr__(self) -> str:
        return f"VerificationGuard(producer_id={self.producer_id}, created_ms={self.created_ms})"


# Presented by an append whose verification found the transaction already open here (Kafka's
# VerificationGuard.SENTINEL): it matches no guard, so it passes only while that stays so.
NO_VERIFICATION = VerificationGuard(-1, -1)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def _tracked(header: BatchHeader) -> bool:
    return header.producer_id >= 0 and not header.is_control


class ProducerStateManager:
    """The producer table of one partition, with Kafka's validation rules (current Kafka).

    Validation for a leader append (``validate``):
    * a batch whose epoch and sequence range equal one of the producer's last five batches is a
      duplicate (the caller returns the original offsets and writes nothing);
    * an epoch lower than the known one raises InvalidProducerEpoch;
    * a higher epoch must start at sequence 0, else OutOfOrderSequence;
    * the same epoch must continue at last_seq + 1 (wrapping from int32 max to 0), else
      OutOfOrderSequence;
    * a producer id with no state is accepted at ANY first sequence. This is Kafka's behaviour
      since 2.4 (KIP-360): the state may have been removed by retention or DeleteRecords, so
      UNKNOWN_PRODUCER_ID is no longer raised.
    Control batches (transaction markers) and batches without a producer id are not tracked
    as batches.

    Transactions: the first transactional batch of a producer opens its transaction here
    (``current_txn_first_offset``, and ``ongoing`` maps producer id -> that offset); a marker
    (:meth:`complete_txn`) closes it. While a transaction is open, a non-transactional batch of
    the same epoch is INVALID_TXN_STATE; a marker older than the producer's epoch is
    INVALID_PRODUCER_EPOCH.

    Verification (KIP-890 part 1, :meth:`verification_guard`, :meth:`check_verified`): a guard
    per producer id whose first transactional batch here is being verified with the transaction
    coordinator; a transactional batch or a marker of that producer drops it, and so does
    :meth:`remove_expired` once it is ``producer.id.expiration.ms`` old. Guards are not written to
    snapshots (a restart drops them; the retried batch is verified again), as in Kafka.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}
        self.verifications: dict[int, VerificationGuard] = {}

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction open here at ``producer_epoch``."""
        if producer_id not in self.ongoing:
            return False
        entry = self.producers.get(producer_id)
        return entry is not None and entry.producer_epoch == producer_epoch

    # ------------------------------------------------------------ verification (KIP-890 part 1)
    def verification_guard(self, producer_id: int, now_ms: int) -> VerificationGuard:
        """The producer's guard, made now unless a verification of it is already in flight
        (Kafka's maybeCreateVerificationStateEntry: concurrent verifications share one)."""
        guard = self.verifications.get(producer_id)
        if guard is None:
            guard = self.verifications[producer_id] = VerificationGuard(producer_id, now_ms)
        return guard

    def check_verified(self, headers: Iterable[BatchHeader], guard: VerificationGuard) -> None:
        """Raise InvalidTxnState unless every transactional batch that would open a transaction
        here (none open at its epoch) presents its producer's current guard."""
        opened: set[int] = set()
        for header in headers:
            if not header.is_transactional or header.is_control or header.producer_id in opened:
                continue
            pid = header.producer_id
            if not self.has_ongoing_txn(pid, header.producer_epoch):
                current = self.verifications.get(pid)
                if current is None or current is not guard:
                    raise InvalidTxnState("Record was not part of an ongoing transaction")
            opened.add(pid)

    # ------------------------------------------------------------ validation / update
    def validate(
        self, records: Buffer, headers: Iterable[BatchHeader], origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> BatchMetadata | None:
        """Check a whole request (``headers``: its batches, laid out in ``records`` in order);
        returns the original batch if it repeats one, else None.

        A COORDINATOR append is never a duplicate and has no sequences to check; its epochs are.
        A transaction marker is checked as Kafka's end-of-transaction marker: one older than the
        producer's epoch is INVALID_PRODUCER_EPOCH, one from a coordinator epoch older than that
        of the producer's last marker here TRANSACTION_COORDINATOR_FENCED (a deposed coordinator's
        marker, held up in the network, must not end the transaction a newer coordinator opened
        since: a late abort would hide the next transaction's records in this partition while the
        other partitions commit them).
        """
        client = origin is AppendOrigin.CLIENT
        staged: dict[int, tuple[int, int]] = {}
        position = 0
        for header in headers:
            at, position = position, position + header.size
            if not _tracked(header):
                if header.is_control and header.producer_id >= 0:
                    entry = self.producers.get(header.producer_id)
                    if entry is not None and header.producer_epoch < entry.producer_epoch:
                        raise InvalidProducerEpoch(
                            f"producer {header.producer_id}: marker epoch {header.producer_epoch} "
                            f"is older than {entry.producer_epoch}"
                        )
                    coordinator_epoch = coordinator_epoch_of(records, at)
                    if entry is not None and coordinator_epoch < entry.coordinator_epoch:
                        raise TransactionCoordinatorFenced(
                            f"producer {header.producer_id}: marker of coordinator epoch {coordinator_epoch}, "
                            f"older than {entry.coordinator_epoch}"
                        )
                continue
            pid = header.producer_id
            entry = self.producers.get(pid)
            if (
                entry is not None
                and entry.current_txn_first_offset >= 0
                and not header.is_transactional
                and header.producer_epoch == entry.producer_epoch
            ):
                raise InvalidTxnState(f"producer {pid}: a non-transactional batch while its transaction is open")
            if pid in staged:
                epoch, last_seq = staged[pid]
            else:
                duplicate = entry.find_duplicate(header) if entry and client else None
                if duplicate is not None:
                    return duplicate
                epoch = entry.producer_epoch if entry else NO_PRODUCER_EPOCH
                last_seq = entry.last_seq if entry else NO_SEQUENCE
            if client:
                self._check(pid, epoch, last_seq, header)
            elif header.producer_epoch < epoch:
                raise InvalidProducerEpoch(f"producer {pid}: epoch {header.producer_epoch} is older than {epoch}")
            staged[pid] = (header.producer_epoch, header.last_sequence)
        return None

    @staticmethod
    def _check(pid: int, epoch: int, last_seq: int, header: BatchHeader) -> None:
        if header.producer_epoch < epoch:
            raise InvalidProducerEpoch(f"producer {pid}: epoch {header.producer_epoch} is older than {epoch}")
        if header.base_sequence == NO_SEQUENCE or epoch == NO_PRODUCER_EPOCH:
            return
        if header.producer_epoch != epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequence(
                    f"producer {pid}: new epoch {header.producer_epoch} must start at sequence 0, "
                    f"got {header.base_sequence}"
                )
        elif not in_sequence(last_seq, header.base_sequence):
            raise OutOfOrderSequence(
                f"producer {pid}: expected sequence {(last_seq + 1) & INT32_MAX}, got {header.base_sequence}"
            )

    def update(self, header: BatchHeader) -> None:
        """Record a written batch (``header`` carries its final base offset)."""
        if not _tracked(header):
            return
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
        if header.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = header.producer_epoch
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, header.base_offset, header.last_offset, header.max_timestamp
            )
        )
        entry.last_timestamp = header.max_timestamp
        if header.is_transactional:
            # written into its transaction: from here on the open transaction vouches for it
            self.verifications.pop(header.producer_id, None)
            if entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = header.base_offset
                self.ongoing[header.producer_id] = header.base_offset

    def complete_txn(self, header: BatchHeader, coordinator_epoch: int = -1) -> int | None:
        """A marker of ``header.producer_id`` was written: close its open transaction here.

        Returns the transaction's first offset, or None if it had none open in this partition.
        """
        pid = header.producer_id
        self.verifications.pop(pid, None)  # the transaction ended: a verification in flight is stale
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid, header.producer_epoch)
        elif header.producer_epoch > entry.producer_epoch:
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = header.max_timestamp
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        self.ongoing.pop(pid, None)
        return first if first >= 0 else None

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Kafka's producer.id.expiration.ms: forget producers with no open transaction whose
        last write (batch or marker timestamp) is ``expiration_ms`` old, and verification guards
        made that long ago (a verification never followed by an append). Returns how many
        producers."""
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        for pid in [p for p, g in self.verifications.items() if now_ms - g.created_ms >= expiration_ms]:
            del self.verifications[pid]
        return len(expired)

    def remove_below(self, log_start_offset: int) -> None:
        """Forget producers whose last batch is below the log start (retention, DeleteRecords)."""
        for pid in [
            p for p, e in self.producers.items() if e.last_offset < log_start_offset and e.current_txn_first_offset < 0
        ]:
            del self.producers[pid]
        self.delete_snapshots(lambda offset: offset < log_start_offset)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()

    # ------------------------------------------------------------ snapshots
    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def delete_snapshots(self, predicate: Callable[[int], bool]) -> None:
        for offset in self.snapshot_offsets():
            if predicate(offset):
                (self.directory / snapshot_name(offset)).unlink(missing_ok=True)

    def take_snapshot(self, offset: int) -> None:
        """Write the table as ``<offset>.snapshot`` and keep only the newest few snapshots."""
        entries = [
            _ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                b.last_seq,
                b.last_offset,
                b.last_offset - b.first_offset,
                b.timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for e in self.producers.values()
            for b in e.batches
        ]
        # producers known only from a marker or an open transaction without a cached batch
        entries += [
            _ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                NO_SEQUENCE,
                -1,
                0,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for e in self.producers.values()
            if not e.batches
        ]
        body = _COUNT.pack(len(entries)) + b"".join(entries)
        atomic_write(self.directory / snapshot_name(offset), _PREFIX.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + body)
        keep = self.snapshot_offsets()[-SNAPSHOTS_TO_KEEP:]
        self.delete_snapshots(lambda o: o not in keep)

    def load_latest_snapshot(self, max_offset: int) -> int | None:
        """Load the newest valid snapshot at or below ``max_offset``; returns its offset.

        Deletes snapshots above ``max_offset`` and any that fail to parse.
        """
        self.producers.clear()
        self.ongoing.clear()
        self.delete_snapshots(lambda offset: offset > max_offset)
        for offset in reversed(self.snapshot_offsets()):
            path = self.directory / snapshot_name(offset)
            entries = self._read_snapshot(path)
            if entries is None:
                path.unlink(missing_ok=True)
                continue
            for pid, epoch, last_seq, last_offset, delta, timestamp, coord_epoch, txn_first in entries:
                entry = self.producers.setdefault(pid, ProducerStateEntry(pid, epoch))
                entry.producer_epoch = epoch
                entry.coordinator_epoch = coord_epoch
                entry.current_txn_first_offset = txn_first
                entry.last_timestamp = timestamp
                if txn_first >= 0:
                    self.ongoing[pid] = txn_first
                else:
                    self.ongoing.pop(pid, None)
                if last_offset < 0:
                    continue
                first_seq = (last_seq - delta) & INT32_MAX if last_seq >= 0 else NO_SEQUENCE
                entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, timestamp))
            return offset
        return None

    @staticmethod
    def _read_snapshot(path: Path) -> list[tuple[int, ...]] | None:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if len(data) < _PREFIX.size + _COUNT.size:
            return None
        version, crc = _PREFIX.unpack_from(data)
        body = memoryview(data)[_PREFIX.size :]
        if version != SNAPSHOT_VERSION or crc32c.crc32c(body) != crc:
            return None
        (count,) = _COUNT.unpack_from(body)
        if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
            return None
        return list(_ENTRY.iter_unpack(body[_COUNT.size :]))

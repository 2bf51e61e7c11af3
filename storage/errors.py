"""Exceptions raised by the storage layer.

Every exception carries ``error_code_name``: the Kafka error name the broker answers with
(looked up by name in the protocol's error table), so no mapping table is needed elsewhere.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every storage error. ``KAFKA_STORAGE_ERROR`` unless a subclass says otherwise."""

    error_code_name = "KAFKA_STORAGE_ERROR"


class OffsetOutOfRange(StorageError):
    """A read or DeleteRecords asked for an offset outside [log_start_offset, log_end_offset]."""

    error_code_name = "OFFSET_OUT_OF_RANGE"


class OutOfOrderSequence(StorageError):
    """An idempotent batch's first sequence does not follow the producer's last sequence."""

    error_code_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequence(StorageError):
    """A batch repeats sequences already written but does not match a cached batch exactly."""

    error_code_name = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpoch(StorageError):
    """A batch carries a producer epoch lower than the one the log already knows."""

    error_code_name = "INVALID_PRODUCER_EPOCH"


class TransactionCoordinatorFenced(StorageError):
    """A transaction marker from a coordinator older than the one whose marker the producer's
    state already holds (a deposed coordinator's marker, delivered late)."""

    error_code_name = "TRANSACTION_COORDINATOR_FENCED"


class UnknownProducerId(StorageError):
    """Kept for completeness; current Kafka (KIP-360) no longer raises it and neither does Strom."""

    error_code_name = "UNKNOWN_PRODUCER_ID"


class CorruptRecord(StorageError):
    """Bytes handed to an append are not whole, well-formed v2 batches."""

    error_code_name = "CORRUPT_MESSAGE"


class RecordTooLarge(StorageError):
    """A batch is larger than ``max.message.bytes``."""

    error_code_name = "MESSAGE_TOO_LARGE"


class RecordBatchTooLarge(StorageError):
    """A batch is larger than ``segment.bytes`` and could never fit in a segment."""

    error_code_name = "RECORD_LIST_TOO_LARGE"


class CorruptLog(StorageError):
    """On-disk data that recovery cannot repair (e.g. an unreadable checkpoint or snapshot)."""

    error_code_name = "KAFKA_STORAGE_ERROR"


class UnexpectedAppendOffset(StorageError):
    """A follower append whose first offset is below the log end offset."""

    error_code_name = "UNKNOWN_SERVER_ERROR"


class KafkaStorageError(StorageError):
    """A system call on a log dir failed (full disk, I/O error, read-only, too many open files).

    ``errno`` is the OS error, ``path`` the file, ``transient`` whether retrying later can work
    without an operator (no space, no quota, no descriptors) as opposed to a failing or
    read-only disk, which takes its log dir offline. Nothing half-written is kept: the caller
    has already cut the log back to its last whole batch.
    """

    error_code_name = "KAFKA_STORAGE_ERROR"

    def __init__(self, message: str, errno: int | None = None, path: str | None = None, transient: bool = True) -> None:
        super().__init__(message)
        self.errno = errno
        self.path = path
        self.transient = transient


class LogDirOffline(KafkaStorageError):
    """The partition's log dir has failed and is offline until the broker restarts."""

    def __init__(self, message: str, log_dir: str | None = None) -> None:
        super().__init__(message, transient=False)
        self.log_dir = log_dir


class InvalidTxnState(StorageError):
    """A batch that does not fit the producer's transaction state (e.g. non-transactional while open)."""

    error_code_name = "INVALID_TXN_STATE"

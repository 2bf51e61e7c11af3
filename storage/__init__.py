"""The log: segments, indexes, checkpoints, leader epochs, producer state, recovery, retention."""

from strom.storage.config import LogConfig
from strom.storage.errors import (
    CorruptLog,
    CorruptRecord,
    DuplicateSequence,
    InvalidProducerEpoch,
    OffsetOutOfRange,
    OutOfOrderSequence,
    RecordBatchTooLarge,
    RecordTooLarge,
    StorageError,
    UnexpectedAppendOffset,
    UnknownProducerId,
)
from strom.storage.files import FileRegion
from strom.storage.log import FetchDataInfo, Log, LogAppendInfo, TimestampAndOffset
from strom.storage.log_manager import LogManager

__all__ = [
    "CorruptLog",
    "CorruptRecord",
    "DuplicateSequence",
    "FetchDataInfo",
    "FileRegion",
    "InvalidProducerEpoch",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "RecordBatchTooLarge",
    "RecordTooLarge",
    "StorageError",
    "TimestampAndOffset",
    "UnexpectedAppendOffset",
    "UnknownProducerId",
]

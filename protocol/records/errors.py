"""Exceptions raised by ``protocol.records``.

Every malformed input ends in a :class:`RecordsError` subclass; codec and struct
exceptions never escape. ``error_code`` is the Kafka error a broker answers with.
"""

from __future__ import annotations


class RecordsError(Exception):
    """Base class: the records blob cannot be used as it is."""

    error_code = 2  # CORRUPT_MESSAGE


class CorruptRecords(RecordsError):
    """Bad CRC, impossible length, truncated entry, undecodable compressed data."""

    error_code = 2  # CORRUPT_MESSAGE


class InvalidBatch(CorruptRecords):
    """An intact batch (its CRC holds) whose header contradicts itself: a record count that is not
    ``last_offset_delta + 1``, negative counts, or fewer bytes than its records need. Kafka answers a
    client's such batch with INVALID_RECORD; other readers treat it as corrupt."""

    error_code = 87  # INVALID_RECORD


class UnknownCodec(CorruptRecords):
    """An intact batch whose attributes name a compression codec that does not exist. Kafka 4.0
    answers a client's such batch with UNKNOWN_SERVER_ERROR (its codec lookup throws)."""

    error_code = -1  # UNKNOWN_SERVER_ERROR


class LegacyFormat(RecordsError):
    """The entry is a magic 0/1 message set; the caller converts it (``legacy.upconvert``)."""

    error_code = 2  # CORRUPT_MESSAGE, if the caller cannot convert

    def __init__(self, magic: int, position: int) -> None:
        super().__init__(f"message set with magic {magic} at byte {position}, not a v2 batch")
        self.magic = magic
        self.position = position


class BatchTooLarge(RecordsError):
    """A batch is larger than the caller's ``max_batch_size``."""

    error_code = 10  # MESSAGE_TOO_LARGE


class DecompressedTooLarge(RecordsError):
    """Decompressing would exceed ``max_size`` (a decompression bomb, or a too-small limit)."""

    error_code = 10  # MESSAGE_TOO_LARGE


class UnsupportedCompression(RecordsError):
    """The codec cannot be expressed in the requested format (zstd in magic 0/1)."""

    error_code = 76  # UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecord(RecordsError):
    """A well-formed record the topic refuses (a null key on a compacted topic). ``indexes``: the
    refused records' positions within their batch."""

    error_code = 87  # INVALID_RECORD
    indexes: list[int] = []

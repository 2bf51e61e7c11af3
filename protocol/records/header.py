"""The 61-byte RecordBatch v2 header: the only part of a batch the hot path reads.

Byte layout (big-endian), offsets from the start of the batch::

     0  base_offset            int64
     8  batch_length           int32   bytes after this field (whole batch = 12 + batch_length)
    12  partition_leader_epoch int32
    16  magic                  int8    2
    17  crc                    uint32  CRC-32C of bytes [21, 12 + batch_length)
    21  attributes             int16   bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23  last_offset_delta      int32
    27  base_timestamp         int64
    35  max_timestamp          int64
    43  producer_id            int64
    51  producer_epoch         int16
    53  base_sequence          int32
    57  records_count          int32
    61  records...

The v0/v1 message sets share the first 12 bytes (offset, size) and keep magic at byte 16 too,
which is how a reader tells them apart.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

# What the readers of record bytes accept: a batch in memory, a view of one, a mapped segment file.
Buffer = bytes | bytearray | memoryview | mmap.mmap

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the framing every log entry shares
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
PARTITION_LEADER_EPOCH_OFFSET = 12

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_ENTRY = struct.Struct(">qi")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, framing included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Unpack the v2 header at ``buf[pos:]``. The caller checks magic and length first."""
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def entry_frame(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """(base_offset, batch_length) of the log entry at ``pos``: valid for every magic."""
    return _ENTRY.unpack_from(buf, pos)


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Not covered by the CRC, so stamping it leaves the batch valid."""
    _LEADER_EPOCH.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)

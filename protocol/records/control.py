"""Control batches: the transaction markers a coordinator writes to end a transaction.

A control batch has attribute bits 4 (transactional) and 5 (control) set, the producer id and
epoch of the transaction it ends, no sequence, and exactly one record, never compressed:

* key: ``version int16 (0), type int16`` with type 0 = ABORT, 1 = COMMIT;
* value: ``version int16 (0), coordinator_epoch int32``.

Readers recognise a control batch from its header; only the type needs the first record's key,
which lies at a fixed place after the record's varint prefix (see :func:`control_type`).
"""

from __future__ import annotations

import struct

from .batch import Record, build_batch
from .header import HEADER_SIZE, Buffer

ABORT = 0
COMMIT = 1
CONTROL_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def build_marker(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """One control batch (base offset 0: the log assigns it) ending a transaction."""
    record = Record(
        0, 0, _KEY.pack(CONTROL_VERSION, COMMIT if commit else ABORT), _VALUE.pack(CONTROL_VERSION, coordinator_epoch)
    )
    return build_batch(
        [record],
        base_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def _varint(buf: Buffer, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def control_type(buf: Buffer, pos: int = 0) -> int:
    """ABORT or COMMIT for the control batch starting at ``buf[pos]`` (its header checked by the
    caller); -1 when its first record is not a readable control key."""
    try:
        p = pos + HEADER_SIZE
        _, p = _varint(buf, p)  # record length
        p += 1  # attributes
        _, p = _varint(buf, p)  # timestamp delta
        _, p = _varint(buf, p)  # offset delta
        key_len, p = _varint(buf, p)
        if key_len < _KEY.size:
            return -1
        kind: int = _KEY.unpack_from(buf, p)[1]
    except (IndexError, ValueError, struct.error):
        return -1
    return kind if kind in (ABORT, COMMIT) else -1


def coordinator_epoch_of(buf: Buffer, pos: int = 0) -> int:
    """The coordinator epoch in the control batch's value (-1 if unreadable)."""
    try:
        p = pos + HEADER_SIZE
        _, p = _varint(buf, p)
        p += 1
        _, p = _varint(buf, p)
        _, p = _varint(buf, p)
        key_len, p = _varint(buf, p)
        p += max(key_len, 0)
        value_len, p = _varint(buf, p)
        if value_len < _VALUE.size:
            return -1
        epoch: int = _VALUE.unpack_from(buf, p)[1]
        return epoch
    except (IndexError, ValueError, struct.error):
        return -1

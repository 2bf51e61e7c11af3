"""Records of the internal topic `__transaction_state`, in Kafka's own formats.

Key (``TransactionLogKey``, version 0): ``int16 version, transactional_id string``.
Value (``TransactionLogValue``, version 0, or 1 flexible with tagged fields)::

    int16 version
    producer_id                 int64
    producer_epoch              int16
    transaction_timeout_ms      int32
    transaction_status          int8    TransactionState id (see coordinator.txn.metadata)
    transaction_partitions      [topic string, partition_ids [int32]]  (nullable)
    transaction_last_update_timestamp_ms  int64
    transaction_start_timestamp_ms        int64
    v1 tagged: 0 previous_producer_id int64, 1 next_producer_id int64,
               2 client_transaction_version int16

A null value (tombstone) removes the transactional id (expiry). Strom writes value version 1, as
Kafka 4.0 does once transaction.version 1 or later is finalized (tagged fields only where they
differ from their defaults; an Empty id has null partitions), and reads 0 and 1.
Field facts come from Kafka's reference definitions; the framing (version prefix, byte layouts)
from `protocol.internal_records`.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.protocol.internal_records import InternalRecordError, RecordCodec
from strom.protocol.internal_records import field as _f

KEY_VERSION = 0
VALUE_VERSION = 1


class TxnRecordError(InternalRecordError):
    """A `__transaction_state` record this broker cannot read."""


_SCHEMAS = {
    "TransactionLogKey": ((0, 0), None, [_f("transactional_id", "string", (0, None))]),
    "TransactionLogValue": (
        (0, 1),
        1,
        [
            _f("producer_id", "int64", (0, None)),
            _f("previous_producer_id", "int64", (1, None), tag=0, default=-1),
            _f("next_producer_id", "int64", (1, None), tag=1, default=-1),
            _f("producer_epoch", "int16", (0, None)),
            _f("transaction_timeout_ms", "int32", (0, None)),
            _f("transaction_status", "int8", (0, None)),
            _f(
                "transaction_partitions",
                "[]PartitionsSchema",
                (0, None),
                nullable=(0, None),
                fields=[_f("topic", "string", (0, None)), _f("partition_ids", "[]int32", (0, None))],
            ),
            _f("transaction_last_update_timestamp_ms", "int64", (0, None)),
            _f("transaction_start_timestamp_ms", "int64", (0, None)),
            _f("client_transaction_version", "int16", (1, None), tag=2, default=0),
        ],
    ),
}


_CODEC = RecordCodec(_SCHEMAS, TxnRecordError)


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    return _CODEC.encode("TransactionLogKey", KEY_VERSION, {"transactional_id": transactional_id})


def decode_key(data: bytes | None) -> str:
    _, body = _CODEC.decode("TransactionLogKey", data)
    transactional_id: str = body.transactional_id
    return transactional_id


def encode_value(v: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    partitions = (
        None
        if v.status == 0 and not v.partitions
        else [{"topic": t, "partition_ids": sorted(p)} for t, p in sorted(v.partitions.items())]
    )
    return _CODEC.encode(
        "TransactionLogValue",
        version,
        {
            "producer_id": v.producer_id,
            "producer_epoch": v.producer_epoch,
            "previous_producer_id": v.previous_producer_id,
            "next_producer_id": v.next_producer_id,
            "transaction_timeout_ms": v.timeout_ms,
            "transaction_status": v.status,
            "transaction_partitions": partitions,
            "transaction_last_update_timestamp_ms": v.last_update_ms,
            "transaction_start_timestamp_ms": v.start_ms,
            "client_transaction_version": v.client_transaction_version,
        },
    )


def decode_value(data: bytes) -> TxnLogValue:
    version, b = _CODEC.decode("TransactionLogValue", data)
    partitions: dict[str, list[int]] = {}
    for p in b.transaction_partitions or []:
        partitions.setdefault(p.topic, []).extend(p.partition_ids or [])
    return TxnLogValue(
        b.producer_id,
        b.producer_epoch,
        b.transaction_timeout_ms,
        b.transaction_status,
        partitions,
        b.transaction_last_update_timestamp_ms,
        b.transaction_start_timestamp_ms,
        b.previous_producer_id if version >= 1 else -1,
        b.next_producer_id if version >= 1 else -1,
        b.client_transaction_version if version >= 1 else 0,
    )

"""Records of the internal topic `__transaction_state`, in Kafka's own formats.

Key (``TransactionLogKey``, version 0): ``int16 version, transactional_id string``.
Value (``TransactionLogValue``, version 0, or 1 flexible with tagged fields)::

    int16 version
    producer_id                 int64
    producer_epoch              int16
    transaction_timeout_ms      int32
    transaction_status          int8    TransactionState id (see broker.txn.metadata)
    transaction_partitions      [topic string, partition_ids [int32]]  (nullable)
    transaction_last_update_timestamp_ms  int64
    transaction_start_timestamp_ms        int64
    v1 tagged: 0 previous_producer_id int64, 1 next_producer_id int64,
               2 client_transaction_version int16

A null value (tombstone) removes the transactional id (expiry). Strom writes value version 1, as
Kafka 4.0 does once transaction.version 1 or later is finalized (tagged fields only where they
differ from their defaults; an Empty id has null partitions), and reads 0 and 1.
Field facts come from Kafka's reference definitions; byte layouts from `protocol.codec`.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from strom.protocol.codec import MessageStruct, _BuildCtx, _ParseCtx, build_struct
from strom.protocol.schema import FieldSpec

KEY_VERSION = 0
VALUE_VERSION = 1
_INT16 = struct.Struct(">h")


class TxnRecordError(ValueError):
    """A `__transaction_state` record this broker cannot read."""


def _f(name: str, type_: str, versions, *, nullable=None, tagged=None, tag=None, default=..., fields=()) -> dict:
    raw: dict[str, Any] = {"name": name, "type": type_, "versions": list(versions),
                           "nullable_versions": list(nullable) if nullable else None, "fields": list(fields)}
    if tagged is not None:
        raw["tagged_versions"] = list(tagged)
        raw["tag"] = tag
    if default is not ...:
        raw["default"] = default
    return raw


_SCHEMAS = {
    "TransactionLogKey": ((0, 0), None, [_f("transactional_id", "string", (0, None))]),
    "TransactionLogValue": ((0, 1), 1, [
        _f("producer_id", "int64", (0, None)),
        _f("previous_producer_id", "int64", (1, None), tagged=(1, None), tag=0, default=-1),
        _f("next_producer_id", "int64", (1, None), tagged=(1, None), tag=1, default=-1),
        _f("producer_epoch", "int16", (0, None)),
        _f("transaction_timeout_ms", "int32", (0, None)),
        _f("transaction_status", "int8", (0, None)),
        _f("transaction_partitions", "[]PartitionsSchema", (0, None), nullable=(0, None), fields=[
            _f("topic", "string", (0, None)),
            _f("partition_ids", "[]int32", (0, None))]),
        _f("transaction_last_update_timestamp_ms", "int64", (0, None)),
        _f("transaction_start_timestamp_ms", "int64", (0, None)),
        _f("client_transaction_version", "int16", (1, None), tagged=(1, None), tag=2, default=0)]),
}


@cache
def _struct(name: str, version: int) -> MessageStruct:
    (low, high), flexible_from, fields = _SCHEMAS[name]
    if not low <= version <= high:
        raise TxnRecordError(f"{name} version {version} is not defined (valid {low}-{high})")
    flexible = flexible_from is not None and version >= flexible_from
    return build_struct([FieldSpec.from_json(f) for f in fields], version, flexible)


def _encode(name: str, version: int, body: dict) -> bytes:
    out = io.BytesIO()
    out.write(_INT16.pack(version))
    _struct(name, version)._build(body, out, _BuildCtx(), "")
    return out.getvalue()


def _decode(name: str, data: bytes) -> tuple[int, Any]:
    if data is None or len(data) < 2:
        raise TxnRecordError(f"{name}: too short for a version")
    version = _INT16.unpack_from(data)[0]
    stream = io.BytesIO(data)
    stream.seek(2)
    try:
        return version, _struct(name, version)._parse(stream, _ParseCtx(len(data), memoryview(data)), "")
    except TxnRecordError:
        raise
    except Exception as exc:  # construct and codec errors of a malformed record
        raise TxnRecordError(f"malformed {name} v{version}: {exc}") from None


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
    return _encode("TransactionLogKey", KEY_VERSION, {"transactional_id": transactional_id})


def decode_key(data: bytes | None) -> str:
    _, body = _decode("TransactionLogKey", data)
    return body.transactional_id


def encode_value(v: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    partitions = None if v.status == 0 and not v.partitions else \
        [{"topic": t, "partition_ids": sorted(p)} for t, p in sorted(v.partitions.items())]
    return _encode("TransactionLogValue", version, {
        "producer_id": v.producer_id, "producer_epoch": v.producer_epoch,
        "previous_producer_id": v.previous_producer_id, "next_producer_id": v.next_producer_id,
        "transaction_timeout_ms": v.timeout_ms, "transaction_status": v.status,
        "transaction_partitions": partitions,
        "transaction_last_update_timestamp_ms": v.last_update_ms,
        "transaction_start_timestamp_ms": v.start_ms,
        "client_transaction_version": v.client_transaction_version})


def decode_value(data: bytes) -> TxnLogValue:
    version, b = _decode("TransactionLogValue", data)
    partitions: dict[str, list[int]] = {}
    for p in b.transaction_partitions or []:
        partitions.setdefault(p.topic, []).extend(p.partition_ids or [])
    return TxnLogValue(b.producer_id, b.producer_epoch, b.transaction_timeout_ms, b.transaction_status,
                       partitions, b.transaction_last_update_timestamp_ms, b.transaction_start_timestamp_ms,
                       b.previous_producer_id if version >= 1 else -1, b.next_producer_id if version >= 1 else -1,
                       b.client_transaction_version if version >= 1 else 0)

"""Records of the internal topic `__share_group_state`, in Kafka's own formats.

Kafka's share coordinator writes two record types, keyed alike by (group id, topic id,
partition), the share-partition they describe:

* ShareSnapshot (key type 0): the whole state of a share-partition: ``snapshot_epoch``,
  ``state_epoch``, ``leader_epoch``, ``start_offset``, ``create_timestamp``, ``write_timestamp``
  and the state batches (first offset, last offset, delivery state, delivery count) at or past the
  start offset; ``delivery_complete_count`` is a tagged field since Kafka 4.2 (KIP-1226).
* ShareUpdate (key type 1): what one write changed since the last snapshot: ``snapshot_epoch``
  (of that snapshot), ``leader_epoch``, ``start_offset`` (-1: unchanged), the batches written.

A key starts with its record type (int16) followed by the key struct (version 0, not flexible);
a value starts with its version (int16, 0) followed by a flexible struct. A null value (tombstone)
of a ShareSnapshot key deletes the share-partition's state. The facts come from Kafka 4.3's
``ShareSnapshotKey/Value`` and ``ShareUpdateKey/Value`` definitions; the framing from
`protocol.internal_records`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from strom.broker.coordinator.share.persister import SharePartitionKey, StateBatch
from strom.protocol.internal_records import InternalRecordError, RecordCodec, Schemas, version_of
from strom.protocol.internal_records import field as _f

SNAPSHOT_KEY_TYPE = 0
UPDATE_KEY_TYPE = 1
VALUE_VERSION = 0


class ShareRecordError(InternalRecordError):
    """A `__share_group_state` record this broker cannot read."""


def _key_fields() -> list[dict[str, Any]]:
    return [_f("group_id", "string", (0, None)), _f("topic_id", "uuid", (0, None)), _f("partition", "int32", (0, None))]


def _batch_fields() -> list[dict[str, Any]]:
    return [
        _f("first_offset", "int64", (0, None)),
        _f("last_offset", "int64", (0, None)),
        _f("delivery_state", "int8", (0, None)),
        _f("delivery_count", "int16", (0, None)),
    ]


_SCHEMAS: Schemas = {
    # the key "version" on the wire is the record type; both key structs are version 0's fields
    "ShareSnapshotKey": ((SNAPSHOT_KEY_TYPE, SNAPSHOT_KEY_TYPE), None, _key_fields()),
    "ShareUpdateKey": ((UPDATE_KEY_TYPE, UPDATE_KEY_TYPE), None, _key_fields()),
    "ShareSnapshotValue": (
        (0, 0),
        0,
        [
            _f("snapshot_epoch", "int32", (0, None)),
            _f("state_epoch", "int32", (0, None)),
            _f("leader_epoch", "int32", (0, None)),
            _f("start_offset", "int64", (0, None)),
            _f("delivery_complete_count", "int32", (0, None), tag=0, default=-1),
            _f("create_timestamp", "int64", (0, None)),
            _f("write_timestamp", "int64", (0, None)),
            _f("state_batches", "[]StateBatch", (0, None), fields=_batch_fields()),
        ],
    ),
    "ShareUpdateValue": (
        (0, 0),
        0,
        [
            _f("snapshot_epoch", "int32", (0, None)),
            _f("leader_epoch", "int32", (0, None)),
            _f("start_offset", "int64", (0, None)),
            _f("delivery_complete_count", "int32", (0, None), tag=0, default=-1),
            _f("state_batches", "[]StateBatch", (0, None), fields=_batch_fields()),
        ],
    ),
}

_CODEC = RecordCodec(_SCHEMAS, ShareRecordError)


def coordinator_key(key: SharePartitionKey) -> str:
    """``group:topicId:partition``, what FindCoordinator (key type SHARE) names and the choice of
    `__share_group_state` partition hashes (Kafka's SharePartitionKey.asCoordinatorKey)."""
    return f"{key.group_id}:{uuid_string(key.topic_id)}:{key.partition}"


@dataclass(frozen=True)
class SnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


@dataclass(frozen=True)
class UpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


def uuid_string(raw: bytes) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _batches(raw: Any) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in raw or ())


def _batch_dicts(batches: tuple[StateBatch, ...]) -> list[dict[str, int]]:
    return [
        {
            "first_offset": b.first_offset,
            "last_offset": b.last_offset,
            "delivery_state": b.delivery_state,
            "delivery_count": b.delivery_count,
        }
        for b in batches
    ]


def encode_key(key: SharePartitionKey, record_type: int) -> bytes:
    name = "ShareSnapshotKey" if record_type == SNAPSHOT_KEY_TYPE else "ShareUpdateKey"
    return _CODEC.encode(
        name, record_type, {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition}
    )


def decode_key(data: bytes | None) -> tuple[int, SharePartitionKey]:
    """(record type, share-partition); ShareRecordError for another type or bad bytes."""
    record_type = version_of(data)
    if record_type == SNAPSHOT_KEY_TYPE:
        name = "ShareSnapshotKey"
    elif record_type == UPDATE_KEY_TYPE:
        name = "ShareUpdateKey"
    else:
        raise ShareRecordError(f"unknown {record_type=} in a __share_group_state key")
    _, body = _CODEC.decode(name, data)
    return record_type, SharePartitionKey(body.group_id, bytes(body.topic_id), body.partition)


def encode_snapshot(value: SnapshotValue) -> bytes:
    return _CODEC.encode(
        "ShareSnapshotValue",
        VALUE_VERSION,
        {
            "snapshot_epoch": value.snapshot_epoch,
            "state_epoch": value.state_epoch,
            "leader_epoch": value.leader_epoch,
            "start_offset": value.start_offset,
            "delivery_complete_count": value.delivery_complete_count,
            "create_timestamp": value.create_timestamp,
            "write_timestamp": value.write_timestamp,
            "state_batches": _batch_dicts(value.state_batches),
        },
    )


def decode_snapshot(data: bytes) -> SnapshotValue:
    _, b = _CODEC.decode("ShareSnapshotValue", data)
    return SnapshotValue(
        b.snapshot_epoch,
        b.state_epoch,
        b.leader_epoch,
        b.start_offset,
        b.create_timestamp,
        b.write_timestamp,
        _batches(b.state_batches),
        b.delivery_complete_count,
    )


def encode_update(value: UpdateValue) -> bytes:
    return _CODEC.encode(
        "ShareUpdateValue",
        VALUE_VERSION,
        {
            "snapshot_epoch": value.snapshot_epoch,
            "leader_epoch": value.leader_epoch,
            "start_offset": value.start_offset,
            "delivery_complete_count": value.delivery_complete_count,
            "state_batches": _batch_dicts(value.state_batches),
        },
    )


def decode_update(data: bytes) -> UpdateValue:
    _, b = _CODEC.decode("ShareUpdateValue", data)
    return UpdateValue(
        b.snapshot_epoch, b.leader_epoch, b.start_offset, _batches(b.state_batches), b.delivery_complete_count
    )

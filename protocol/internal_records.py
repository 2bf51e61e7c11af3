"""The framing of Kafka's internal-topic records (`__consumer_offsets`, `__transaction_state`).

Every such record has a key and (unless it is a tombstone, a null value that deletes what its key
names) a value; both start with a big-endian ``int16 version`` and continue with a struct laid out
by Kafka's protocol rules (``protocol.codec``: int16-length strings, int32-length bytes, int32-count
arrays; flexible versions use compact lengths and tagged fields). Which record types exist and
their fields (names, types, version ranges: the facts of Kafka's ``internal/*.json``) belong to
each topic's owner (``broker.group.records``, ``broker.txn.records``); this module turns such a
table into bytes and back, builds the batches the coordinators append, and maps an id to its
partition as Kafka does.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from functools import cache
from typing import Any

from strom.protocol.codec import MessageStruct, _BuildCtx, _ParseCtx, build_struct
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.schema import FieldSpec

VERSION = struct.Struct(">h")

# name -> ((lowest, highest version), flexible from version or None, fields as built by `field`)
Schemas = dict[str, tuple[tuple[int, int], "int | None", list[dict[str, Any]]]]


class InternalRecordError(ValueError):
    """An internal-topic record this broker cannot read."""


def field(
    name: str,
    type_: str,
    versions: tuple[int, int | None],
    *,
    nullable: tuple[int, int | None] | None = None,
    default: Any = ...,
    fields: Iterable[dict[str, Any]] = (),
    tag: int | None = None,
) -> dict[str, Any]:
    """One field in the shape of Kafka's message JSON; with ``tag``, tagged in every version it has."""
    raw: dict[str, Any] = {
        "name": name,
        "type": type_,
        "versions": list(versions),
        "nullable_versions": list(nullable) if nullable else None,
        "fields": list(fields),
    }
    if tag is not None:
        raw["tagged_versions"], raw["tag"] = list(versions), tag
    if default is not ...:
        raw["default"] = default
    return raw


class RecordCodec:
    """Encodes and decodes the keys and values of one internal topic's record types.

    ``error`` is the topic's InternalRecordError subclass: every failure to read a record (too
    short, a version the type lacks, malformed bytes) raises it, never anything else.
    """

    def __init__(self, schemas: Schemas, error: type[InternalRecordError] = InternalRecordError):
        self.schemas = schemas
        self.error = error
        self._struct = cache(self._build_struct)

    def _build_struct(self, name: str, version: int) -> MessageStruct:
        (low, high), flexible_from, fields = self.schemas[name]
        if not low <= version <= high:
            raise self.error(f"{name} version {version} is not defined (valid {low}-{high})")
        flexible = flexible_from is not None and version >= flexible_from
        # a key's fields are not checked: the key types of one topic are one message in Kafka's
        # older layout, and callers build one dict for all of them (values, nested structs are)
        return build_struct(
            [FieldSpec.from_json(f) for f in fields],
            version,
            flexible,
            f"{name} v{version}",
            strict=not name.endswith("Key"),
        )

    def encode(self, name: str, version: int, body: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(VERSION.pack(version))
        self._struct(name, version)._build(body, out, _BuildCtx(), "")
        return out.getvalue()

    def decode(self, name: str, data: bytes | None) -> tuple[int, Any]:
        """(version, body) of a key or value of type ``name``."""
        if data is None or len(data) < 2:
            raise self.error(f"{name}: {0 if data is None else len(data)} bytes is too short for a version")
        version = VERSION.unpack_from(data)[0]
        stream = io.BytesIO(data)
        stream.seek(2)
        try:
            return version, self._struct(name, version)._parse(stream, _ParseCtx(len(data), memoryview(data)), "")
        except self.error:
            raise
        except Exception as exc:  # construct and codec errors of a malformed record
            raise self.error(f"malformed {name} v{version}: {exc}") from None


def version_of(data: bytes | None) -> int | None:
    """The version a key or value starts with; None when there are not two bytes."""
    return VERSION.unpack_from(data)[0] if data is not None and len(data) >= 2 else None


def build_records_batch(
    records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int, producer: tuple[int, int] | None = None
) -> bytearray:
    """One batch of (key, value) records (value None: a tombstone) as a coordinator appends it;
    with ``producer`` (id, epoch) a transactional batch of that producer."""
    pid, epoch = producer if producer is not None else (-1, -1)
    return bytearray(
        build_batch(
            [Record(i, 0, k, v) for i, (k, v) in enumerate(records)],
            base_timestamp=timestamp_ms,
            producer_id=pid,
            producer_epoch=epoch,
            is_transactional=producer is not None,
        )
    )


# --------------------------------------------------------------------------- partitioning


def java_string_hashcode(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's `Utils.abs(id.hashCode) % partitions` (abs of MIN_VALUE is 0): the partition of an
    internal topic that holds a group id or a transactional id."""
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions

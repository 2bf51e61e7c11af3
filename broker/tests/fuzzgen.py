"""Hostile requests for every API version, generated from the protocol schema (no hand lists).

`baseline(api_key, version, ctx)` builds a request body that encodes and names things the fuzz
broker has (its topic, topic id, partition 0, a group); `leaves(...)` lists every field of that
version (nested in arrays and structs, tagged fields too) as a path; `hostile_values(field, ...)`
gives the values a hostile client can still encode for that field's type; `mutated(...)` puts one
into a copy of the baseline. `lying_count` / `LyingBytes` encode an array count or a bytes length
far beyond the elements/bytes that follow. The raw-frame cases (truncation, flips, garbage) are
built from the encoded baseline by `raw_cases`.
"""

from __future__ import annotations

import copy
import math
import random
import struct
from dataclasses import dataclass
from typing import Any

from strom.protocol.codec import default_value, encode_request
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.records.crc import crc32c
from strom.protocol.schema import FieldSpec, api_spec, in_range, is_flexible

INT_BOUNDS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
BIG_STRING = 32 * 1024  # 32 KiB; a classic (int16-length) string holds at most 32767 bytes


@dataclass
class Context:
    topic: str
    topic_id: bytes
    group: str = "fuzz-group"
    transactional_id: str = "fuzz-txn"
    member_id: str = ""  # a member of the group, joined and synced before each version
    generation: int = -1
    producer_id: int = -1  # the transactional producer's id and epoch (InitProducerId)
    producer_epoch: int = -1


def fields_at(fields, version: int) -> list[FieldSpec]:
    return [f for f in fields if in_range(version, f.versions)]


def _string_for(name: str, ctx: Context) -> str:
    if name in ("protocols", "protocol_name"):
        return "range"
    if name == "protocol_type":
        return "consumer"
    if name == "member_id":
        return ctx.member_id
    if "topic" in name or name in ("name", "resource_name"):
        return ctx.topic
    if "group" in name:
        return ctx.group
    if "transactional" in name:
        return ctx.transactional_id
    return ""


def baseline_value(field: FieldSpec, version: int, ctx: Context, parent: str = "") -> Any:
    """A plausible value: one element per array, names of things the broker has."""
    if field.is_array:
        if field.is_struct:
            return [baseline_struct(field.fields, version, ctx, field.name)]
        element = FieldSpec(
            field.name,
            field.element_type,
            field.versions,
            None,
            None,
            None,
            False,
            None,
            field.flexible_versions,
            False,
            (),
        )
        return [baseline_value(element, version, ctx, parent)]
    if field.is_struct:
        return baseline_struct(field.fields, version, ctx, field.name)
    name = field.name
    if name == "subscribed_topic_regex" and in_range(version, field.nullable_versions):
        return None  # with subscribed_topic_names: one of the two
    if field.type == "string":
        value = _string_for(name if name != "name" else (parent or name), ctx)
        if value:
            return value
    if field.type == "uuid" and "topic" in name:
        return ctx.topic_id
    if field.type == "records":
        return build_batch([Record(0, 0, b"k", b"v", [])], base_timestamp=1_700_000_000_000)
    if field.type == "int32" and name in ("session_timeout_ms", "rebalance_timeout_ms"):
        return 30_000
    if field.type in ("int32", "int64") and ("timeout" in name or "wait" in name):
        return 100
    if field.type == "int32" and name in ("partition", "partition_index", "index"):
        return 0
    if field.type == "int32" and name in ("generation_id", "generation_id_or_member_epoch", "member_epoch"):
        return ctx.generation
    if field.type == "int64" and name.endswith("producer_id"):
        return ctx.producer_id
    if field.type == "int16" and name.endswith("producer_epoch"):
        return ctx.producer_epoch
    if field.type == "int8" and name == "resource_type":
        return 2  # TOPIC
    value = default_value(field, version)
    if (
        value is None
        and field.type in ("string", "bytes", "records")
        and not in_range(version, field.nullable_versions)
    ):
        return "" if field.type == "string" else b""
    return value


def baseline_struct(fields, version: int, ctx: Context, parent: str = "") -> dict:
    return {f.name: baseline_value(f, version, ctx, parent) for f in fields_at(fields, version)}


def baseline(api_key: int, version: int, ctx: Context) -> dict:
    body = baseline_struct(api_spec(api_key).request.fields, version, ctx)
    if api_key == 0:  # Produce: acks=-1 so the answer (not silence) is what is checked
        body["acks"] = -1
    return body


def leaves(fields, version: int, prefix: tuple = ()) -> list[tuple[tuple, FieldSpec]]:
    """Every field of this version as a path (array element index 0 where arrays are passed)."""
    out = []
    for f in fields_at(fields, version):
        path = prefix + (f.name,)
        out.append((path, f))
        if f.is_array and f.is_struct:
            out.extend(leaves(f.fields, version, path + (0,)))
        elif f.is_struct:
            out.extend(leaves(f.fields, version, path))
    return out


def hostile_values(field: FieldSpec, version: int, flexible: bool, rng: random.Random, current: Any) -> list[Any]:
    """Values a hostile client can encode in `field` at `version` (nulls only where nullable)."""
    nullable = in_range(version, field.nullable_versions)
    t = field.type
    values: list[Any]
    if field.is_array:
        values = [
            [],
            [copy.deepcopy(current[0])] * 3 if current else [],  # duplicate entries
            LyingList(current[:1], 2**31 - 1),
        ]
        if current:
            values.append([copy.deepcopy(current[0]) for _ in range(200)])
    elif field.is_struct:
        values = []
    elif t in INT_BOUNDS:
        bits = INT_BOUNDS[t]
        values = [-1, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1))]
    elif t == "uint16":
        values = [0, 65535]
    elif t == "float64":
        values = [math.nan, math.inf, -1.0]
    elif t == "bool":
        values = [not current]
    elif t == "uuid":
        values = [bytes(16), b"\xff" * 16, rng.randbytes(16)]
    elif t == "string":
        values = ["", "x" * 32767, "\u00e9\u2603\U0001f600", "..", "a/b", "__consumer_offsets", "__transaction_state"]
        if flexible and _compact(field, version):
            values.append("x" * BIG_STRING)  # encodable in a compact string; Kafka refuses it as malformed
    elif t in ("bytes", "records"):
        values = [b"", rng.randbytes(64), rng.randbytes(BIG_STRING), LyingBytes(b"\x00" * 8, 2**31 - 2)]
        if t == "records":
            values += hostile_batches(rng)
    else:
        raise ValueError(t)
    if nullable:
        values.append(None)
    return values


def _with_attributes(batch: bytes, attributes: int) -> bytes:
    """`batch` with its attributes replaced and its CRC-32C made right again."""
    body = struct.pack(">h", attributes) + batch[23:]
    return batch[:17] + struct.pack(">I", crc32c(body)) + body


def hostile_batches(rng: random.Random) -> list[bytes]:
    """Record batches whose CRC is right and whose header or records are hostile."""
    one = [Record(0, 0, b"k", b"v", [])]
    ts = 1_700_000_000_000
    return [
        build_batch(one, base_timestamp=ts, is_control=True),  # a client's "control" batch
        build_batch(
            one,
            base_timestamp=ts,
            is_transactional=True,
            producer_id=rng.randrange(2**40),
            producer_epoch=0,
            base_sequence=0,
        ),  # a transaction nobody began
        build_batch(one, base_timestamp=ts, producer_id=2**63 - 1, producer_epoch=32767, base_sequence=2**31 - 1),
        build_batch(one, base_timestamp=ts, base_offset=2**63 - 1, last_offset_delta=2**31 - 1),
        build_batch(one, base_timestamp=2**63 - 1, timestamp_type=1),
        build_batch(one, base_timestamp=-(2**63)),
        build_batch([Record(5, 0, b"k", b"v"), Record(2, -5, None, None, [("", None)])], base_timestamp=ts),
        build_batch([], base_timestamp=ts),  # no records
        _with_attributes(build_batch(one, base_timestamp=ts), 5),  # compression codec 5
        _with_attributes(build_batch(one, base_timestamp=ts), 0x7FFF),  # every attribute bit
        build_batch(one, base_timestamp=ts) + build_batch(one, base_timestamp=ts)[:30],  # a cut second batch
    ]


def _compact(field: FieldSpec, version: int) -> bool:
    return in_range(version, field.flexible_versions) if field.has_own_flexible else True


class LyingList(list):
    """A list whose encoded count is `claimed` while only its real elements follow."""

    def __init__(self, items, claimed: int):
        super().__init__(items)
        self.claimed = claimed

    def __len__(self) -> int:
        return self.claimed

    def __deepcopy__(self, memo):
        return LyingList([copy.deepcopy(x, memo) for x in list.__iter__(self)], self.claimed)

    def __repr__(self) -> str:
        return f"LyingList(count={self.claimed}, real={list.__len__(self)})"


class LyingBytes(bytes):
    """Bytes whose encoded length is `claimed` while only the real bytes follow."""

    def __new__(cls, data: bytes, claimed: int):
        obj = super().__new__(cls, data)
        obj.claimed = claimed
        return obj

    def __len__(self) -> int:
        return self.claimed

    def __deepcopy__(self, memo):
        return self

    def __repr__(self) -> str:
        return f"LyingBytes(length={self.claimed}, real={bytes.__len__(self)})"


def set_path(body: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(body)
    target = out
    for step in path[:-1]:
        if isinstance(step, int):
            if list.__len__(target) <= step:
                return out
            target = list.__getitem__(target, step)
        else:
            target = target.get(step)
            if target is None:
                return out
    target[path[-1]] = value
    return out


def get_path(body: dict, path: tuple) -> Any:
    target: Any = body
    for step in path:
        if target is None:
            return None
        target = list.__getitem__(target, step) if isinstance(step, int) else target.get(step)
    return target


def field_mutations(api_key: int, version: int, ctx: Context, rng: random.Random):
    """(label, body) for every (field, hostile value) of this version, in schema order."""
    body = baseline(api_key, version, ctx)
    flexible = is_flexible(api_key, version)
    out = []
    for path, field in leaves(api_spec(api_key).request.fields, version):
        current = get_path(body, path)
        for value in hostile_values(field, version, flexible, rng, current):
            out.append((f"{'.'.join(map(str, path))}={_short(value)}", set_path(body, path, value)))
    return out


def all_fields_hostile(api_key: int, version: int, ctx: Context, rng: random.Random) -> tuple[str, dict]:
    """One body with every scalar field set to a hostile value at once (arrays kept small)."""
    body = baseline(api_key, version, ctx)
    flexible = is_flexible(api_key, version)
    labels = []
    for path, field in leaves(api_spec(api_key).request.fields, version):
        if field.is_array or field.is_struct:
            continue
        current = get_path(body, path)
        choice = rng.choice(hostile_values(field, version, flexible, rng, current) + [current])
        body = set_path(body, path, choice)
        labels.append(f"{path[-1]}={_short(choice)}")
    return "all:" + ",".join(labels), body


def _short(value: Any) -> str:
    if isinstance(value, (LyingList, LyingBytes)):
        return repr(value)
    if isinstance(value, (str, bytes)) and len(value) > 16:
        return f"<{type(value).__name__} of {len(value)}>"
    if isinstance(value, list):
        return f"<list of {len(value)}>"
    return repr(value)


def encode(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    return encode_request(api_key, version, correlation_id, "fuzz", body)


def raw_cases(api_key: int, version: int, frame: bytes, rng: random.Random, flips: int = 3) -> list[tuple[str, bytes]]:
    """Malformed frames made from one valid request frame (size prefix included)."""
    payload = frame[4:]
    header_len = _header_len(api_key, version, payload)
    body = payload[header_len:]
    out = []

    def framed(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    for cut in sorted({0, 1, len(body) // 2, max(len(body) - 1, 0)}):
        if cut < len(body):
            out.append((f"truncated body at {cut}/{len(body)}", framed(payload[:header_len] + body[:cut])))
    for _ in range(flips):
        if body:
            flipped = bytearray(body)
            i = rng.randrange(len(flipped))
            flipped[i] ^= 1 << rng.randrange(8) if rng.random() < 0.5 else 0xFF
            out.append((f"body byte {i} flipped", framed(payload[:header_len] + bytes(flipped))))
    out.append(("trailing garbage", framed(payload + rng.randbytes(17))))
    out.append(("body of 0xff", framed(payload[:header_len] + b"\xff" * max(len(body), 8))))
    if is_flexible(api_key, version):
        out.append(("varint of 6 bytes first", framed(payload[:header_len] + b"\xff" * 5 + b"\x01" + body)))
        out.append(("tagged-field count huge", framed(payload[:header_len] + body[:-1] + b"\xff\xff\xff\xff\x07")))
    return out


def _header_len(api_key: int, version: int, payload: bytes) -> int:
    from strom.protocol.codec import decode_request_header

    return decode_request_header(payload)[1]

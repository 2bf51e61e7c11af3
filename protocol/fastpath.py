"""Hand-specialized decoders for the hot requests, derived from the same schema.

Produce is the request a broker decodes most; the generic construct path spends most of its
time on per-field dispatch. This decoder reads the same layout with `struct` directly, for the
versions clients use (3 and later), and returns exactly what `codec.decode_request` returns
(tests decode every sample and thousands of mutated frames both ways and compare). Anything it
cannot read raises `MalformedRequest`, like the generic path.

Produce request v3-8:  transactional_id int16-string?, acks int16, timeout_ms int32,
    topic_data int32-count [name int16-string, partition_data int32-count [index int32,
    records int32-bytes?]]
Produce request v9+ (flexible): the same with unsigned-varint lengths (length + 1, 0 = null),
    and a tagged-field section closing every struct.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

from construct import Container

from strom.protocol.codec import encode_uvarint
from strom.protocol.errors import MalformedRequest
from strom.protocol.schema import ApiKey, api_spec

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
MIN_VERSION = 3


class _Reader:
    __slots__ = ("view", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, offset: int) -> None:
        self.view = memoryview(buf)
        self.pos = offset
        self.end = len(self.view)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise MalformedRequest(f"{what}: length {n} exceeds the message")

    def unpack(self, st: struct.Struct, what: str) -> tuple[int, ...]:
        """The integers of ``st`` (every format read here is integers only)."""
        if self.pos + st.size > self.end:
            raise MalformedRequest(f"truncated {what}: needed {st.size} bytes, got {self.end - self.pos}")
        values: tuple[int, ...] = st.unpack_from(self.view, self.pos)
        self.pos += st.size
        return values

    def uvarint(self, what: str) -> int:
        value = shift = 0
        view, pos = self.view, self.pos
        for _ in range(5):
            if pos >= self.end:
                raise MalformedRequest(f"truncated {what}")
            byte = view[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
        raise MalformedRequest(f"{what}: varint too long")

    def string(self, n: int, what: str) -> str:
        if n > 0x7FFF:  # as the generic path and Kafka: no string is longer
            raise MalformedRequest(f"{what}: string length {n} exceeds 32767")
        self.need(n, what)
        try:
            text = str(self.view[self.pos : self.pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest(f"{what}: invalid UTF-8 ({exc})") from None
        self.pos += n
        return text

    def slice(self, n: int, what: str) -> memoryview:
        self.need(n, what)
        data = self.view[self.pos : self.pos + n]
        self.pos += n
        return data

    def skip_tags(self) -> None:
        count = self.uvarint("tagged field count")
        last = -1
        for _ in range(count):
            tag = self.uvarint("tag")
            size = self.uvarint("tagged field size")
            if tag <= last:
                raise MalformedRequest(f"tagged fields out of order: tag {tag} after {last}")
            last = tag
            self.need(size, f"tagged field {tag}")
            self.pos += size


def _count(r: _Reader, flexible: bool, what: str) -> int:
    if flexible:
        n = r.uvarint(what) - 1
    else:
        (n,) = r.unpack(_I32, what)
    if n < 0:
        raise MalformedRequest(f"{what}: null or negative count {n}")
    if n > r.end - r.pos:  # every element takes at least a byte: fail before looping
        raise MalformedRequest(f"{what}: array count {n} exceeds the message")
    return n


def _length(r: _Reader, flexible: bool, wide: bool, what: str) -> int:
    """A string/bytes length; -1 is null."""
    if flexible:
        return r.uvarint(what) - 1
    (n,) = r.unpack(_I32 if wide else _I16, what)
    if n < -1:
        raise MalformedRequest(f"{what}: invalid length {n}")
    return n


_NO_TOPIC_ID = bytes(16)


def decode_produce(version: int, buf: bytes | bytearray | memoryview, offset: int) -> Container:
    """A Produce request body (v3+) as `codec.decode_request` would return it."""
    flexible = version >= 9
    r = _Reader(buf, offset)
    n = _length(r, flexible, False, "transactional_id")
    transactional_id = None if n == -1 else r.string(n, "transactional_id")
    acks, timeout_ms = r.unpack(_ACKS_TIMEOUT, "acks")
    topics = []
    by_id = version >= 13  # KIP-516: topic ids instead of names
    for _ in range(_count(r, flexible, "topic_data")):
        topic_id, name = _NO_TOPIC_ID, ""
        if by_id:
            topic_id = bytes(r.slice(16, "topic_id"))
        else:
            n = _length(r, flexible, False, "name")
            if n < 0:
                raise MalformedRequest("name: null is not allowed")
            name = r.string(n, "name")
        partitions = []
        for _ in range(_count(r, flexible, "partition_data")):
            (index,) = r.unpack(_I32, "index")
            n = _length(r, flexible, True, "records")
            records = None if n == -1 else r.slice(n, "records")
            if flexible:
                r.skip_tags()
            partitions.append(Container(index=index, records=records))
        if flexible:
            r.skip_tags()
        # the absent field takes its default, as the generic decoder gives it
        topics.append(Container(name=name, partition_data=partitions, topic_id=topic_id))
    if flexible:
        r.skip_tags()
    return Container(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=topics)


# --------------------------------------------------------------------------- Produce response

_PARTITION_V2 = struct.Struct(">ihqq")  # + log_append_time_ms
_PARTITION_V5 = struct.Struct(">ihqqq")  # + log_start_offset


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode("utf-8")
    return (encode_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


@cache
def _produce_response_fields() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """Field names of the Produce response in any version: top level, topic, partition."""
    top = api_spec(ApiKey.PRODUCE).response.fields
    topic = next(f for f in top if f.name == "responses").fields
    partition = next(f for f in topic if f.name == "partition_responses").fields
    return (frozenset(f.name for f in top), frozenset(f.name for f in topic), frozenset(f.name for f in partition))


def encode_produce_response(version: int, body: dict[str, Any]) -> bytes | None:
    """The Produce response body (v3+), or None when it carries something only the generic
    encoder writes (record errors, error messages, tagged leader hints) or a key that is no
    field of the response (the generic encoder refuses it, naming it)."""
    flexible = version >= 9
    if body.get("node_endpoints"):
        return None
    known_top, known_topic, known_partition = _produce_response_fields()
    if not body.keys() <= known_top:
        return None
    part_st = _PARTITION_V5 if version >= 5 else _PARTITION_V2
    responses = body.get("responses", [])  # absent fields take the schema's defaults
    out = [encode_uvarint(len(responses) + 1) if flexible else _I32.pack(len(responses))]
    for topic in responses:
        if not topic.keys() <= known_topic:
            return None
        parts = topic.get("partition_responses", [])
        if version >= 13:
            out.append(bytes(topic.get("topic_id", _NO_TOPIC_ID)))
        else:
            out.append(_string(topic.get("name", ""), flexible))
        out.append(encode_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
        for p in parts:
            if (
                p.get("record_errors")
                or p.get("error_message") is not None
                or p.get("current_leader")
                or not p.keys() <= known_partition
            ):
                return None
            values = (
                p.get("index", 0),
                p.get("error_code", 0),
                p.get("base_offset", 0),
                p.get("log_append_time_ms", -1),
                p.get("log_start_offset", -1),
            )
            out.append(part_st.pack(*values[: len(part_st.format) - 1]))
            if version >= 8:
                out.append(b"\x01\x00" if flexible else b"\x00\x00\x00\x00\xff\xff")  # no record errors, null message
            if flexible:
                out.append(b"\x00")
        if flexible:
            out.append(b"\x00")
    out.append(_I32.pack(body.get("throttle_time_ms", 0)))
    if flexible:
        out.append(b"\x00")
    return b"".join(out)

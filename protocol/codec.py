"""Kafka request/response codec: construct-based structs built from ``protocol.schema``.

One flat struct per (api key, version, request|response) is built on first use and cached. All
version decisions are made while building it: a field the version lacks is not in the struct.

Wire layouts (big-endian), per Kafka's protocol rules:

* frame: ``int32 size`` then ``size`` bytes (request header + body, or response header + body);
* request header v0: ``int16 api_key, int16 api_version, int32 correlation_id``; v1 adds
  ``client_id`` (int16-length nullable string); v2 adds a tagged-field section;
* response header v0: ``int32 correlation_id``; v1 adds a tagged-field section;
* ``intN``/``uint16``/``float64``: fixed width; ``bool``: 1 byte; ``uuid``: 16 raw bytes;
* ``string``: int16 length + UTF-8 (-1 = null); ``bytes``/``records``: int32 length (-1 = null);
  arrays: int32 count (-1 = null);
* flexible versions: strings/bytes/records/arrays use an unsigned varint of length + 1 (0 = null)
  and every struct ends with tagged fields: varint count, then per field varint tag, varint size,
  data. Unknown tags are skipped on decode.
* nullable struct fields: int8 -1 (null) or 1, then the struct.

Decoded messages are ``construct.Container`` objects with snake_case keys. Fields absent from the
decoded version (and tagged fields not sent) are filled with their schema defaults, so handlers can
read every field of the message whatever the version. Encoding accepts plain dicts; a missing key
takes the schema default, a key naming a field of another version is ignored, and a key that is no
field of its struct in any version (a misspelt name) raises ``UnknownFieldError``.

Untrusted input: every length and count is checked against the bytes remaining before anything
is allocated; every malformed body raises ``MalformedRequest``.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable
from functools import cache, lru_cache
from typing import Any, NamedTuple

from construct import Construct, ConstructError, Container

from strom.protocol.errors import EncodeError, MalformedRequest, UnknownApiKey, UnknownFieldError, UnsupportedVersion
from strom.protocol.schema import (
    ApiKey,
    FieldSpec,
    MessageSpec,
    api_spec,
    in_range,
    is_known_api,
    request_header_version,
    response_header_version,
)

ZERO_UUID = bytes(16)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_I16_MAX = 0x7FFF

# Fixed-width scalar types: struct format character and byte size.
FIXED_FORMATS: dict[str, str] = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}
ZERO_VALUES: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "float64": 0.0,
    "bool": False,
    "uuid": ZERO_UUID,
    "string": "",
    "bytes": b"",
    "records": b"",
}


class RequestHeader(NamedTuple):
    """A decoded request header (``client_id`` is None in header v0 or when sent as null)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class _ParseCtx:
    """Parse context: ``end`` is the index just past the last readable byte; ``view`` the whole
    buffer, so that record data can be handed out as a slice of it instead of a copy."""

    __slots__ = ("end", "view")

    def __init__(self, end: int, view: memoryview) -> None:
        self.end = end
        self.view = view


class _BuildCtx:
    """Build context: file regions met so far, as ``(stream offset, region)``."""

    __slots__ = ("regions",)

    def __init__(self) -> None:
        self.regions: list[tuple[int, Any]] = []


def _read(stream: io.BytesIO, n: int, what: str) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise MalformedRequest(f"truncated {what}: needed {n} bytes, got {len(data)}")
    return data


def read_uvarint(stream: io.BytesIO, what: str = "varint") -> int:
    """Unsigned LEB128 varint of at most 5 bytes (a uint32)."""
    value = 0
    for shift in (0, 7, 14, 21, 28):
        b = stream.read(1)
        if not b:
            raise MalformedRequest(f"truncated {what}")
        byte = b[0]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                raise MalformedRequest(f"{what} exceeds 32 bits")
            return value
    raise MalformedRequest(f"{what} is longer than 5 bytes")


_SMALL_VARINTS = tuple(bytes([i]) for i in range(128))


def encode_uvarint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    if not 0 <= value <= 0xFFFFFFFF:
        raise EncodeError(f"varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _remaining(stream: io.BytesIO, ctx: _ParseCtx) -> int:
    return ctx.end - stream.tell()


class KafkaConstruct(Construct):  # type: ignore[misc]  # construct ships no types: Construct is Any
    """Base of the codec's constructs; ``min_size`` is the fewest bytes one value occupies."""

    min_size: int = 0

    def _sizeof(self, context: Any, path: str) -> int:  # pragma: no cover - variable size
        raise ConstructError("variable size")


class FixedGroup(KafkaConstruct):
    """Consecutive fixed-width fields read and written with one ``struct.Struct``.

    Layout: the fields back to back, big-endian, no padding. Parses to a tuple of values.
    """

    def __init__(self, names: tuple[str, ...], types: tuple[str, ...]) -> None:
        super().__init__()
        self.names = names
        self.types = types
        self.packer = struct.Struct(">" + "".join(FIXED_FORMATS[t] for t in types))
        self.min_size = self.packer.size
        self.uuid_positions = tuple(i for i, t in enumerate(types) if t == "uuid")

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> tuple[Any, ...]:
        return self.packer.unpack(_read(stream, self.packer.size, "/".join(self.names)))

    def _build(self, obj: tuple[Any, ...], stream: io.BytesIO, context: Any, path: str) -> Any:
        for i in self.uuid_positions:
            if not isinstance(obj[i], (bytes, bytearray)) or len(obj[i]) != 16:
                raise EncodeError(f"{self.names[i]}: uuid must be 16 bytes, got {obj[i]!r}")
        try:
            stream.write(self.packer.pack(*obj))
        except struct.error as exc:
            raise EncodeError(f"{'/'.join(self.names)}: {exc}: {obj!r}") from None
        return obj


class FixedScalar(FixedGroup):
    """One fixed-width value outside a struct run (array elements, tagged fields)."""

    def __init__(self, name: str, type_name: str) -> None:
        super().__init__((name,), (type_name,))

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        return super()._parse(stream, context, path)[0]

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        super()._build((obj,), stream, context, path)
        return obj


class _Length:
    """Length/count prefix helpers shared by strings, bytes, records and arrays.

    Classic: int16 (strings) or int32 (bytes, arrays) with -1 = null. Compact: varint length+1.
    """

    def __init__(self, name: str, compact: bool, nullable: bool, wide: bool) -> None:
        self.name = name
        self.compact = compact
        self.nullable = nullable
        self.prefix = _I32 if wide else _I16

    def read(self, stream: io.BytesIO) -> int | None:
        if self.compact:
            n = read_uvarint(stream, self.name) - 1
        else:
            n = self.prefix.unpack(_read(stream, self.prefix.size, self.name))[0]
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise MalformedRequest(f"{self.name}: invalid length {n}")
        return n

    def write(self, n: int | None, stream: io.BytesIO) -> None:
        if n is None:
            if not self.nullable:
                raise EncodeError(f"{self.name}: null in a non-nullable field")
            n = -1
        if self.compact:
            stream.write(encode_uvarint(n + 1))
        else:
            try:
                stream.write(self.prefix.pack(n))
            except struct.error:
                raise EncodeError(f"{self.name}: length {n} does not fit") from None

    @property
    def size(self) -> int:
        return 1 if self.compact else self.prefix.size


class KString(KafkaConstruct):
    """string: length prefix (int16 or compact varint) + UTF-8; null = -1 when nullable."""

    def __init__(self, name: str, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.length = _Length(name, compact, nullable, wide=False)
        self.min_size = self.length.size
        # an error message quoting a client's value (a 32 KiB topic name) must not make the answer
        # unencodable or unreadable (no reader takes a string over 32767 bytes, a compact one
        # neither): it is cut to fit, its error code goes out intact
        self.cut_to = _I16_MAX if name.endswith("error_message") else None

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> str | None:
        n = self.length.read(stream)
        if n is None:
            return None
        if n > _I16_MAX:
            # as Kafka's generated readers ("string field ... had invalid length"): a compact string
            # could be longer, but no Kafka string is, and names longer than this cannot be stored
            raise MalformedRequest(f"{self.length.name}: string length {n} exceeds {_I16_MAX}")
        if n > _remaining(stream, context):
            raise MalformedRequest(f"{self.length.name}: string length {n} exceeds the message")
        try:
            return stream.read(n).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedRequest(f"{self.length.name}: invalid UTF-8") from None

    def _build(self, obj: str | None, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            self.length.write(None, stream)
            return obj
        if not isinstance(obj, str):
            raise EncodeError(f"{self.length.name}: expected str, got {type(obj).__name__}")
        data = obj.encode("utf-8")
        if self.cut_to is not None and len(data) > self.cut_to:
            data = data[: self.cut_to - 3].decode("utf-8", "ignore").encode("utf-8") + b"..."
        self.length.write(len(data), stream)
        stream.write(data)
        return obj


class KBytes(KafkaConstruct):
    """bytes: length prefix (int32 or compact varint) + raw bytes; null = -1 when nullable."""

    def __init__(self, name: str, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.length = _Length(name, compact, nullable, wide=True)
        self.min_size = self.length.size

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> bytes | None:
        n = self.length.read(stream)
        if n is None:
            return None
        if n > _remaining(stream, context):
            raise MalformedRequest(f"{self.length.name}: length {n} exceeds the message")
        return stream.read(n)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            self.length.write(None, stream)
            return obj
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise EncodeError(f"{self.length.name}: expected bytes, got {type(obj).__name__}")
        self.length.write(len(obj), stream)
        stream.write(obj)
        return obj


class KRecords(KBytes):
    """records: decoded as a memoryview slice of the message buffer (record data is the bulk of
    a Produce request or a Fetch response, and is not copied); on build, bytes, or any object
    with an int ``size``: a file region.

    A region is never read: its length prefix is written and the object is noted in the build
    context at the current stream offset, so the caller can send it (os.sendfile) in place.
    """

    # a view where KBytes copies: records are read in place
    def _parse(  # type: ignore[override]
        self, stream: io.BytesIO, context: Any, path: str
    ) -> memoryview | None:
        n = self.length.read(stream)
        if n is None:
            return None
        if n > _remaining(stream, context):
            raise MalformedRequest(f"{self.length.name}: length {n} exceeds the message")
        start = stream.tell()
        stream.seek(n, io.SEEK_CUR)
        view: memoryview = context.view
        return view[start : start + n]

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None or isinstance(obj, (bytes, bytearray, memoryview)):
            return super()._build(obj, stream, context, path)
        size = getattr(obj, "size", None)
        if not isinstance(size, int) or size < 0:
            raise EncodeError(f"{self.length.name}: records must be bytes or have an int size")
        self.length.write(size, stream)
        context.regions.append((stream.tell(), obj))
        return obj


class KArray(KafkaConstruct):
    """Array: count prefix (int32 or compact varint count+1; -1/0 = null) then the elements.

    The count is checked against the bytes remaining (at ``element.min_size`` each, at least 1)
    before any list is allocated.
    """

    def __init__(self, name: str, element: KafkaConstruct, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.element = element
        self.length = _Length(name, compact, nullable, wide=True)
        self.min_size = self.length.size
        self.element_min = max(element.min_size, 1)

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> list[Any] | None:
        n = self.length.read(stream)
        if n is None:
            return None
        if n * self.element_min > _remaining(stream, context):
            raise MalformedRequest(f"{self.length.name}: array count {n} exceeds the message")
        parse = self.element._parse
        return [parse(stream, context, path) for _ in range(n)]

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            self.length.write(None, stream)
            return obj
        if isinstance(obj, (str, bytes, dict)):
            raise EncodeError(f"{self.length.name}: expected a list, got {type(obj).__name__}")
        items = obj if isinstance(obj, (list, tuple)) else list(obj)
        self.length.write(len(items), stream)
        build = self.element._build
        for item in items:
            build(item, stream, context, path)
        return obj


class NullableStruct(KafkaConstruct):
    """A nullable struct field: int8 -1 for null, or int8 1 followed by the struct."""

    def __init__(self, name: str, inner: MessageStruct) -> None:
        super().__init__()
        self.name = name
        self.inner = inner
        self.min_size = 1

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Container | None:
        marker = _I8.unpack(_read(stream, 1, self.name))[0]
        if marker == -1:
            return None
        if marker != 1:
            raise MalformedRequest(f"{self.name}: bad nullable-struct marker {marker}")
        return self.inner._parse(stream, context, path)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            stream.write(b"\xff")
            return obj
        stream.write(b"\x01")
        return self.inner._build(obj, stream, context, path)


class TaggedField(NamedTuple):
    tag: int
    name: str
    construct: KafkaConstruct
    default: Callable[[], Any]
    default_bytes: bytes


class TaggedFields(KafkaConstruct):
    """Tagged-field section: varint count, then per field varint tag, varint size, value bytes.

    Parses to a dict of known fields (name -> value); unknown tags are skipped. Builds from the
    enclosing struct's object: a field is written only when present and not its default.
    """

    min_size = 1

    def __init__(self, fields: Iterable[TaggedField]) -> None:
        super().__init__()
        self.fields = sorted(fields, key=lambda f: f.tag)
        self.by_tag = {f.tag: f for f in self.fields}

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> dict[str, Any]:
        count = read_uvarint(stream, "tagged field count")
        if count > _remaining(stream, context):
            raise MalformedRequest(f"tagged field count {count} exceeds the message")
        found: dict[str, Any] = {}
        last_tag = -1
        for _ in range(count):
            tag = read_uvarint(stream, "tag")
            size = read_uvarint(stream, "tagged field size")
            if tag <= last_tag:
                raise MalformedRequest(f"tagged fields out of order: tag {tag} after {last_tag}")
            last_tag = tag
            if size > _remaining(stream, context):
                raise MalformedRequest(f"tagged field {tag} size {size} exceeds the message")
            field = self.by_tag.get(tag)
            if field is None:
                stream.seek(size, io.SEEK_CUR)
                continue
            end = stream.tell() + size
            found[field.name] = field.construct._parse(stream, _ParseCtx(end, context.view), path)
            if stream.tell() != end:
                raise MalformedRequest(f"tagged field {field.name}: size {size} does not match its value")
        return found

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        chunks: list[tuple[int, bytes]] = []
        for field in self.fields:
            if field.name not in obj:
                continue
            sub = io.BytesIO()
            sub_ctx = _BuildCtx()
            field.construct._build(obj[field.name], sub, sub_ctx, path)
            if sub_ctx.regions:
                raise EncodeError(f"{field.name}: file regions are not allowed in tagged fields")
            data = sub.getvalue()
            if data != field.default_bytes:
                chunks.append((field.tag, data))
        stream.write(encode_uvarint(len(chunks)))
        for tag, data in chunks:
            stream.write(encode_uvarint(tag))
            stream.write(encode_uvarint(len(data)))
            stream.write(data)
        return obj


class MessageStruct(KafkaConstruct):
    """A flat struct for one version: its fields in order, then (flexible) a tagged section.

    ``steps`` pairs field names with constructs; a ``FixedGroup`` step covers several names.
    ``absent`` lists fields the version lacks, filled with defaults after parsing.

    Building refuses a key that is no field of this struct in any version (a misspelt name would
    otherwise be dropped and the field silently defaulted); a key naming a field of another
    version is allowed and ignored, so a handler can build one dict for every version. The check
    is one C-level subset test of the dict's keys against ``known`` per struct built (``known``
    None: no check, for internal-topic records whose key types share one dict).
    ``where`` ("ProduceResponse v9") and ``path`` ("responses[].partition_responses[]") name the
    struct in that error.
    """

    def __init__(
        self,
        steps: list[tuple[tuple[str, ...], KafkaConstruct]],
        tagged: TaggedFields | None,
        absent: list[tuple[str, Callable[[], Any]]],
        defaults: dict[str, Callable[[], Any]],
        known: frozenset[str] | None = None,
        where: str = "",
        path: str = "",
    ) -> None:
        super().__init__()
        self.steps = steps
        self.tagged = tagged
        self.absent = absent
        self.defaults = defaults
        self.known = known
        self.where = where
        self.path = path
        self.min_size = sum(c.min_size for _, c in steps) + (1 if tagged else 0)

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Container:
        obj = Container()
        for names, con in self.steps:
            if len(names) == 1:
                obj[names[0]] = con._parse(stream, context, path)
            else:
                obj.update(zip(names, con._parse(stream, context, path), strict=True))
        if self.tagged is not None:
            found = self.tagged._parse(stream, context, path)
            for field in self.tagged.fields:
                obj[field.name] = found[field.name] if field.name in found else field.default()
        for name, factory in self.absent:
            obj[name] = factory()
        return obj

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, dict):
            raise EncodeError(f"expected a dict for a struct, got {type(obj).__name__}")
        if self.known is not None and not obj.keys() <= self.known:
            raise UnknownFieldError(
                self.where, self.path, sorted(map(str, obj.keys() - self.known)), sorted(self.known)
            )
        defaults = self.defaults
        for names, con in self.steps:
            if len(names) == 1:
                name = names[0]
                con._build(obj[name] if name in obj else defaults[name](), stream, context, path)
            else:
                con._build(tuple(obj[n] if n in obj else defaults[n]() for n in names), stream, context, path)
        if self.tagged is not None:
            self.tagged._build(obj, stream, context, path)
        return obj


# --------------------------------------------------------------------------- building structs


def _is_compact(field: FieldSpec, version: int, flexible: bool) -> bool:
    if not flexible:
        return False
    return in_range(version, field.flexible_versions) if field.has_own_flexible else True


def default_value(field: FieldSpec, version: int) -> Any:
    """A fresh default value for ``field`` (schema default, else zero/empty, structs nested)."""
    if field.has_default and field.default is None:
        return None
    if field.is_array:
        return []
    if field.is_struct:
        return Container((f.name, default_value(f, version)) for f in field.fields)
    if field.has_default:
        return bytes.fromhex(field.default.replace("-", "")) if field.type == "uuid" else field.default
    return ZERO_VALUES[field.type]


def _factory(field: FieldSpec, version: int) -> Callable[[], Any]:
    if field.is_array or field.is_struct:
        return lambda: default_value(field, version)
    value = default_value(field, version)
    return lambda: value


def _scalar(field: FieldSpec, type_name: str, compact: bool, nullable: bool) -> KafkaConstruct:
    if type_name == "string":
        return KString(field.name, compact, nullable)
    if type_name == "bytes":
        return KBytes(field.name, compact, nullable)
    if type_name == "records":
        return KRecords(field.name, compact, nullable)
    if type_name in FIXED_FORMATS:
        return FixedScalar(field.name, type_name)
    raise ValueError(f"unknown scalar type {type_name!r} for field {field.name}")


def _child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def field_construct(field: FieldSpec, version: int, flexible: bool, where: str = "", path: str = "") -> KafkaConstruct:
    """The construct encoding ``field`` in ``version`` (not its tagged-field wrapper); ``where``
    and ``path`` (of the enclosing struct) name nested structs in encode errors."""
    compact = _is_compact(field, version, flexible)
    nullable = in_range(version, field.nullable_versions)
    if field.is_array:
        if field.is_struct:
            element: KafkaConstruct = build_struct(
                field.fields, version, flexible, where, _child_path(path, field.name) + "[]"
            )
        else:
            element = _scalar(field, field.element_type, compact, nullable=False)
        return KArray(field.name, element, compact, nullable)
    if field.is_struct:
        inner = build_struct(field.fields, version, flexible, where, _child_path(path, field.name))
        return NullableStruct(field.name, inner) if nullable else inner
    return _scalar(field, field.type, compact, nullable)


def _tagged_field(field: FieldSpec, version: int, where: str, path: str) -> TaggedField:
    con = field_construct(field, version, True, where, path)
    sub = io.BytesIO()
    con._build(default_value(field, version), sub, _BuildCtx(), "")
    assert field.tag is not None
    return TaggedField(field.tag, field.name, con, _factory(field, version), sub.getvalue())


def build_struct(
    fields: Iterable[FieldSpec], version: int, flexible: bool, where: str = "", path: str = "", strict: bool = True
) -> MessageStruct:
    """Build the flat struct for ``fields`` in ``version``, merging runs of fixed-width fields.

    ``where`` names the message ("FetchResponse v12") and ``path`` the struct inside it
    ("responses[].partitions[]"; "" for the top level), for the unknown-field error. ``strict``
    False: keys that are no field are ignored (at this level only; nested structs are checked)."""
    fields = tuple(fields)
    steps: list[tuple[tuple[str, ...], KafkaConstruct]] = []
    run: list[FieldSpec] = []
    tagged: list[TaggedField] = []
    absent: list[tuple[str, Callable[[], Any]]] = []
    defaults: dict[str, Callable[[], Any]] = {}

    def flush() -> None:
        if run:
            names = tuple(f.name for f in run)
            group = (
                FixedScalar(run[0].name, run[0].type)
                if len(run) == 1
                else FixedGroup(names, tuple(f.type for f in run))
            )
            steps.append((names, group))
            run.clear()

    for field in fields:
        if not in_range(version, field.versions):
            absent.append((field.name, _factory(field, version)))
        elif flexible and in_range(version, field.tagged_versions):
            tagged.append(_tagged_field(field, version, where, path))
        elif field.type in FIXED_FORMATS:
            defaults[field.name] = _factory(field, version)
            run.append(field)
        else:
            flush()
            defaults[field.name] = _factory(field, version)
            steps.append(((field.name,), field_construct(field, version, flexible, where, path)))
    flush()
    return MessageStruct(
        steps,
        TaggedFields(tagged) if flexible else None,
        absent,
        defaults,
        frozenset(f.name for f in fields) if strict else None,
        where,
        path,
    )


def _message_spec(api_key: int, version: int, kind: str) -> MessageSpec:
    if not is_known_api(api_key):
        raise UnknownApiKey(f"unknown api key {api_key}")
    spec: MessageSpec = getattr(api_spec(api_key), kind)
    if not in_range(version, spec.valid_versions):
        raise UnsupportedVersion(f"{api_spec(api_key).name} {kind} v{version} is not defined")
    return spec


@cache
def message_struct(api_key: int, version: int, kind: str) -> MessageStruct:
    """The cached struct for ``kind`` ("request" or "response") of one API version."""
    spec = _message_spec(api_key, version, kind)
    flexible = in_range(version, spec.flexible_versions)
    where = f"{api_spec(api_key).name}{kind.capitalize()} v{version}"
    return build_struct(spec.fields, version, flexible, where)


# --------------------------------------------------------------------------- public functions

_PARSE_ERRORS = (ConstructError, struct.error, ValueError, IndexError, OverflowError, KeyError, TypeError, MemoryError)


def _parse_body(st: MessageStruct, buf: bytes | bytearray | memoryview, offset: int) -> Container:
    stream = io.BytesIO(buf)
    end = len(stream.getbuffer())
    if not 0 <= offset <= end:
        raise MalformedRequest(f"body offset {offset} outside a {end}-byte buffer")
    stream.seek(offset)
    try:
        return st._parse(stream, _ParseCtx(end, memoryview(buf)), "")
    except MalformedRequest:
        raise
    except _PARSE_ERRORS as exc:
        raise MalformedRequest(f"malformed message: {exc}") from None


def decode_request_header(buf: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Decode a request header from one frame (no size prefix); returns (header, body offset).

    Raises ``MalformedRequest`` when the header is unreadable; ``UnknownApiKey`` and
    ``UnsupportedVersion`` carry the header (client_id read as in header v1).
    """
    if len(buf) < _HEADER_FIXED.size:
        raise MalformedRequest(f"request header truncated: {len(buf)} bytes")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(buf, 0)
    known, supported, header_version = _header_facts(api_key, api_version)
    client_id: str | None = None
    offset = _HEADER_FIXED.size
    if header_version >= 1:
        client_id, offset = _read_client_id(buf, offset)
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if not known:
        raise UnknownApiKey(f"unknown api key {api_key}", header)
    if not supported:
        raise UnsupportedVersion(f"{api_spec(api_key).name} v{api_version} is not supported", header)
    if header_version == 2 and offset < len(buf) and buf[offset] == 0:
        offset += 1  # the usual case: an empty tagged-field section
    elif header_version == 2:
        stream = io.BytesIO(buf)
        stream.seek(offset)
        try:
            _HEADER_TAGS._parse(stream, _ParseCtx(len(buf), memoryview(buf)), "")
        except MalformedRequest as exc:
            raise MalformedRequest(f"request header: {exc}", header) from None
        offset = stream.tell()
    return header, offset


@lru_cache(maxsize=2048)
def _header_facts(api_key: int, api_version: int) -> tuple[bool, bool, int]:
    """(api known, version supported, request header version; 1 when unsupported)."""
    known = is_known_api(api_key)
    supported = known and in_range(api_version, api_spec(api_key).request.valid_versions)
    return known, supported, request_header_version(api_key, api_version) if supported else 1


def _read_client_id(buf: bytes | bytearray | memoryview, offset: int) -> tuple[str | None, int]:
    if len(buf) < offset + 2:
        raise MalformedRequest("request header truncated in client_id")
    (n,) = _I16.unpack_from(buf, offset)
    offset += 2
    if n == -1:
        return None, offset
    if n < 0 or offset + n > len(buf):
        raise MalformedRequest(f"request header: bad client_id length {n}")
    try:
        return bytes(buf[offset : offset + n]).decode("utf-8"), offset + n
    except UnicodeDecodeError:
        raise MalformedRequest("request header: client_id is not UTF-8") from None


_HEADER_TAGS = TaggedFields(())


def encode_request_header(header: RequestHeader) -> bytes:
    """The request header bytes (no frame prefix) in the layout its API version uses."""
    hv = request_header_version(header.api_key, header.api_version)
    out = bytearray(_HEADER_FIXED.pack(header.api_key, header.api_version, header.correlation_id))
    if hv >= 1:
        if header.client_id is None:
            out += _I16.pack(-1)
        else:
            data = header.client_id.encode("utf-8")
            out += _I16.pack(len(data)) + data
    if hv == 2:
        out += b"\x00"
    return bytes(out)


def decode_request(api_key: int, version: int, buf: bytes | bytearray | memoryview, offset: int = 0) -> Container:
    """Decode a request body starting at ``offset`` of ``buf``."""
    fast = _fast_requests().get(api_key)
    if fast is not None and fast[0] <= version <= fast[1]:
        return fast[2](version, buf, offset)
    return _parse_body(message_struct(api_key, version, "request"), buf, offset)


@cache
def _fast_requests() -> dict[int, tuple[int, int, Callable[..., Container]]]:
    """api key -> (first version, last version, decoder) of the specialized decoders."""
    from strom.protocol import fastpath

    return {ApiKey.PRODUCE: (fastpath.MIN_VERSION, api_spec(ApiKey.PRODUCE).max_version, fastpath.decode_produce)}


@cache
def _fast_responses() -> dict[int, tuple[int, int, Callable[..., bytes | None]]]:
    """api key -> (first version, last version, encoder returning None to defer to construct)."""
    from strom.protocol import fastpath

    return {
        ApiKey.PRODUCE: (fastpath.MIN_VERSION, api_spec(ApiKey.PRODUCE).max_version, fastpath.encode_produce_response)
    }


def _build_frame(st: MessageStruct, header: bytes, body: Any) -> list[Any]:
    stream = io.BytesIO()
    stream.write(b"\0\0\0\0")
    stream.write(header)
    ctx = _BuildCtx()
    try:
        st._build(body, stream, ctx, "")
    except (ConstructError, struct.error, TypeError) as exc:
        raise EncodeError(f"cannot encode: {exc}") from None
    region_bytes = sum(region.size for _, region in ctx.regions)
    stream.seek(0)
    stream.write(_I32.pack(stream.getbuffer().nbytes - 4 + region_bytes))
    data = stream.getvalue()
    if not ctx.regions:
        return [data]
    out: list[Any] = []
    start = 0
    for pos, region in ctx.regions:
        out.append(data[start:pos])
        out.append(region)
        start = pos
    out.append(data[start:])
    return out


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict[str, Any]
) -> bytes:
    """A whole request frame, with its 4-byte size prefix."""
    st = message_struct(api_key, version, "request")
    header = encode_request_header(RequestHeader(api_key, version, correlation_id, client_id))
    parts = _build_frame(st, header, body)
    if len(parts) != 1:
        raise EncodeError("file regions are only supported in responses")
    frame: bytes = parts[0]
    return frame


def _response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    head = _I32.pack(correlation_id)
    return head + b"\x00" if response_header_version(api_key, version) == 1 else head


def encode_response(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> list[bytes | object]:
    """A whole response frame with size prefix, split around any file regions."""
    fast = _fast_responses().get(api_key)
    if fast is not None and fast[0] <= version <= fast[1]:
        data = fast[2](version, body)
        if data is not None:
            header = _response_header(api_key, version, correlation_id)
            return [_I32.pack(len(header) + len(data)) + header + data]
    st = message_struct(api_key, version, "response")
    return _build_frame(st, _response_header(api_key, version, correlation_id), body)


def decode_response(
    api_key: int, version: int, buf: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[int, Container]:
    """Decode a response frame (no size prefix); returns (correlation_id, body)."""
    st = message_struct(api_key, version, "response")
    if len(buf) < offset + 4:
        raise MalformedRequest("response header truncated")
    (correlation_id,) = _I32.unpack_from(buf, offset)
    offset += 4
    if response_header_version(api_key, version) == 1:
        stream = io.BytesIO(buf)
        stream.seek(offset)
        _HEADER_TAGS._parse(stream, _ParseCtx(len(buf), memoryview(buf)), "")
        offset = stream.tell()
    return correlation_id, _parse_body(st, buf, offset)

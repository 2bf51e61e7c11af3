"""Every API and version in the schema: round trips, and the structs against the reference JSON."""

from __future__ import annotations

import re
from typing import Any

import pytest

from strom.protocol.codec import (
    FixedGroup,
    KArray,
    KBytes,
    KRecords,
    KString,
    MessageStruct,
    NullableStruct,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    message_struct,
)
from strom.protocol.connection import NEED_DATA, SERVER, Connection, Request
from strom.protocol.schema import api_spec
from strom.protocol.tests.helpers import (
    all_versions,
    assert_contains,
    load_reference,
    load_release_reference,
    sample_message,
)
from strom.tools.dev.gen_protocol_schema import KAFKA_4_3_APIS, RELEASE_FIELDS, RELEASE_VERSIONS, load_kafka_4_3

REQUESTS = all_versions("request")
RESPONSES = all_versions("response")


def _id(case: tuple[int, int]) -> str:
    return f"{api_spec(case[0]).name}-v{case[1]}"


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("case", REQUESTS, ids=_id)
def test_request_round_trip(case: tuple[int, int], nulls: bool) -> None:
    api_key, version = case
    body = sample_message(api_key, version, "request", nulls)
    frame = encode_request(api_key, version, 4242, "client-é", body)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    header, offset = decode_request_header(frame[4:])
    assert header == (api_key, version, 4242, None if version == 0 and api_key == 7 else "client-é")
    decoded = decode_request(api_key, version, frame[4:], offset)
    assert_contains(body, decoded)
    assert encode_request(api_key, version, 4242, header.client_id, decoded) == encode_request(
        api_key, version, 4242, header.client_id, body
    )


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize("case", RESPONSES, ids=_id)
def test_response_round_trip(case: tuple[int, int], nulls: bool) -> None:
    api_key, version = case
    body = sample_message(api_key, version, "response", nulls)
    [frame] = encode_response(api_key, version, 77, body)
    assert isinstance(frame, bytes)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 77
    assert_contains(body, decoded)


@pytest.mark.parametrize("case", REQUESTS, ids=_id)
def test_request_through_connection_whole_and_byte_by_byte(case: tuple[int, int]) -> None:
    api_key, version = case
    body = sample_message(api_key, version, "request")
    frame = encode_request(api_key, version, 9, "c", body)
    whole = Connection(SERVER)
    whole.receive_data(frame + frame)
    drip = Connection(SERVER)
    events = []
    for i in range(len(frame)):
        drip.receive_data(frame[i : i + 1])
        event = drip.next_event()
        if i < len(frame) - 1:
            assert event is NEED_DATA
        events.append(event)
    for event in (whole.next_event(), whole.next_event(), events[-1]):
        assert isinstance(event, Request), event
        assert event.header.correlation_id == 9 and event.size == len(frame) - 4
        assert_contains(body, event.body)
    assert whole.next_event() is NEED_DATA


# ----------------------------------------------------------------- cross-check with the reference


def _snake(name: str) -> str:
    words = re.findall(r"KRaft|[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])|[A-Z]", name)
    return "_".join(w.lower() for w in words)


def _in(spec: str | None, version: int) -> bool:
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


_FIXED = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}


def _describe_ref(
    fields: list[dict[str, Any]], structs: dict[str, Any], version: int, flexible: bool
) -> tuple[list[Any], list[Any]]:
    """(regular fields in order, tagged fields by tag) as comparable descriptions."""
    regular, tagged = [], []
    for f in fields:
        if not _in(f["versions"], version):
            continue
        desc = (_snake(f["name"]), _describe_ref_type(f, structs, version, flexible))
        if flexible and _in(f.get("taggedVersions"), version):
            tagged.append((int(f["tag"]),) + desc)
        else:
            regular.append(desc)
    return regular, sorted(tagged)


def _describe_ref_type(f: dict[str, Any], structs: dict[str, Any], version: int, flexible: bool) -> Any:
    type_name = f["type"]
    compact = flexible and f.get("flexibleVersions", "0+") != "none"
    nullable = _in(f.get("nullableVersions"), version)
    elem = type_name[2:] if type_name.startswith("[]") else type_name
    if elem in _FIXED:
        inner: Any = _FIXED[elem]
    elif elem in ("string", "bytes", "records"):
        inner = (elem, compact, nullable and elem == type_name)
    else:
        sub = f.get("fields") or structs[elem]["fields"]
        inner = ("struct", _describe_ref(sub, structs, version, flexible))
        if nullable and elem == type_name:
            inner = ("nullable", inner)
    return ("array", compact, nullable, inner) if type_name.startswith("[]") else inner


def _describe_struct(st: MessageStruct) -> tuple[list[Any], list[Any]]:
    regular = []
    for names, con in st.steps:
        if isinstance(con, FixedGroup):
            fmt = con.packer.format.lstrip(">")
            codes = re.findall(r"16s|.", fmt)
            regular += list(zip(names, codes, strict=True))
        else:
            regular.append((names[0], _describe_con(con)))
    tagged = [(t.tag, t.name, _describe_con(t.construct)) for t in st.tagged.fields] if st.tagged is not None else []
    return regular, tagged


def _describe_con(con: Any) -> Any:
    if isinstance(con, FixedGroup):
        return con.packer.format.lstrip(">")
    if isinstance(con, (KString, KBytes)):
        kind = "records" if isinstance(con, KRecords) else "string" if isinstance(con, KString) else "bytes"
        return (kind, con.length.compact, con.length.nullable)
    if isinstance(con, KArray):
        return ("array", con.length.compact, con.length.nullable, _describe_con(con.element))
    if isinstance(con, NullableStruct):
        return ("nullable", _describe_con(con.inner))
    assert isinstance(con, MessageStruct)
    return ("struct", _describe_struct(con))


def _reference_message(api_key: int, kind: str) -> dict[str, Any]:
    return load_reference(api_spec(api_key).name + kind.capitalize())


def _snapshot_max(ref: dict[str, Any]) -> int:
    low, _, high = ref["validVersions"].partition("-")
    return int(high or low)


@pytest.mark.parametrize("kind", ["request", "response"])
def test_struct_layouts_match_reference(kind: str) -> None:
    checked = 0
    for api_key, version in all_versions(kind):
        if api_spec(api_key).name in KAFKA_4_3_APIS:
            continue  # test_kafka_4_3_apis_match_their_definitions
        ref = _reference_message(api_key, kind)
        if version > _snapshot_max(ref):
            continue  # a release version: test_release_versions_match_kafka_4_0_definitions
        assert ref["apiKey"] == api_key
        flexible = _in(ref["flexibleVersions"], version)
        structs = {s["name"]: s for s in ref.get("commonStructs", [])}
        expected = _describe_ref(ref["fields"], structs, version, flexible)
        if not flexible:
            expected = (expected[0], [])
        assert _describe_struct(message_struct(api_key, version, kind)) == expected, (
            f"{api_spec(api_key).name} {kind} v{version}"
        )
        checked += 1
    assert checked > 300  # every version of every API


def test_version_ranges_match_reference() -> None:
    for api_key, _ in all_versions("request"):
        spec = api_spec(api_key)
        if spec.name in KAFKA_4_3_APIS:
            continue  # test_kafka_4_3_apis_match_their_definitions
        for kind in ("request", "response"):
            ref = _reference_message(api_key, kind)
            low, _, high = ref["validVersions"].partition("-")
            mine = getattr(spec, kind)
            high = RELEASE_VERSIONS.get(spec.name, int(high or low))
            assert (mine.min_version, mine.max_version) == (int(low), high)


@pytest.mark.parametrize("kind", ["request", "response"])
def test_release_versions_match_kafka_4_0_definitions(kind: str) -> None:
    """The versions Kafka 4.0.0 added after the reference snapshot (RELEASE_VERSIONS, with the
    fields of RELEASE_FIELDS) are laid out as the release's own definitions say."""
    checked = []
    for api_key, version in all_versions(kind):
        name = api_spec(api_key).name
        if name in KAFKA_4_3_APIS or version <= _snapshot_max(_reference_message(api_key, kind)):
            continue
        ref = load_release_reference(name + kind.capitalize())
        if ref is None:
            pytest.skip("no Kafka 4.0.0 client jar in ../shared/jvm")
        assert _in(ref["validVersions"], version), f"{name} {kind} v{version}: Kafka 4.0.0 has no such version"
        flexible = _in(ref["flexibleVersions"], version)
        structs = {s["name"]: s for s in ref.get("commonStructs", [])}
        expected = _describe_ref(ref["fields"], structs, version, flexible)
        if not flexible:
            expected = (expected[0], [])
        assert _describe_struct(message_struct(api_key, version, kind)) == expected, f"{name} {kind} v{version}"
        checked.append((name, version))
    assert sorted(checked) == sorted(RELEASE_VERSIONS.items())
    added = {api for api, k, *_ in RELEASE_FIELDS if k == kind}
    assert added <= {name for name, _ in checked}


@pytest.mark.parametrize("kind", ["request", "response"])
def test_kafka_4_3_apis_match_their_definitions(kind: str) -> None:
    """The APIs taken from Kafka 4.3.1 (share groups) have exactly its versions and layouts."""
    for name in KAFKA_4_3_APIS:
        ref = load_kafka_4_3(name + kind.capitalize())
        spec = api_spec(int(ref["apiKey"]))
        low, _, high = ref["validVersions"].partition("-")
        mine = getattr(spec, kind)
        assert (spec.name, mine.min_version, mine.max_version) == (name, int(low), int(high or low))
        structs = {s["name"]: s for s in ref.get("commonStructs", [])}
        for version in range(int(low), int(high or low) + 1):
            expected = _describe_ref(ref["fields"], structs, version, _in(ref["flexibleVersions"], version))
            assert _describe_struct(message_struct(spec.api_key, version, kind)) == expected, f"{name} v{version}"

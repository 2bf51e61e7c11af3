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
    RELEASE_CLIENT_JAR,
    all_versions,
    assert_contains,
    load_reference,
    load_release_reference,
    sample_message,
)
from strom.tools.dev.gen_protocol_schema import RELEASE_FIELDS, RELEASE_VERSIONS

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


def _reference_message(api_key: int, kind: str) -> dict[str, Any] | None:
    try:
        return load_reference(api_spec(api_key).name + kind.capitalize())
    except FileNotFoundError:
        return None  # an API newer than the snapshot (or renamed since)


def _range_of(ref: dict[str, Any] | None) -> tuple[int, int] | None:
    if ref is None or ref["validVersions"] == "none":
        return None
    low, _, high = ref["validVersions"].partition("-")
    return int(low), int(high or low)


def _expected(ref: dict[str, Any], version: int) -> Any:
    flexible = _in(ref.get("flexibleVersions"), version)
    structs = {s["name"]: s for s in ref.get("commonStructs", [])}
    expected = _describe_ref(ref.get("fields", []), structs, version, flexible)
    return expected if flexible else (expected[0], [])


@pytest.mark.parametrize("kind", ["request", "response"])
def test_struct_layouts_match_reference(kind: str) -> None:
    """Every version is laid out as one of Kafka's own definitions says: the snapshot's or Kafka
    4.3.1's (which redefined some early-access versions); versions past the snapshot as 4.3.1's."""
    if not RELEASE_CLIENT_JAR.exists():
        pytest.skip("no Kafka 4.3.1 client jar in ../shared/jvm")
    checked = 0
    for api_key, version in all_versions(kind):
        name = api_spec(api_key).name
        if version > RELEASE_VERSIONS.get(name, 1 << 15) - 1:
            continue  # a 4.4 version: test_kafka_4_4_versions
        snapshot = _reference_message(api_key, kind)
        release = load_release_reference(name + kind.capitalize())
        mine = _describe_struct(message_struct(api_key, version, kind))
        candidates = [
            ref
            for ref in (snapshot, release)
            if ref is not None and (rng := _range_of(ref)) is not None and rng[0] <= version <= rng[1]
        ]
        snapshot_range = _range_of(snapshot)
        if snapshot_range is not None and version > snapshot_range[1]:
            candidates = [release] if release is not None else []
        assert candidates, f"{name} {kind} v{version}: no Kafka definition has this version"
        assert any(mine == _expected(ref, version) for ref in candidates), f"{name} {kind} v{version}"
        checked += 1
    assert checked > 300  # every version of every API


def test_version_ranges_match_reference() -> None:
    if not RELEASE_CLIENT_JAR.exists():
        pytest.skip("no Kafka 4.3.1 client jar in ../shared/jvm")
    for api_key, _ in all_versions("request"):
        spec = api_spec(api_key)
        for kind in ("request", "response"):
            snapshot = _range_of(_reference_message(api_key, kind))
            release = _range_of(load_release_reference(spec.name + kind.capitalize()))
            known = [r for r in (snapshot, release) if r is not None]
            mine = getattr(spec, kind)
            low = snapshot[0] if snapshot is not None else min(r[0] for r in known)
            high = RELEASE_VERSIONS.get(spec.name, max(r[1] for r in known))
            assert (mine.min_version, mine.max_version) == (low, high), spec.name


def test_kafka_4_4_versions() -> None:
    """ApiVersions v5 (KIP-1242) and TxnOffsetCommit v6 (KIP-1319), as Kafka 4.4 defines them: v4/v5
    plus the cluster and node the client means to reach; topic ids in place of topic names."""
    assert RELEASE_VERSIONS == {"ApiVersions": 5, "TxnOffsetCommit": 6}
    v4, v5 = (_describe_struct(message_struct(18, v, "request")) for v in (4, 5))
    assert v5 == (v4[0] + [("cluster_id", ("string", True, True)), ("node_id", "i")], v4[1])
    for v in (4, 5):
        assert _describe_struct(message_struct(18, v, "response")) == _expected(
            load_reference("ApiVersionsResponse"), 4
        )
    for kind in ("request", "response"):
        v5, v6 = (_describe_struct(message_struct(28, v, kind)) for v in (5, 6))
        *top, (topics_name, (array, compact, nullable, (kind_of, (topic_fields, tags)))) = v5[0]
        assert topics_name == "topics" and kind_of == "struct"
        assert topic_fields[0] == ("name", ("string", True, False))
        by_id = [("topic_id", "16s"), *topic_fields[1:]]
        assert v6 == ([*top, ("topics", (array, compact, nullable, ("struct", (by_id, tags))))], v5[1])
    added = {(api, kind) for api, kind, *_ in RELEASE_FIELDS}
    assert added == {("ApiVersions", "request"), ("TxnOffsetCommit", "request"), ("TxnOffsetCommit", "response")}

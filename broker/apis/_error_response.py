"""Building blocks of the APIs' error responses (Kafka's ``AbstractRequest.getErrorResponse``).

Every API module ends with ``error_response(request, code, message=None)``: the whole answer to
its request failing with one error code, the code on every topic, partition, group or resource the
request named and in the top-level ``error_code`` where the response version has one. Its users
are the connection handler (a handler that raised: ``UNKNOWN_SERVER_ERROR``, the connection kept)
and fault injection, which also uses an API's ``ERROR_LAYOUT`` (where its request and response list
topics and partitions) to answer part of a request with an error and merge the rest.

None instead of an answer where Kafka closes the connection: a Produce with acks=0 has no response
to carry the error, and an API whose response has no place for one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from construct import Container

from strom.protocol.connection import Request
from strom.protocol.schema import FieldSpec, api_spec, in_range


@dataclass(frozen=True)
class PartitionLayout:
    """Where an API's request and response list topics (and partitions), and the values an error
    entry carries besides its code (``top_defaults``: the top level of an answer built for errors
    alone)."""

    req_topics: str
    req_name: str
    req_parts: str | None
    req_index: str | None
    resp_topics: str
    resp_name: str
    resp_parts: str | None
    resp_index: str | None
    part_defaults: dict[str, Any] = field(default_factory=dict)
    topic_defaults: dict[str, Any] = field(default_factory=dict)
    top_defaults: dict[str, Any] = field(default_factory=dict)


# A topic of a request in error: its request entry (or its name, for an API without partitions),
# its name, and the partition entries in error.
FaultedTopic = Any


def has_field(api_key: int, version: int, name: str, response: bool = True) -> bool:
    """Whether the top level of the response (or request) has field ``name`` in ``version``."""
    spec = api_spec(api_key)
    fields = (spec.response if response else spec.request).fields
    return any(f.name == name and in_range(version, f.versions) for f in fields)


def has_field_in_any_version(api_key: int, name: str) -> bool:
    return any(f.name == name for f in api_spec(api_key).response.fields)


def skeleton(layout: PartitionLayout) -> dict[str, Any]:
    """The top level of an answer carrying only error entries."""
    return {"throttle_time_ms": 0, **layout.top_defaults}


_NO_TOPIC_ID = bytes(16)  # what a version without topic ids decodes the field as


def same_topic(resp_entry: dict[str, Any], req_entry: dict[str, Any], layout: PartitionLayout) -> bool:
    if req_entry.get("topic_id", _NO_TOPIC_ID) != _NO_TOPIC_ID and resp_entry.get("topic_id") is not None:
        same: bool = resp_entry["topic_id"] == req_entry["topic_id"]
    else:
        same = resp_entry.get(layout.resp_name) == req_entry.get(layout.req_name)
    return same


def add_error_entries(
    layout: PartitionLayout, out: dict[str, Any], faulted: list[FaultedTopic], code: int
) -> dict[str, Any]:
    """``out`` with an error entry for every faulted topic (API without partitions) or partition,
    added to the topic entries it already has."""
    resp_topics = list(out.get(layout.resp_topics) or [])
    for item in faulted:
        if layout.req_parts is None:
            name = item.get(layout.req_name)
            resp_topics.append({layout.resp_name: name, "error_code": code, **layout.topic_defaults})
            continue
        entry, name, parts = item
        errors = [{layout.resp_index: p[layout.req_index], "error_code": code, **layout.part_defaults} for p in parts]
        target = next((t for t in resp_topics if same_topic(t, entry, layout)), None)
        if target is None:
            target = {layout.resp_name: entry.get(layout.req_name)}
            if entry.get("topic_id", _NO_TOPIC_ID) != _NO_TOPIC_ID:
                target["topic_id"] = entry["topic_id"]
            resp_topics.append(target)
            target[layout.resp_parts] = errors
        else:
            target[layout.resp_parts] = list(target.get(layout.resp_parts) or []) + errors
    out[layout.resp_topics] = resp_topics
    return out


def every_topic(layout: PartitionLayout, body: Container) -> list[FaultedTopic]:
    """Every topic (and partition) the request names, as faulted entries."""
    out: list[FaultedTopic] = []
    for entry in body.get(layout.req_topics) or []:
        if layout.req_parts is None:
            out.append(entry)
            continue
        parts = list(entry.get(layout.req_parts) or [])
        if parts:
            out.append((entry, entry.get(layout.req_name), parts))
    return out


def partition_error_response(layout: PartitionLayout, request: Request, code: int) -> dict[str, Any]:
    """The error on every topic or partition the request names (``finish`` adds the top level)."""
    return add_error_entries(layout, skeleton(layout), every_topic(layout, request.body), code)


def top_level_error_response(api_key: int, code: int, **values: Any) -> dict[str, Any]:
    """The code in the top-level ``error_code``, with ``values`` (the other fields' error values)."""
    out: dict[str, Any] = {"throttle_time_ms": 0} if has_field_in_any_version(api_key, "throttle_time_ms") else {}
    out["error_code"] = code
    out.update(values)
    return out


def paired_error_response(api_key: int, request: Request, code: int) -> dict[str, Any] | None:
    """One error entry per entry of the request's list, in the response's list of entries that
    carry an error code (Kafka's per-entry answer, CreateAcls and the like); None when the
    response has no such list."""
    spec = api_spec(api_key)
    version = request.header.api_version
    req = next((f for f in spec.request.fields if f.is_array and in_range(version, f.versions)), None)
    resp = next(
        (
            f
            for f in spec.response.fields
            if f.is_array
            and f.is_struct
            and in_range(version, f.versions)
            and any(g.name == "error_code" for g in f.fields)
        ),
        None,
    )
    if req is None or resp is None:
        return None
    names = {g.name for g in resp.fields if in_range(version, g.versions) and not g.is_array}
    entries = []
    for item in request.body.get(req.name) or []:
        entry = {k: v for k, v in item.items() if k in names} if isinstance(item, dict) else {}
        entry["error_code"] = code
        entries.append(entry)
    return {"throttle_time_ms": 0, resp.name: entries}


def resource_error_response(request: Request, code: int, results: str, with_configs: bool = False) -> dict[str, Any]:
    """The code on every resource the request names, in the response list ``results`` (the config
    APIs); ``with_configs``: each with an empty list of configs (DescribeConfigs)."""
    entries = []
    for r in request.body.get("resources") or []:
        entry = {
            "resource_type": r["resource_type"],
            "resource_name": r["resource_name"],
            "error_code": code,
            "error_message": None,
        }
        if with_configs:
            entry["configs"] = []
        entries.append(entry)
    return {"throttle_time_ms": 0, results: entries}


def default_error_response(api_key: int, request: Request, code: int) -> dict[str, Any] | None:
    """The top-level code where the response version has one, else one entry per request entry."""
    if has_field(api_key, request.header.api_version, "error_code"):
        return top_level_error_response(api_key, code)
    return paired_error_response(api_key, request, code)


def finish(
    api_key: int, request: Request, out: dict[str, Any] | None, code: int, message: str | None
) -> dict[str, Any] | None:
    """The top-level ``error_code`` set where the response version has one, and ``message`` in
    every ``error_message`` field beside an entry's code."""
    if out is None:
        return None
    if has_field(api_key, request.header.api_version, "error_code"):
        out["error_code"] = code
    if message is not None:
        _set_messages(api_spec(api_key).response.fields, out, code, message)
    return out


def _set_messages(fields: tuple[FieldSpec, ...], obj: dict[str, Any], code: int, message: str) -> None:
    names = {f.name for f in fields}
    if "error_message" in names and obj.get("error_code") == code:
        obj["error_message"] = message
    for f in fields:
        if f.is_struct and f.name in obj:
            value = obj[f.name]
            for item in (value or []) if f.is_array else [value]:
                if isinstance(item, dict):
                    _set_messages(f.fields, item, code, message)

"""Error answers in Kafka's shape: the answer a request gets when it fails with one error code.

For every API the broker serves, the response Kafka's ``AbstractRequest.getErrorResponse`` builds:
the code on every topic, partition, group or resource the request named (and the top-level
``error_code`` where the response version has one). Two users: the connection handler, when a
handler raises unexpectedly (``UNKNOWN_SERVER_ERROR``, the connection kept), and fault injection
(``strom.testing.faults``), which answers part of a request with an error and merges the rest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from construct import Container

from strom.protocol.schema import api_spec, in_range

from .errors import DropConnection

@dataclass(frozen=True)
class _Layout:
    """Where an API's request and response list topics and partitions."""

    req_topics: str
    req_name: str
    req_parts: str | None
    req_index: str | None
    resp_topics: str
    resp_name: str
    resp_parts: str | None
    resp_index: str | None
    part_defaults: dict = field(default_factory=dict)
    topic_defaults: dict = field(default_factory=dict)


_LAYOUTS: dict[int, _Layout] = {
    0: _Layout("topic_data", "name", "partition_data", "index", "responses", "name", "partition_responses",
               "index", {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1}),
    1: _Layout("topics", "topic", "partitions", "partition", "responses", "topic", "partitions",
               "partition_index", {"high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                   "preferred_read_replica": -1, "aborted_transactions": None,
                                   "records": None}),
    2: _Layout("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
               "partition_index", {"timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []}),
    8: _Layout("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
               "partition_index"),
    23: _Layout("topics", "topic", "partitions", "partition", "topics", "topic", "partitions", "partition",
                {"leader_epoch": -1, "end_offset": -1}),
    47: _Layout("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                "partition_index"),
    19: _Layout("topics", "name", None, None, "topics", "name", None, None,
                topic_defaults={"num_partitions": -1, "replication_factor": -1, "configs": None}),
    37: _Layout("topics", "name", None, None, "results", "name", None, None),
    21: _Layout("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                "partition_index", {"low_watermark": -1}),
}

Selector = Callable[[str | None, int | None], bool]


def _has(api_key: int, version: int, name: str, response: bool = True) -> bool:
    spec = api_spec(api_key)
    fields = (spec.response if response else spec.request).fields
    return any(f.name == name and in_range(version, f.versions) for f in fields)


class ErrorAnswer:
    """Splits a request into the part a fault answers with an error and the part handled as usual."""

    def __init__(self, api_key: int, version: int, body: Container, code: int, select: Selector,
                 names_by_id: Callable[[bytes], str | None]):
        self.api_key, self.version, self.body, self.code = api_key, version, body, code
        self.select = select
        self.partition_level = False    # Metadata: the error on a partition, not the topic
        self.names_by_id = names_by_id
        self.faulted: list = []          # request topic entries (or names) answered with the error
        self.rest: Container | None = None  # the request without them; None: nothing left to handle

    def split(self) -> None:
        layout = _LAYOUTS.get(self.api_key)
        if layout is None or self.api_key == 3:
            self.rest = None
            return
        topics = self.body.get(layout.req_topics) or []
        keep, faulted = [], []
        for entry in topics:
            name = entry.get(layout.req_name)
            if not name and entry.get("topic_id"):  # Fetch v13+ names topics by id
                name = self.names_by_id(entry["topic_id"])
            if layout.req_parts is None:
                (faulted if self.select(name, None) else keep).append(entry)
                continue
            parts_keep, parts_fault = [], []
            for part in entry.get(layout.req_parts) or []:
                (parts_fault if self.select(name, part[layout.req_index]) else parts_keep).append(part)
            if parts_fault:
                faulted.append((entry, name, parts_fault))
            if parts_keep:
                keep.append(_copy(entry, {layout.req_parts: parts_keep}))
        self.faulted = faulted
        self.rest = _copy(self.body, {layout.req_topics: keep}) if keep else None

    def merge(self, response: dict | None) -> dict:
        """The handler's answer for the rest (None if it was not run) plus the error entries."""
        layout = _LAYOUTS.get(self.api_key)
        if layout is None:
            return self._whole(response)
        out = dict(response) if response is not None else self._skeleton()
        resp_topics = list(out.get(layout.resp_topics) or [])
        for item in self.faulted:
            if layout.req_parts is None:
                name = item.get(layout.req_name)
                resp_topics.append({layout.resp_name: name, "error_code": self.code, **layout.topic_defaults})
                continue
            entry, name, parts = item
            errors = [{layout.resp_index: p[layout.req_index], "error_code": self.code, **layout.part_defaults}
                      for p in parts]
            target = next((t for t in resp_topics if _same_topic(t, entry, layout)), None)
            if target is None:
                target = {layout.resp_name: entry.get(layout.req_name)}
                if entry.get("topic_id") is not None:
                    target["topic_id"] = entry["topic_id"]
                resp_topics.append(target)
                target[layout.resp_parts] = errors
            else:
                target[layout.resp_parts] = list(target.get(layout.resp_parts) or []) + errors
        out[layout.resp_topics] = resp_topics
        return out

    def _skeleton(self) -> dict:
        out: dict[str, Any] = {"throttle_time_ms": 0}
        if self.api_key == 1:
            out.update(error_code=0, session_id=0)
        if self.api_key == 47:
            out["error_code"] = 0
        return out

    def _whole(self, response: dict | None) -> dict:
        """APIs without a partition layout: the error where Kafka puts it."""
        key, v, body, code = self.api_key, self.version, self.body, self.code
        if key == 3 and response is not None:  # Metadata: the real answer, matching topics in error
            out = dict(response)
            topics = []
            for t in out.get("topics") or []:
                t = dict(t)
                if self.select(t.get("name"), None) and not self.partition_level:
                    t["error_code"], t["partitions"] = code, []
                else:
                    parts = [dict(p, error_code=code) if self.select(t.get("name"), p["partition_index"]) else p
                             for p in t.get("partitions") or []]
                    t["partitions"] = parts
                topics.append(t)
            out["topics"] = topics
            return out
        if key == 18:
            from .apis import api_versions
            return api_versions.body(code)
        if key == 20:
            names = ([{"name": n} for n in body.get("topic_names") or []] if v < 6
                     else [{"name": t.get("name"), "topic_id": t.get("topic_id")} for t in body.get("topics") or []])
            return {"throttle_time_ms": 0, "responses": [dict(n, error_code=code) for n in names]}
        if key == 15:
            return {"throttle_time_ms": 0, "groups": [{"group_id": g, "error_code": code, "group_state": "",
                                                       "protocol_type": "", "protocol_data": "", "members": []}
                                                      for g in body.get("groups") or []]}
        if key == 42:
            return {"throttle_time_ms": 0,
                    "results": [{"group_id": g, "error_code": code} for g in body.get("groups_names") or []]}
        if key in (32, 33, 44):
            results = [{"resource_type": r["resource_type"], "resource_name": r["resource_name"],
                        "error_code": code, "error_message": None, "configs": []}
                       for r in body.get("resources") or []]
            return {"throttle_time_ms": 0, ("results" if key == 32 else "responses"): results}
        if key == 10 and v >= 4:
            return {"throttle_time_ms": 0, "coordinators": [
                {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": None}
                for k in body.get("coordinator_keys") or []]}
        if key == 9 and v >= 8:
            return {"throttle_time_ms": 0, "groups": [{"group_id": g["group_id"], "topics": [], "error_code": code}
                                                      for g in body.get("groups") or []]}
        if key == 9 and v < 2:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                for p in t["partition_indexes"]]} for t in body.get("topics") or []]}
        if key == 43:  # ElectLeaders: each named partition; all of them (null): the top-level code
            named = body.get("topic_partitions")
            return {"throttle_time_ms": 0, "error_code": code if named is None else 0,
                    "replica_election_results": [
                        {"topic": t["topic"], "partition_result": [
                            {"partition_id": p, "error_code": code, "error_message": None} for p in t["partitions"]]}
                        for t in named or []]}
        if key in (24, 27, 28, 61):
            return _transaction_error_answer(key, v, body, code)
        if not _has(key, v, "error_code"):
            return self._paired(response)
        out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": code}
        if key == 10:
            out.update(node_id=-1, host="", port=-1)
        elif key == 11:
            out.update(generation_id=-1, protocol_name=None if v >= 7 else "", leader="", member_id="",
                       members=[])
        elif key == 22:
            out.update(producer_id=-1, producer_epoch=-1)
        elif key == 14:
            out.update(assignment=b"")
        return out


    def _paired(self, response: dict | None) -> dict:
        """Any other API (CreateAcls, ...): one error entry per entry of the request's list, in the
        response's list of entries that carry an error code (Kafka's per-entry answer)."""
        spec = api_spec(self.api_key)
        version = self.version
        req = next((f for f in spec.request.fields if f.is_array and in_range(version, f.versions)), None)
        resp = next((f for f in spec.response.fields if f.is_array and f.is_struct and in_range(version, f.versions)
                     and any(g.name == "error_code" for g in f.fields)), None)
        if req is None or resp is None:
            raise DropConnection()  # nowhere to put an error: the client sees a lost connection
        names = {g.name for g in resp.fields if in_range(version, g.versions) and not g.is_array}
        entries = []
        for item in self.body.get(req.name) or []:
            entry = {k: v for k, v in item.items() if k in names} if isinstance(item, dict) else {}
            entry["error_code"] = self.code
            entries.append(entry)
        return {"throttle_time_ms": 0, resp.name: entries}


def error_response(api_key: int, version: int, body: Container, code: int) -> dict | None:
    """The whole answer to a request that failed with ``code``, as Kafka's getErrorResponse builds
    it: ``code`` on every entity the request named and in the top-level ``error_code`` where the
    response version has one, error messages null. None where Kafka closes the connection
    instead: a Produce with acks=0 has no response to carry the error, and an API whose answer
    has no place for one."""
    if api_key == 0 and body.get("acks") == 0:
        return None
    answer = ErrorAnswer(api_key, version, body, code, lambda topic, partition: True, lambda topic_id: None)
    answer.split()
    try:
        out = answer.merge(None)
    except DropConnection:
        return None
    if _has(api_key, version, "error_code"):
        out["error_code"] = code
    if api_key == 1 and version >= 13:  # Fetch v13+: the top-level code alone, as Kafka answers
        out["responses"] = []
    return out


def _topic_names(body: Container) -> set[str]:
    """Topics a request without a partition layout names (DeleteTopics, DescribeConfigs, the
    transaction APIs, ...): the names in its top-level lists of topics or resources."""
    out: set[str] = set()
    for key, value in body.items():
        if not isinstance(value, list) or not ("topic" in key or key == "resources"):
            continue
        for item in value:
            if isinstance(item, str):
                out.add(item)
            elif isinstance(item, dict):
                out.update(item[k] for k in ("name", "topic", "resource_name") if item.get(k))
    return out


def _same_topic(resp_entry: dict, req_entry: dict, layout: _Layout) -> bool:
    if req_entry.get("topic_id") is not None and resp_entry.get("topic_id") is not None:
        return resp_entry["topic_id"] == req_entry["topic_id"]
    return resp_entry.get(layout.resp_name) == req_entry.get(layout.req_name)


def _copy(entry: Container, changes: dict) -> Container:
    out = Container(entry)
    out.update(changes)
    return out


def _transaction_error_answer(key: int, v: int, body, code: int) -> dict:
    """The transaction APIs without a partition layout: the error on every partition asked for."""
    def parts(indexes, name="error_code", **extra):
        return [{"partition_index": p, name: code, **extra} for p in indexes or []]
    if key == 24 and v >= 4:
        return {"throttle_time_ms": 0, "error_code": code, "results_by_transaction": []}
    if key == 24:
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": parts(t["partitions"], "partition_error_code")}
            for t in body.get("v3_and_below_topics") or []]}
    if key == 27:
        return {"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": parts(t["partition_indexes"])} for t in m["topics"] or []]}
            for m in body.get("markers") or []]}
    if key == 28:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": parts([p["partition_index"] for p in t["partitions"] or []])}
            for t in body.get("topics") or []]}
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": parts(t["partition_indexes"], error_message=None, active_producers=[])}
        for t in body.get("topics") or []]}

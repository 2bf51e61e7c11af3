"""Differential testing: the same raw request frames to the reference Kafka 4.0 and to Strom.

A scenario (``scenarios.py``) is a named list of steps; a step is one request (API key, version,
body) encoded with ``strom.protocol.codec`` and sent on a plain socket. Every step's answer is
decoded with the same codec, turned into plain data, normalised (what legitimately differs
between two brokers: node, cluster, topic and member ids, throttle times, wall-clock
timestamps; an empty error message counts as none) and compared field by field, error messages
included: clients and libraries match on Kafka's wording. Lists of named things (topics,
partitions, configs, groups) are compared as maps keyed by their name, so order never counts.

The outcome of a step is its decoded body, ``"<closed>"`` when the broker closed the
connection (what Kafka does for a version it does not serve), ``"<no response>"`` when it sent
none (acks=0 produce), or ``"<timeout>"``.

Placeholders inside a step's body are filled per broker before encoding:

* ``"{s}"`` inside any string: the scenario's own short name (its topics and groups use it);
* ``"@tid:TOPIC"``: the topic id this broker gave TOPIC (looked up with Metadata v12);
* ``"@batch:SEQ"``: two records of the idempotent producer captured as ``$pid``/``$epoch``,
  from sequence SEQ (each broker hands out its own producer id); ``"@txnbatch:SEQ"`` the same as
  a transactional batch;
* ``"$NAME"``: a value captured from an earlier step's answer on the same broker
  (``capture={"NAME": "path.to.field"}``), e.g. the member id JoinGroup handed out.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.codec import decode_response
from strom.protocol.connection import CLIENT, NEED_DATA, BadResponse, Connection, ConnectionClosed, FrameTooLarge
from strom.protocol.errors import EncodeError
from strom.protocol.records.batch import Record, build_batch, iter_records
from strom.protocol.records.legacy import iter_message_set
from strom.protocol.schema import ApiKey, FieldSpec, api_spec, in_range

CLIENT_ID = "strom-differential"
READ_TIMEOUT_S = 15.0
CLOSED = "<closed>"
NO_RESPONSE = "<no response>"
TIMEOUT = "<timeout>"


@dataclass(frozen=True)
class Step:
    """One request of a scenario."""

    api: int
    version: int
    body: Mapping[str, Any]
    capture: Mapping[str, str] = field(default_factory=dict)
    no_response: bool = False  # acks=0: the broker must send nothing
    raw: bytes | None = None  # a hand-made frame (without size prefix) instead of the codec's
    compare: bool = True  # False: a setup step, its answer is only checked for errors
    pause_s: float = 0.0  # sleep before sending (a coordinator settling, a retention pass)
    until_ok: bool = False  # setup: resend (up to 5 s) while the answer carries an error code
    until_has: str | None = None  # resend (up to 5 s) until this text is in the answer's repr
    until_lacks: str | None = None  # resend (up to 5 s) while this text is in the answer's repr


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: tuple[Step, ...]
    note: str = ""


@dataclass(frozen=True)
class Difference:
    scenario: str
    step: int
    path: str
    kafka: Any
    strom: Any

    @property
    def where(self) -> str:
        return f"{self.scenario}#{self.step}:{self.path}"


# --------------------------------------------------------------------------- talking to a broker


class Target:
    """One broker: a connection (reopened after the broker closes it) and what was learned of it."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name, self.host, self.port = name, host, port
        self.sock: socket.socket | None = None
        self.conn = Connection(CLIENT, 0x7FFFFFFF, CLIENT_ID, 1)
        self.node_id: int | None = None
        self.topic_ids: dict[str, bytes] = {}

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=READ_TIMEOUT_S)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # a fresh connection: nothing buffered or in flight; correlation ids go on
            self.conn = Connection(CLIENT, 0x7FFFFFFF, CLIENT_ID, self.conn.last_correlation_id + 1)
        return self.sock

    def _next_event(self, raw: bool = False) -> Any:
        """The next response (a RawFrame with ``raw``), or CLOSED / TIMEOUT (the socket closed)."""
        assert self.sock is not None
        self.conn.raw_frames = raw
        try:
            while (event := self.conn.next_event()) is NEED_DATA:
                self.conn.receive_data(self.sock.recv(1 << 16))
        except TimeoutError:
            self.close()
            return TIMEOUT
        except OSError:
            self.close()
            return CLOSED
        finally:
            self.conn.raw_frames = False
        if isinstance(event, (ConnectionClosed, FrameTooLarge)):
            self.close()
            return CLOSED
        return event

    def call(
        self, api: int, version: int, body: Mapping[str, Any], *, raw: bytes | None = None, no_response: bool = False
    ) -> Any:
        """The decoded answer to one request, or one of CLOSED / NO_RESPONSE / TIMEOUT."""
        try:
            sock = self._connect()
        except OSError:
            return CLOSED
        if raw is not None:
            frame = Connection.send_raw(raw)[0]  # a hand-made frame carries its own correlation id
        else:
            try:
                frame = self.conn.send_request(api, version, dict(body), expect_response=not no_response)
            except EncodeError as exc:  # a value an earlier step should have given is missing
                return f"<not sent: {exc}>"
        cid = self.conn.last_correlation_id
        try:
            sock.sendall(frame)
        except OSError:
            self.close()
            return CLOSED
        if no_response:
            # Nothing may come back: an ApiVersions v0 sent behind it must be the next answer.
            try:
                sock.sendall(self.conn.send_request(ApiKey.API_VERSIONS, 0, {}))
            except OSError:
                self.close()
                return CLOSED
            probe = self.conn.last_correlation_id
            event = self._next_event()
            if isinstance(event, str):
                return event
            return (
                NO_RESPONSE
                if event.correlation_id == probe
                else f"<answered with correlation id {event.correlation_id}>"
            )
        if raw is not None:
            event = self._next_event(raw=True)
            if isinstance(event, str):
                return event
            (cid,) = struct.unpack_from(">i", raw, 4)
            if api == ApiKey.API_VERSIONS:
                version = 0  # an unknown ApiVersions version is answered in v0
            try:
                got, decoded = decode_response(api, version, event.data)
            except Exception as exc:
                self.close()
                return f"<undecodable: {type(exc).__name__}>"
            if got != cid:
                self.close()
                return f"<correlation id {got}, expected {cid}>"
            return decoded
        event = self._next_event()
        if isinstance(event, str):
            return event
        if isinstance(event, BadResponse):
            self.close()
            if event.api_key is None:
                return f"<correlation id {event.correlation_id}, expected {cid}>"
            return f"<undecodable: {type(event.error).__name__}>"
        return event.body

    def learn(self) -> None:
        """This broker's node id (from Metadata)."""
        meta = self.call(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
        self.node_id = meta.controller_id if meta.controller_id >= 0 else meta.brokers[0].node_id
        for b in meta.brokers:
            if b.port == self.port:
                self.node_id = b.node_id

    def topic_id(self, topic: str) -> bytes:
        if topic not in self.topic_ids:
            meta = self.call(ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
            if isinstance(meta, str) or not meta.topics:
                return bytes(16)
            tid = meta.topics[0].topic_id
            tid = tid.bytes if hasattr(tid, "bytes") else bytes(tid)
            if tid == bytes(16):
                return tid
            self.topic_ids[topic] = tid
        return self.topic_ids[topic]


def served_within(release: str) -> dict[int, tuple[int, int]]:
    """The versions Strom serves that Kafka ``release`` ("4.0") also knows: Strom's lowest (it keeps
    old versions Kafka dropped, FINDINGS.md F1) up to the release's highest; APIs the release lacks
    are left out. A reference is sent only what it can answer; newer versions go to a newer one."""
    from strom.broker.apis import SUPPORTED_RANGE
    from strom.testing.faults import kafka_releases

    known = kafka_releases()[release]
    return {
        api: (lo, min(hi, known[api][1]))
        for api, (lo, hi) in SUPPORTED_RANGE.items()
        if api in known and lo <= min(hi, known[api][1])
    }


# --------------------------------------------------------------------------- placeholders


def _fill(value: Any, target: Target, short: str, captured: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        if value.startswith("@tid:"):
            return target.topic_id(value[5:].replace("{s}", short))
        if value.startswith("$") and value[1:] in captured:
            got = captured[value[1:]]
            return str(got) if value.endswith("_str") else got
        if value.startswith("@batch:"):
            return _idempotent_batch(int(value[7:]), captured)
        if value.startswith("@txnbatch:"):
            return _idempotent_batch(int(value[10:]), captured, transactional=True)
        return value.replace("{s}", short)
    if isinstance(value, Mapping):
        return {k: _fill(v, target, short, captured) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_fill(v, target, short, captured) for v in value]
    return value


def _idempotent_batch(sequence: int, captured: Mapping[str, Any], transactional: bool = False) -> bytes:
    """Two records of the producer InitProducerId gave this broker (``$pid``/``$epoch``) from ``sequence``."""
    records = [Record(i, i, b"k%d" % (sequence + i), b"seq-%d" % (sequence + i)) for i in range(2)]
    return build_batch(
        records,
        base_timestamp=1_700_000_000_000 + sequence,
        producer_id=captured.get("pid", -1),
        producer_epoch=captured.get("epoch", -1),
        base_sequence=sequence,
        is_transactional=transactional,
    )


def _lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


# --------------------------------------------------------------------------- plain data


def plain(value: Any) -> Any:
    """A decoded construct Container as dicts, lists, ints, strs and bytes."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    if hasattr(value, "bytes") and not isinstance(value, (bytes, bytearray)):
        return value.bytes  # uuid.UUID
    return value


def present(value: Any, fields: tuple[FieldSpec, ...], version: int) -> Any:
    """Plain data with only the fields the answer's version has (the codec fills the others with defaults)."""
    if isinstance(value, str):
        return value
    out = {}
    for f in fields:
        if not in_range(version, f.versions) or f.name not in value:
            continue
        v = value[f.name]
        if f.fields and v is not None:
            v = [present(x, f.fields, version) for x in v] if f.is_array else present(v, f.fields, version)
        else:
            v = plain(v)
        out[f.name] = v
    return out


def settling(step: Step, answer: Any) -> bool:
    """True while a step's answer is not yet the settled one it waits for (Kafka's broker applies
    the controller's metadata changes a little after the admin request returned)."""
    text = repr(answer)
    return bool(
        (step.until_ok and has_error(answer))
        or (step.until_has and step.until_has not in text)
        or (step.until_lacks and step.until_lacks in text)
    )


def has_error(answer: Any) -> bool:
    """True when an answer is not a decoded body or carries a non-zero error code anywhere."""
    if isinstance(answer, str):
        return True
    if isinstance(answer, dict):
        return any((k == "error_code" and v != 0) or has_error_in(v) for k, v in answer.items())
    return has_error_in(answer)


def has_error_in(value: Any) -> bool:
    if isinstance(value, dict):
        return has_error(value)
    if isinstance(value, list):
        return any(has_error_in(v) for v in value)
    return False


def short_name(scenario: str) -> str:
    """A topic/group-safe short name for a scenario (Kafka names allow [a-zA-Z0-9._-])."""
    return re.sub(r"[^a-zA-Z0-9._-]", "-", scenario)[:200]


def run_scenario(target: Target, scenario: Scenario) -> list[Any]:
    """Every step's answer, plain, in order (not yet normalised)."""
    short = "x-" + short_name(scenario.name)
    captured: dict[str, Any] = {}
    answers: list[Any] = []
    for step in scenario.steps:
        if step.pause_s:
            time.sleep(step.pause_s)
        body = _fill(step.body, target, short, captured)
        for _attempt in range(50):
            try:
                answer = target.call(step.api, step.version, body, raw=step.raw, no_response=step.no_response)
            except TimeoutError:
                target.close()
                answer = TIMEOUT
            answer = (
                present(answer, api_spec(step.api).response.fields, 0 if step.raw else step.version)
                if not isinstance(answer, str)
                else answer
            )
            if not settling(step, answer):
                break
            time.sleep(0.1)
        for name, path in step.capture.items():
            try:
                captured[name] = _lookup(answer, path)
            except (KeyError, IndexError, TypeError, ValueError):
                pass
        answers.append(answer)
    return answers


def run_all(target: Target, scenarios: Iterable[Scenario], out: dict[str, list[Any]]) -> None:
    for sc in scenarios:
        out[sc.name] = run_scenario(target, sc)


def run_both(
    kafka: Target, strom: Target, scenarios: list[Scenario]
) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """Run the scenarios on both brokers at once (one thread each), in the same order."""
    for t in (kafka, strom):
        t.learn()
    results: tuple[dict[str, list[Any]], dict[str, list[Any]]] = ({}, {})
    errors: list[BaseException] = []

    def worker(t: Target, out: dict[str, list[Any]]) -> None:
        try:
            run_all(t, scenarios, out)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t, out)) for t, out in zip((kafka, strom), results, strict=False)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


# --------------------------------------------------------------------------- normalising


# Keys whose value is free or wall-clock by nature: dropped before comparing. Error messages are
# compared (clients and libraries match on Kafka's wording); an empty one counts as none, and the
# ones that legitimately differ are findings in FINDINGS.md, as every other difference.
DROP_KEYS = {"throttle_time_ms", "log_append_time_ms", "_tagged"}
MESSAGE_KEYS = {"error_message", "batch_index_error_message"}
# Times a broker takes from its own clock (a transaction's start, a marker's timestamp): the
# scenarios write timestamps from 2023 (BASE_TS), so one after mid-2025 is the broker's clock.
WALL_CLOCK_KEYS = {"timestamp", "last_timestamp", "transaction_start_time_ms"}
WALL_CLOCK_FLOOR = 1_750_000_000_000


def _clock(value: Any) -> Any:
    return "<wall-clock>" if isinstance(value, int) and value >= WALL_CLOCK_FLOOR else value


# Node ids: the broker's own id becomes "<self>".
NODE_KEYS = {"node_id", "leader_id", "controller_id", "broker_id", "coordinator_key_node", "replica_id"}
NODE_LIST_KEYS = {"replica_nodes", "isr_nodes", "offline_replicas", "eligible_leader_replicas", "last_known_elr"}
# Arrays of things compared as maps keyed by the first of these keys they have.
KEY_FIELDS = (
    "name",
    "topic",
    "partition_index",
    "partition",
    "group_id",
    "resource_name",
    "api_key",
    "key",
    "node_id",
    "broker_id",
    "member_id",
    "topic_id",
    "index",
    "config_name",
)


def _record_list(data: Any) -> Any:
    if not data:
        return data
    data = bytes(data)
    if len(data) > 16 and data[16] == 2:
        try:
            return [
                {
                    "offset": r.offset,
                    "timestamp": _clock(r.timestamp),
                    "key": r.key,
                    "value": r.value,
                    "headers": [list(h) for h in r.headers],
                }
                for r in iter_records(data)
            ]
        except Exception as exc:
            return f"<records not decodable: {type(exc).__name__}>"
    try:
        return [
            {"offset": m.offset, "timestamp": m.timestamp, "key": m.key, "value": m.value, "magic": m.magic}
            for m in iter_message_set(data)
        ]
    except Exception as exc:
        return f"<message set not decodable: {type(exc).__name__}>"


def normalise(value: Any, target: Target, key: str | None = None) -> Any:
    if isinstance(value, dict):
        if value.get("resource_type") == 4 and value.get("resource_name") == str(target.node_id):
            value = {**value, "resource_name": "<self>"}
        out = {}
        for k, v in value.items():
            if k in DROP_KEYS:
                continue
            out[k] = normalise(v, target, k)
        return out
    if isinstance(value, list):
        if key in NODE_LIST_KEYS:
            return ["<self>" if v == target.node_id else v for v in value]
        items = [normalise(v, target, None) for v in value]
        return _keyed(items)
    if key in MESSAGE_KEYS and value == "":
        return None
    if key in NODE_KEYS and isinstance(value, int) and value == target.node_id and value >= 0:
        return "<self>"
    if key in ("host",) and value == target.host:
        return "<self>"
    if key in ("port",) and value == target.port:
        return "<self>"
    if key == "cluster_id" and value:
        return "<cluster>"
    if key in ("topic_id",) and isinstance(value, (bytes, bytearray)):
        return "<zero>" if bytes(value) == bytes(16) else "<topic-id>"
    if key in ("member_id", "leader", "given_member_id") and isinstance(value, str) and value:
        return "<member>"
    if key == "log_dir" and isinstance(value, str) and value:
        return "<log-dir>"
    if key in ("total_bytes", "usable_bytes") and isinstance(value, int) and value > 0:
        return "<disk-bytes>"
    if key == "session_id" and isinstance(value, int) and value != 0:
        return "<session>"
    if key in ("producer_id",) and isinstance(value, int) and value >= 0:
        return "<producer-id>"
    if key in WALL_CLOCK_KEYS:
        return _clock(value)
    if key == "records" and isinstance(value, (bytes, bytearray)):
        return _record_list(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex() if len(value) <= 64 else f"<{len(value)} bytes>"
    return value


def _keyed(items: list[Any]) -> Any:
    if not items or not all(isinstance(i, dict) for i in items):
        return items
    named = False
    for k in KEY_FIELDS:
        if all(k in i for i in items):
            keys = [_hashable(i[k]) for i in items]
            if len(set(keys)) == len(keys):
                return {f"[{k}={kv}]": i for kv, i in zip(keys, items, strict=False)}
            named = True
    if named:  # named things whose names normalise alike (member ids): order still never counts
        return sorted(items, key=repr)
    return items


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (str, int, bool, type(None))) else repr(v)


# --------------------------------------------------------------------------- comparing


def compare(a: Any, b: Any, path: str = "") -> Iterable[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in a:
                yield sub, "<absent>", _short(b[k])
            elif k not in b:
                yield sub, _short(a[k]), "<absent>"
            else:
                yield from compare(a[k], b[k], sub)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from compare(x, y, f"{path}[{i}]")
        return
    if a != b:
        yield path, _short(a), _short(b)


def _short(v: Any, limit: int = 300) -> Any:
    text = repr(v)
    return v if len(text) <= limit else text[:limit] + "..."


def differences(
    scenarios: list[Scenario],
    kafka_raw: Mapping[str, list[Any]],
    strom_raw: Mapping[str, list[Any]],
    kafka: Target,
    strom: Target,
) -> list[Difference]:
    found: list[Difference] = []
    for sc in scenarios:
        for i, (step, ka, sa) in enumerate(zip(sc.steps, kafka_raw[sc.name], strom_raw[sc.name], strict=False)):
            if not step.compare:
                continue
            ka_n, sa_n = normalise(ka, kafka), normalise(sa, strom)
            for path, kv, sv in compare(ka_n, sa_n):
                found.append(Difference(sc.name, i, path or "(answer)", kv, sv))
    return found


# --------------------------------------------------------------------------- findings


@dataclass
class Finding:
    ident: str
    title: str
    patterns: list[str]
    used: int = 0

    def matches(self, diff: Difference) -> bool:
        return any(glob(p).fullmatch(diff.where) for p in self.patterns)


def glob(pattern: str) -> re.Pattern[str]:
    """``*`` matches anything; every other character (``[`` of a keyed path too) only itself."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


FINDING_HEAD = re.compile(r"^### (F\d+): (.+)$")
FINDING_MATCH = re.compile(r"^match: `(.+)`\s*$")


def parse_findings(text: str) -> list[Finding]:
    """``### Fn: title`` headings, each followed by ``match: `SCENARIO#STEP:PATH glob` `` lines."""
    findings: list[Finding] = []
    for line in text.splitlines():
        head = FINDING_HEAD.match(line)
        if head:
            findings.append(Finding(head.group(1), head.group(2).strip(), []))
            continue
        m = FINDING_MATCH.match(line)
        if m and findings:
            findings[-1].patterns.append(m.group(1))
    return findings


def explain(diffs: list[Difference], findings: list[Finding]) -> list[tuple[Difference, Finding | None]]:
    out = []
    for d in diffs:
        hit = next((f for f in findings if f.matches(d)), None)
        if hit:
            hit.used += 1
        out.append((d, hit))
    return out

"""Fault injection for tests: wrong answers, delays and dropped connections on request, on purpose.

A test (through ``strom.testing``, the control endpoint or ``strom control``) adds rules to the
broker's :class:`RequestFaults` (:func:`request_faults`); each
rule matches requests by API, and optionally by client id and by topic (and partition), and does
one thing to the next ``count`` matching requests:

- ``error``: answer with a Kafka error code. For APIs whose requests list topics and partitions
  (Produce, Fetch, ListOffsets, OffsetCommit, ...) only the matching partitions get the error; the
  rest of the request is handled as usual and the answers are merged, as a real broker that lost
  leadership of one partition answers. Other APIs get the error where Kafka puts it (top level or
  per group/resource). The handler never sees the faulted part: a faulted Produce appends nothing.
- ``delay_ms``: hold the request that long before handling it.
- ``drop``: close the connection, ``"before"`` handling the request or ``"after"`` (the request
  took effect, its answer is lost: what an idempotent producer's retry must cope with).

Besides rules: ``pause()`` holds every request until ``resume()`` and stops the broker's
trio clock when it runs on a ``PausableClock`` (``strom.testing.clock``: the embedded broker and
``strom serve`` with a control endpoint do), so no timer fires while paused; ``cap_versions("2.8")`` makes
ApiVersions advertise what that Kafka release did (``kafka_releases.json``, the ApiVersions
answers of real brokers) and closes connections that use a version outside it, except that an
ApiVersions request above the release's ApiVersions version gets UNSUPPORTED_VERSION in v0,
listing only ApiVersions' own range (Kafka 2.4+, KIP-511) or nothing (older releases), as that
Kafka answers an ApiVersions version it does not know; ``record()``
keeps (api, version, client id) of every request for a test to read.

Cost when unused: none. The injector is a request interceptor of the broker's dispatcher
(``strom.broker.server.dispatch``) only while a rule, a pause, a cap or recording is active, and
removes itself when the last one ends.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

import trio
from construct import Container

from strom.broker.apis import HANDLERS
from strom.broker.apis._error_response import PartitionLayout, add_error_entries, skeleton
from strom.broker.errors import (  # raised here, acted on by the dispatcher
    AnswerInVersion,
    DropConnection,
)
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey, api_spec

from .clock import MAX_PAUSE_S, PausableClock

if TYPE_CHECKING:
    from strom.broker.server.dispatch import Proceed, RequestDispatcher

log = logging.getLogger("strom.faults")

RELEASES_PATH = Path(__file__).with_name("kafka_releases.json")
MAX_DELAY_MS = 600_000
RECORD_LIMIT = 100_000


Selector = Callable[[str | None, int | None], bool]


class ErrorAnswer:
    """Splits a request into the part a fault answers with an error and the part handled as usual.

    An API whose module has an ``ERROR_LAYOUT`` (its request lists topics and partitions) gets the
    error on the matching partitions (topics) only; Metadata gets its real answer with the matching
    topics (``partition_level``: partitions) in error; any other API the module's whole
    ``error_response``."""

    def __init__(
        self,
        module: ModuleType,
        request: Request,
        code: int,
        select: Selector,
        names_by_id: Callable[[bytes], str | None],
    ) -> None:
        self.module, self.request, self.code = module, request, code
        self.layout: PartitionLayout | None = getattr(module, "ERROR_LAYOUT", None)
        self.select = select
        self.partition_level = False  # Metadata: the error on a partition, not the topic
        self.names_by_id = names_by_id
        self.faulted: list[Any] = []  # request topic entries (or names) answered with the error
        self.rest: Container | None = None  # the request without them; None: nothing left to handle

    def split(self) -> None:
        layout = self.layout
        if layout is None:
            self.rest = None
            return
        keep, faulted = [], []
        for entry in self.request.body.get(layout.req_topics) or []:
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
        self.rest = _copy(self.request.body, {layout.req_topics: keep}) if keep else None

    def merge(self, response: dict | None) -> dict:
        """The handler's answer for the rest (None if it was not run) plus the error entries;
        DropConnection where the API's answer has no place for the error."""
        if self.request.header.api_key == ApiKey.METADATA and response is not None:
            return self._metadata(response)
        if self.layout is None:
            out = self.module.error_response(self.request, self.code)
            if out is None:
                raise DropConnection()
            return out
        out = dict(response) if response is not None else skeleton(self.layout)
        return add_error_entries(self.layout, out, self.faulted, self.code)

    def _metadata(self, response: dict) -> dict:
        """Metadata: the real answer, matching topics (or partitions) in error."""
        out = dict(response)
        topics = []
        for t in out.get("topics") or []:
            t = dict(t)
            if self.select(t.get("name"), None) and not self.partition_level:
                t["error_code"], t["partitions"] = self.code, []
            else:
                t["partitions"] = [
                    dict(p, error_code=self.code) if self.select(t.get("name"), p["partition_index"]) else p
                    for p in t.get("partitions") or []
                ]
            topics.append(t)
        out["topics"] = topics
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


def _copy(entry: Container, changes: dict) -> Container:
    out = Container(entry)
    out.update(changes)
    return out


@cache
def kafka_releases() -> dict[str, dict[int, tuple[int, int]]]:
    """Release name ("2.8") -> {api_key: (min, max)}, as real brokers of that release answered
    ApiVersions."""
    raw = json.loads(RELEASES_PATH.read_text())
    return {name: {int(k): (v[0], v[1]) for k, v in apis.items()} for name, apis in raw.items()}


def api_key_of(api: int | str) -> int:
    """An API by key (0), Kafka's name ("Produce", "OffsetCommit") or ApiKey name ("OFFSET_COMMIT")."""
    if isinstance(api, int):
        return int(ApiKey(api))
    text = str(api).strip()
    if text.lstrip("-").isdigit():
        return int(ApiKey(int(text)))
    for key in ApiKey:
        if text.upper() == key.name or text == api_spec(key).name or text.lower() == api_spec(key).name.lower():
            return int(key)
    raise ValueError(f"unknown API {api!r}: use Kafka's name (Produce, Fetch, ...) or its key")


def error_code_of(error: int | str) -> int:
    """An error by code (6) or Kafka's name ("NOT_LEADER_OR_FOLLOWER")."""
    if isinstance(error, int):
        return int(ErrorCode(error))
    text = str(error).strip()
    if text.lstrip("-").isdigit():
        return int(ErrorCode(int(text)))
    try:
        return int(ErrorCode[text.upper()])
    except KeyError:
        raise ValueError(
            f"unknown error {error!r}: use Kafka's name (NOT_LEADER_OR_FOLLOWER, ...) or its code"
        ) from None


@dataclass
class Fault:
    """One rule. ``count`` None: every matching request until cleared."""

    id: int
    api_key: int | None
    error: int | None = None
    delay_ms: int = 0
    drop: str | None = None
    count: int | None = 1
    topic: str | None = None
    partition: int | None = None
    client_id: str | None = None
    hits: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "api": api_spec(self.api_key).name if self.api_key is not None else None,
            "error": ErrorCode(self.error).name if self.error is not None else None,
            "delay_ms": self.delay_ms,
            "drop": self.drop,
            "remaining": self.count,
            "topic": self.topic,
            "partition": self.partition,
            "client_id": self.client_id,
            "hits": self.hits,
        }


# ----------------------------------------------------------------------------- the injector
class DispatchingServer(Protocol):
    """What fault injection needs of a broker: its request dispatcher."""

    @property
    def dispatcher(self) -> RequestDispatcher: ...


_injectors: WeakKeyDictionary[RequestDispatcher, RequestFaults] = WeakKeyDictionary()


def request_faults(server: DispatchingServer) -> RequestFaults:
    """The fault injector of ``server``, made on first use (one per broker, whoever asks: a test,
    the control endpoint, the embedded broker)."""
    dispatcher = server.dispatcher
    injector = _injectors.get(dispatcher)
    if injector is None:
        injector = _injectors[dispatcher] = RequestFaults(dispatcher)
    return injector


class RequestFaults:
    """Rules and switches for one broker, a request interceptor of its dispatcher while any is in
    force. Call its methods on the broker's trio thread."""

    def __init__(self, dispatcher: RequestDispatcher) -> None:
        self.dispatcher = dispatcher
        self.rules: list[Fault] = []
        self._ids = itertools.count(1)
        self._resumed: trio.Event | None = None
        self.cap_name: str | None = None
        self.cap: dict[int, tuple[int, int]] | None = None
        self.recording: deque | None = None

    # ---- switches ---------------------------------------------------------------
    def _update(self) -> None:
        active = bool(self.rules) or self._resumed is not None or self.cap is not None or self.recording is not None
        if active:
            self.dispatcher.add_interceptor(self)
        else:
            self.dispatcher.remove_interceptor(self)

    @property
    def installed(self) -> bool:
        """Whether the broker's requests pass through this injector now."""
        return self in self.dispatcher.interceptors

    def add(
        self,
        api: int | str | None,
        *,
        error: int | str | None = None,
        delay_ms: int = 0,
        drop: str | None = None,
        count: int | None = 1,
        topic: str | None = None,
        partition: int | None = None,
        client_id: str | None = None,
    ) -> Fault:
        if drop not in (None, "before", "after"):
            raise ValueError(f"drop={drop!r}: use 'before' or 'after'")
        if error is None and not delay_ms and drop is None:
            raise ValueError("a fault needs an error, a delay or a drop")
        if not 0 <= int(delay_ms) <= MAX_DELAY_MS:
            raise ValueError(f"delay_ms={delay_ms}: between 0 and {MAX_DELAY_MS}")
        if count is not None and int(count) < 1:
            raise ValueError(f"count={count}: at least 1, or None for every request")
        if partition is not None and topic is None:
            raise ValueError("a partition needs its topic")
        fault = Fault(
            next(self._ids),
            api_key_of(api) if api is not None else None,
            error_code_of(error) if error is not None else None,
            int(delay_ms),
            drop,
            None if count is None else int(count),
            topic,
            None if partition is None else int(partition),
            client_id,
        )
        self.rules.append(fault)
        log.info("fault added %s", fault.describe())
        self._update()
        return fault

    def remove(self, fault_id: int) -> bool:
        before = len(self.rules)
        self.rules = [r for r in self.rules if r.id != fault_id]
        self._update()
        return len(self.rules) != before

    def clear(self) -> None:
        """Remove every rule, lift a version cap, resume and stop recording."""
        self.rules = []
        self.cap = self.cap_name = None
        self.dispatcher.api_versions.restrict(None)
        self.recording = None
        self.resume()

    def pause(self) -> None:
        """Hold every request until ``resume()``; on a broker run with a ``PausableClock`` (the
        embedded broker, ``strom serve``) its trio time stops too, so no timer fires meanwhile
        (group sessions, flush, retention, cleaner, offset expiry), as under SIGSTOP."""
        if self._resumed is None:
            self._resumed = trio.Event()
            clock = trio.lowlevel.current_clock()
            if isinstance(clock, PausableClock):
                clock.pause()
            log.info("broker paused: requests are held and timers stopped until resumed (at most %.0f s)", MAX_PAUSE_S)
        self._update()

    def resume(self) -> None:
        if self._resumed is not None:
            clock = trio.lowlevel.current_clock()
            if isinstance(clock, PausableClock):
                clock.resume()
            self._resumed.set()
            self._resumed = None
            log.info("broker resumed")
        self._update()

    @property
    def paused(self) -> bool:
        return self._resumed is not None

    def cap_versions(self, release: str | None) -> None:
        """Advertise and accept only what Kafka ``release`` did (None: lift the cap)."""
        if release is None:
            self.cap = self.cap_name = None
            self.dispatcher.api_versions.restrict(None)
        else:
            releases = kafka_releases()
            if str(release) not in releases:
                raise ValueError(f"unknown Kafka release {release!r}; known: {', '.join(releases)}")
            self.cap_name, self.cap = str(release), releases[str(release)]
            self.dispatcher.api_versions.restrict(self.cap)  # what ApiVersions advertises
            log.info("API versions capped at Kafka %s", release)
        self._update()

    def record(self, on: bool = True) -> None:
        self.recording = deque(maxlen=RECORD_LIMIT) if on else None
        self._update()

    def recorded(self) -> list[dict]:
        return list(self.recording or ())

    def status(self) -> dict[str, Any]:
        return {
            "rules": [r.describe() for r in self.rules],
            "paused": self.paused,
            "version_cap": self.cap_name,
            "recording": self.recording is not None,
        }

    # ---- the request path -----------------------------------------------------------
    async def intercept(self, request: Request, peer: str, proceed: Proceed) -> dict | None:
        """Handle ``request`` with the faults in force; DropConnection closes the connection."""
        header = request.header
        if self.recording is not None:
            self.recording.append(
                {
                    "time": time.time(),
                    "api_key": header.api_key,
                    "api": api_spec(header.api_key).name,
                    "version": header.api_version,
                    "client_id": header.client_id,
                    "peer": peer,
                }
            )
        if self._resumed is not None:
            with trio.move_on_after(MAX_PAUSE_S):
                await self._resumed.wait()
        if self.cap is not None and header.api_key == 18:
            rel = self.cap.get(18)
            if rel is not None and header.api_version > rel[1]:
                # as that Kafka answers a version it does not know: v0, UNSUPPORTED_VERSION and the
                # versions it does support, from which the client picks and asks again
                log.info(
                    "ApiVersions v%d is above Kafka %s's v%d (version cap): UNSUPPORTED_VERSION peer=%s",
                    header.api_version,
                    self.cap_name,
                    rel[1],
                    peer,
                )
                # Kafka 2.4+ (KIP-511) lists only its ApiVersions range, older releases nothing
                listed = (
                    []
                    if self._release_before(2, 4)
                    else [{"api_key": 18, "min_version": rel[0], "max_version": rel[1]}]
                )
                raise AnswerInVersion(
                    0, {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": listed, "throttle_time_ms": 0}
                )
        if self.cap is not None and header.api_key != 18:
            rel = self.cap.get(header.api_key)
            if rel is None or not rel[0] <= header.api_version <= rel[1]:
                log.warning(
                    "closing connection peer=%s: api_key=%d version=%d is outside Kafka %s (version cap)",
                    peer,
                    header.api_key,
                    header.api_version,
                    self.cap_name,
                )
                raise DropConnection()
        fault = self._match(request)
        if fault is None:
            return await proceed(request, peer)
        fault.hits += 1
        if fault.count is not None:
            fault.count -= 1
            if fault.count <= 0:
                self.rules.remove(fault)
                self._update()
        name = api_spec(header.api_key).name
        if fault.delay_ms:
            log.info(
                "fault %d: delaying %s v%d by %d ms peer=%s", fault.id, name, header.api_version, fault.delay_ms, peer
            )
            await trio.sleep(fault.delay_ms / 1000)
        if fault.drop == "before":
            log.info("fault %d: dropping the connection before %s peer=%s", fault.id, name, peer)
            raise DropConnection()
        if fault.error is not None:
            body = await self._error(request, peer, proceed, fault)
        else:
            body = await proceed(request, peer)
        if fault.drop == "after":
            log.info("fault %d: dropping the connection after %s peer=%s", fault.id, name, peer)
            raise DropConnection()
        return body

    def _release_before(self, major: int, minor: int) -> bool:
        got = tuple(int(x) for x in str(self.cap_name).split(".")[:2])
        return got < (major, minor)

    def _match(self, request) -> Fault | None:
        header = request.header
        for rule in self.rules:
            if rule.api_key is not None and rule.api_key != header.api_key:
                continue
            if rule.client_id is not None and rule.client_id != header.client_id:
                continue
            if rule.topic is not None and not self._touches(HANDLERS[header.api_key], request, rule):
                continue
            return rule
        return None

    def _selector(self, rule: Fault) -> Selector:
        if rule.topic is None:
            return lambda topic, partition: True
        return lambda topic, partition: (
            topic == rule.topic and (rule.partition is None or partition is None or partition == rule.partition)
        )

    def _touches(self, module, request, rule: Fault) -> bool:
        if request.header.api_key == ApiKey.METADATA:
            topics = request.body.get("topics")
            return topics is None or any(t.get("name") == rule.topic for t in topics)
        answer = ErrorAnswer(module, request, 0, self._selector(rule), self._name_of_id)
        if answer.layout is None:
            return rule.topic in _topic_names(request.body)
        answer.split()
        return bool(answer.faulted)

    def _name_of_id(self, topic_id: bytes) -> str | None:
        return self.dispatcher.topic_name_by_id(bytes(topic_id))

    async def _error(self, request: Request, peer: str, proceed: Proceed, fault: Fault) -> dict | None:
        header = request.header
        answer = ErrorAnswer(HANDLERS[header.api_key], request, fault.error, self._selector(fault), self._name_of_id)
        answer.partition_level = fault.partition is not None
        answer.split()
        if header.api_key == ApiKey.PRODUCE and request.body.get("acks") == 0:
            log.info("fault %d: acks=0 Produce in error: closing the connection, as Kafka does", fault.id)
            raise DropConnection()
        log.info(
            "fault %d: answering %s v%d with %s",
            fault.id,
            api_spec(header.api_key).name,
            header.api_version,
            ErrorCode(fault.error).name,
        )
        response = None
        if header.api_key == ApiKey.METADATA:
            response = await proceed(request, peer)
        elif answer.rest is not None:
            response = await proceed(Request(header=header, body=answer.rest, size=request.size), peer)
        return answer.merge(response)

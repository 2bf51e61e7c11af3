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
- ``cut_bytes``: send only the first N bytes of the answer, then close the connection (a
  connection lost in the middle of an answer).
- ``throttle_ms``: answer with that ``throttle_time_ms`` and read nothing more from the connection
  until it has passed, as Kafka throttles a client over its quota (KIP-219: the client holds back
  its next requests to this broker that long; older clients are held by the muted connection).
- ``duplicate`` (Fetch only): records the consumer already has, again. Kafka answers each request
  once (a client matches answers by correlation id), so a second wire answer is not something any
  client is asked to cope with; what Kafka's own answers do hold is records below the fetch offset
  (an answer starts at the batch that holds the fetch offset, whole), which a consumer must skip.
  So each matching partition is answered from one offset earlier: the batch before the one asked
  for comes again, ahead of the new records. A consumer that hands those to the application a
  second time has a bug.
- ``observe``: change nothing, only count (``hits``).

A request is acted on by the first acting rule that matches it (in the order they were added);
every observe-only rule that matches counts it. Rules are chaos profiles too: ``rate`` acts on
that fraction of the matching requests (drawn from a ``random.Random(seed)`` of the rule: the same
seed and requests give the same choices), ``jitter_ms`` adds a uniform 0..jitter to ``delay_ms``
(same generator); ``predicate`` (thread mode: a Python callable over a :class:`RequestInfo`)
narrows the match further. Every rule counts the requests it matched (``matched``) and acted on
(``hits``), and :meth:`RequestFaults.wait_hits` waits for a number of hits; rules that ran out
are kept (``known``) until ``clear()`` so their counts stay readable.

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
import random
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

import trio
from construct import Container

from strom.broker import context
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
from .control import WaitTimeout

if TYPE_CHECKING:
    from strom.broker.server.dispatch import Proceed, RequestDispatcher

log = logging.getLogger("strom.faults")

RELEASES_PATH = Path(__file__).with_name("kafka_releases.json")
MAX_DELAY_MS = 600_000
MAX_THROTTLE_MS = 600_000
MAX_WAIT_S = 600.0
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


@dataclass(frozen=True)
class RequestInfo:
    """What a rule's ``predicate`` sees of a request (thread mode)."""

    api: str  # Kafka's name: "Produce"
    api_key: int
    version: int
    client_id: str | None
    peer: str
    topics: frozenset[str]  # the topics the request names (by name or id)
    body: Any  # the decoded request body (read it, do not change it)


Predicate = Callable[[RequestInfo], bool]


@dataclass(eq=False)
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
    observe: bool = False
    rate: float | None = None
    seed: int | None = None
    jitter_ms: int = 0
    cut_bytes: int | None = None
    duplicate: bool = False
    throttle_ms: int | None = None
    predicate: Predicate | None = None
    matched: int = 0  # requests that matched (before ``rate`` chose)
    active: bool = True  # False once used up or removed
    rng: random.Random = field(default_factory=random.Random, repr=False)

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
            "matched": self.matched,
            "active": self.active,
            "observe": self.observe,
            "rate": self.rate,
            "seed": self.seed,
            "jitter_ms": self.jitter_ms,
            "cut_bytes": self.cut_bytes,
            "duplicate": self.duplicate,
            "throttle_ms": self.throttle_ms,
            "predicate": getattr(self.predicate, "__name__", "predicate") if self.predicate is not None else None,
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
        self._dispatcher = weakref.ref(dispatcher)  # _injectors is keyed weakly by the dispatcher
        self.rules: list[Fault] = []
        self.known: dict[int, Fault] = {}  # every rule since the last clear(), used up or not
        self._ids = itertools.count(1)
        self._hit = trio.Event()  # set (and replaced) at every hit: wakes wait_hits
        self._resumed: trio.Event | None = None
        self.cap_name: str | None = None
        self.cap: dict[int, tuple[int, int]] | None = None
        self.recording: deque | None = None

    @property
    def dispatcher(self) -> RequestDispatcher:
        found = self._dispatcher()
        if found is None:
            raise ReferenceError("the broker of this fault injector is gone")
        return found

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
        observe: bool = False,
        rate: float | None = None,
        seed: int | None = None,
        jitter_ms: int = 0,
        cut_bytes: int | None = None,
        duplicate: bool = False,
        throttle_ms: int | None = None,
        predicate: Predicate | None = None,
    ) -> Fault:
        if drop not in (None, "before", "after"):
            raise ValueError(f"drop={drop!r}: use 'before' or 'after'")
        acts = error is not None or delay_ms or jitter_ms or drop is not None
        acts = acts or cut_bytes is not None or duplicate or throttle_ms is not None
        if observe and acts:
            raise ValueError("an observe-only rule changes nothing: give it no error, delay, drop or other action")
        if not observe and not acts:
            raise ValueError(
                "a fault needs an error, a delay or a drop (or cut_bytes, duplicate, throttle_ms; observe: only count)"
            )
        if not 0 <= int(delay_ms) <= MAX_DELAY_MS or not 0 <= int(jitter_ms) <= MAX_DELAY_MS:
            raise ValueError(f"delay_ms={delay_ms}, jitter_ms={jitter_ms}: each between 0 and {MAX_DELAY_MS}")
        if count is not None and int(count) < 1:
            raise ValueError(f"count={count}: at least 1, or None for every request")
        if partition is not None and topic is None:
            raise ValueError("a partition needs its topic")
        if rate is not None and not 0.0 < float(rate) <= 1.0:
            raise ValueError(f"rate={rate}: a fraction of the matching requests, above 0 and at most 1")
        if cut_bytes is not None and int(cut_bytes) < 0:
            raise ValueError(f"cut_bytes={cut_bytes}: 0 or more")
        if throttle_ms is not None and not 0 <= int(throttle_ms) <= MAX_THROTTLE_MS:
            raise ValueError(f"throttle_ms={throttle_ms}: between 0 and {MAX_THROTTLE_MS}")
        key = api_key_of(api) if api is not None else None
        if duplicate and key != ApiKey.FETCH:
            raise ValueError(
                "duplicate: only Fetch answers (records a consumer must skip); Kafka answers each request "
                "once, by correlation id, so no client is required to accept a second answer"
            )
        if predicate is not None and not callable(predicate):
            raise ValueError("predicate: a callable taking a RequestInfo (thread mode only)")
        if seed is None and (rate is not None or jitter_ms):
            seed = random.randrange(2**32)  # shown by describe(): pass it to repeat a run's choices
        fault = Fault(
            next(self._ids),
            key,
            error_code_of(error) if error is not None else None,
            int(delay_ms),
            drop,
            None if count is None else int(count),
            topic,
            None if partition is None else int(partition),
            client_id,
            observe=bool(observe),
            rate=None if rate is None else float(rate),
            seed=None if seed is None else int(seed),
            jitter_ms=int(jitter_ms),
            cut_bytes=None if cut_bytes is None else int(cut_bytes),
            duplicate=bool(duplicate),
            throttle_ms=None if throttle_ms is None else int(throttle_ms),
            predicate=predicate,
        )
        if fault.seed is not None:
            fault.rng.seed(fault.seed)
        self.rules.append(fault)
        self.known[fault.id] = fault
        log.info("fault added %s", fault.describe())
        self._update()
        return fault

    def remove(self, fault_id: int) -> bool:
        before = len(self.rules)
        for rule in self.rules:
            if rule.id == fault_id:
                rule.active = False
        self.rules = [r for r in self.rules if r.id != fault_id]
        self._update()
        return len(self.rules) != before

    def rule(self, fault_id: int) -> Fault:
        """A rule added since the last ``clear()``, in force or used up."""
        found = self.known.get(int(fault_id))
        if found is None:
            raise ValueError(f"no fault rule {fault_id} (rules are forgotten by clear())")
        return found

    async def wait_hits(self, fault_id: int, hits: int = 1, timeout: float = 10.0) -> Fault:  # noqa: ASYNC109
        """Until rule ``fault_id`` was hit ``hits`` times in all; WaitTimeout after ``timeout`` s."""
        rule = self.rule(fault_id)
        timeout = _bounded(timeout)
        with trio.move_on_after(timeout):
            while rule.hits < hits:
                if not rule.active and rule is not self.known.get(rule.id):
                    raise ValueError(f"fault rule {fault_id} was cleared while waited for")
                await self._hit.wait()
            return rule
        raise WaitTimeout(
            f"fault rule {fault_id} ({_summary(rule)}) was hit {rule.hits} times within {timeout:g} s, "
            f"waited for {hits}; it matched {rule.matched} requests"
            + ("" if rule.active else " and is no longer in force")
        )

    def clear(self) -> None:
        """Remove (and forget) every rule, lift a version cap, resume and stop recording."""
        for rule in self.known.values():
            rule.active = False
        self.rules = []
        self.known = {}
        self._notify_hit()
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

    def _notify_hit(self) -> None:
        self._hit.set()
        self._hit = trio.Event()

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
        fault = self._match(request, peer)
        if fault is None:
            return await proceed(request, peer)
        name = api_spec(header.api_key).name
        delay_ms = fault.delay_ms + (fault.rng.uniform(0, fault.jitter_ms) if fault.jitter_ms else 0)
        if delay_ms:
            log.info("fault %d: delaying %s v%d by %d ms peer=%s", fault.id, name, header.api_version, delay_ms, peer)
            await trio.sleep(delay_ms / 1000)
        if fault.drop == "before":
            log.info("fault %d: dropping the connection before %s peer=%s", fault.id, name, peer)
            raise DropConnection()
        if fault.duplicate:
            request = self._from_earlier(request, fault)
            log.info("fault %d: answering %s from one offset earlier (records again) peer=%s", fault.id, name, peer)
        if fault.error is not None:
            body = await self._error(request, peer, proceed, fault)
        else:
            body = await proceed(request, peer)
        if fault.drop == "after":
            log.info("fault %d: dropping the connection after %s peer=%s", fault.id, name, peer)
            raise DropConnection()
        if body is not None and fault.throttle_ms is not None and "throttle_time_ms" in body:
            body = dict(body, throttle_time_ms=max(int(body["throttle_time_ms"] or 0), fault.throttle_ms))
            # as Kafka's quota throttling: the answer goes now, the connection reads nothing more
            # until the throttle time has passed (so clients from before KIP-219 wait too)
            until = trio.current_time() + fault.throttle_ms / 1000
            context.muted_until.set(max(context.muted_until.get(), until))
            log.info("fault %d: %s answered with throttle_time_ms=%d peer=%s", fault.id, name, fault.throttle_ms, peer)
        if fault.cut_bytes is not None:
            # the connection layer sends the first cut_bytes bytes of this answer, then closes
            log.info("fault %d: cutting the %s answer after %d bytes peer=%s", fault.id, name, fault.cut_bytes, peer)
            if body is None:
                raise DropConnection()
            context.cut_answer_after.set(fault.cut_bytes)
        return body

    def _from_earlier(self, request: Request, rule: Fault) -> Request:
        """The Fetch ``request`` with each matching partition's fetch offset one lower (where the
        log has the offset below it), so that the answer repeats the batch before."""
        select = self._selector(rule)
        context = self.dispatcher.context
        replicas = context.replica_manager if context is not None else None
        topics = []
        for entry in request.body.get("topics") or []:
            name = entry.get("topic") or (self._name_of_id(entry["topic_id"]) if entry.get("topic_id") else None)
            parts = []
            for part in entry.get("partitions") or []:
                offset = part.get("fetch_offset", 0)
                replica = replicas.partition(name, part["partition"]) if replicas is not None and name else None
                start = replica.log.log_start_offset if replica is not None else None
                if select(name, part["partition"]) and start is not None and offset > start:
                    part = _copy(part, {"fetch_offset": offset - 1})
                parts.append(part)
            topics.append(_copy(entry, {"partitions": parts}))
        return Request(header=request.header, body=_copy(request.body, {"topics": topics}), size=request.size)

    def _release_before(self, major: int, minor: int) -> bool:
        got = tuple(int(x) for x in str(self.cap_name).split(".")[:2])
        return got < (major, minor)

    def _match(self, request: Request, peer: str) -> Fault | None:
        """The first acting rule (in the order added) that matches and is chosen (``rate``), its hit
        counted; every observe-only rule that matches counts the request too."""
        header = request.header
        info: RequestInfo | None = None
        acting: Fault | None = None
        for rule in list(self.rules):
            if acting is not None and not rule.observe:
                continue  # one acting rule per request: the first added
            if rule.api_key is not None and rule.api_key != header.api_key:
                continue
            if rule.client_id is not None and rule.client_id != header.client_id:
                continue
            if rule.topic is not None and not self._touches(HANDLERS[header.api_key], request, rule):
                continue
            if rule.predicate is not None:
                if info is None:
                    info = self._info(request, peer)
                try:
                    chosen = bool(rule.predicate(info))
                except Exception:  # a test's predicate that raises matches nothing; the broker goes on
                    log.exception("fault %d: its predicate raised; treated as no match", rule.id)
                    chosen = False
                if not chosen:
                    continue
            rule.matched += 1
            if rule.rate is not None and rule.rng.random() >= rule.rate:
                continue
            rule.hits += 1
            if rule.count is not None:
                rule.count -= 1
                if rule.count <= 0:
                    rule.active = False
                    self.rules.remove(rule)
                    self._update()
            self._notify_hit()
            if not rule.observe:
                acting = rule
        return acting

    def _info(self, request: Request, peer: str) -> RequestInfo:
        header = request.header
        module = HANDLERS[header.api_key]
        topics = set(_topic_names(request.body))
        layout: PartitionLayout | None = getattr(module, "ERROR_LAYOUT", None)
        if layout is not None:
            for entry in request.body.get(layout.req_topics) or []:
                name = entry.get(layout.req_name)
                if not name and entry.get("topic_id"):
                    name = self._name_of_id(entry["topic_id"])
                if name:
                    topics.add(name)
        return RequestInfo(
            api_spec(header.api_key).name,
            int(header.api_key),
            int(header.api_version),
            header.client_id,
            peer,
            frozenset(topics),
            request.body,
        )

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


def _summary(rule: Fault) -> str:
    what = rule.describe()
    keys = ("api", "error", "delay_ms", "drop", "topic", "partition", "client_id", "observe", "rate", "predicate")
    return ", ".join(f"{k}={what[k]}" for k in keys if what[k] not in (None, 0, False))


def _bounded(timeout: float) -> float:
    timeout = float(timeout)
    if not 0 <= timeout <= MAX_WAIT_S:
        raise ValueError(f"timeout={timeout}: between 0 and {MAX_WAIT_S:g} seconds")
    return timeout

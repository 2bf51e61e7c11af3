"""Fault injection and test control of a running broker, from a test.

``Faults`` is the same API whether the broker runs in this process (calls go to the broker's
trio loop through its token) or as a process (calls go to its control endpoint over HTTP, see
``strom.testing.control_endpoint``). ``ControlClient`` is the HTTP side, also used by ``strom control``.
Only the standard library is imported here.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

CONTROL_TIMEOUT_S = 30.0


class ControlError(RuntimeError):
    """The broker refused a control request (bad arguments) or could not be reached."""


class WaitTimeout(ControlError, TimeoutError):
    """A wait (``rule.wait``, ``wait_for_group``, ...) ran out of time; the message says what was
    waited for and what was seen last."""


# a fault rule's chaos options when not given (RequestFaults.add's defaults)
CHAOS_DEFAULTS: dict[str, Any] = {
    "observe": False,
    "rate": None,
    "seed": None,
    "jitter_ms": 0,
    "cut_bytes": None,
    "duplicate": False,
    "throttle_ms": None,
    "predicate": None,
}

# how much longer than a wait's own timeout a client waits for the broker's answer
WAIT_MARGIN_S = 10.0


class ControlClient:
    """``POST http://<address>/v1/<operation>`` with JSON arguments, JSON back."""

    def __init__(self, address: str, timeout: float = CONTROL_TIMEOUT_S):
        self.address = address
        self.timeout = timeout

    def __call__(self, operation: str, args: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        try:
            data = json.dumps(args or {}).encode()
        except TypeError as exc:
            raise ControlError(
                f"{operation}: {exc}; over the control endpoint arguments are JSON (a predicate, "
                f"works only with a broker in this process: mode='thread')"
            ) from None
        request = urllib.request.Request(
            f"http://{self.address}/v1/{operation}",
            data=data,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                doc = json.loads(exc.read())
                message, kind = doc.get("error", str(exc)), doc.get("kind")
            except ValueError:
                message, kind = str(exc), None
            raise (WaitTimeout if kind == "timeout" else ControlError)(message) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ControlError(
                f"cannot reach the control endpoint at {self.address}: {exc}; is the broker "
                f"running with --dev (or control.listener set)?"
            ) from None
        return answer.get("result")


Call = Callable[..., Any]  # (operation, args[, timeout]) -> the operation's JSON answer


class Rule(dict):
    """A fault rule as added (a dict: ``rule["id"]``, as before), and a handle on it in the broker:
    ``hits`` (requests it matched and acted on, read now), ``wait(hits)``, ``remove()``."""

    def __init__(self, call: Call, described: dict[str, Any]):
        super().__init__(described)
        self._call = call

    @property
    def id(self) -> int:
        return int(self["id"])

    def refresh(self) -> Rule:
        """Read the rule's counts from the broker now."""
        self.update(self._call("rule", {"id": self.id}))
        return self

    @property
    def hits(self) -> int:
        return int(self.refresh()["hits"])

    @property
    def matched(self) -> int:
        """Requests that matched (``hits`` counts those acted on: fewer with a ``rate``)."""
        return int(self.refresh()["matched"])

    def wait(self, hits: int = 1, timeout: float = 10.0) -> Rule:
        """Until the rule was hit ``hits`` times in all (bounded: WaitTimeout says what it saw)."""
        self.update(self._call("wait_rule", {"id": self.id, "hits": hits, "timeout": timeout}, timeout + WAIT_MARGIN_S))
        return self

    def remove(self) -> bool:
        return bool(self._call("unfault", {"id": self.id}))


class Faults:
    """Faults and switches of one broker; each method is one control operation.

    ``api``: Kafka's API name ("Produce", "Fetch", "OffsetCommit") or key; ``error``: Kafka's
    error name ("NOT_LEADER_OR_FOLLOWER") or code.
    """

    def __init__(self, call: Call):
        self._call = call

    def inject(
        self,
        api: str | int | None,
        *,
        error: str | int | None = None,
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
        predicate: Callable[[Any], bool] | None = None,
    ) -> Rule:
        """The next ``count`` requests of ``api`` (None: any API; ``count=None``: all of them until
        cleared), optionally only those of ``client_id`` or touching ``topic`` (and ``partition``):
        answer ``error``, wait ``delay_ms`` (plus up to ``jitter_ms``) first, ``drop`` the connection
        ("before" handling, or "after": the request takes effect, its answer is lost), send only
        ``cut_bytes`` of the answer and close, answer ``throttle_ms`` as throttle time, ``duplicate``
        a Fetch answer's records, or only ``observe`` (count). ``rate``: act on that fraction of the
        matching requests (seeded by ``seed``); ``predicate``: a callable over the request
        (``strom.testing.faults.RequestInfo``; thread mode only). Returns the :class:`Rule`."""
        args: dict[str, Any] = {
            "api": api,
            "error": error,
            "delay_ms": delay_ms,
            "drop": drop,
            "count": count,
            "topic": topic,
            "partition": partition,
            "client_id": client_id,
        }
        chaos = {
            "observe": observe,
            "rate": rate,
            "seed": seed,
            "jitter_ms": jitter_ms,
            "cut_bytes": cut_bytes,
            "duplicate": duplicate,
            "throttle_ms": throttle_ms,
            "predicate": predicate,
        }
        # only what differs from the defaults goes (seed=0 and cut_bytes=0 do differ)
        args.update({k: v for k, v in chaos.items() if v != CHAOS_DEFAULTS[k]})
        return Rule(self._call, self._call("fault", args))

    def error(self, api: str | int | None, error: str | int, count: int | None = 1, **match: Any) -> Rule:
        return self.inject(api, error=error, count=count, **match)

    def delay(self, api: str | int | None, delay_ms: int, count: int | None = 1, **match: Any) -> Rule:
        return self.inject(api, delay_ms=delay_ms, count=count, **match)

    def drop(self, api: str | int | None, when: str = "before", count: int | None = 1, **match: Any) -> Rule:
        return self.inject(api, drop=when, count=count, **match)

    def observe(self, api: str | int | None = None, count: int | None = None, **match: Any) -> Rule:
        """Count the matching requests (``hits``), change nothing."""
        return self.inject(api, observe=True, count=count, **match)

    def slow(self, delay_ms: int, jitter_ms: int = 0, api: str | int | None = None, **match: Any) -> Rule:
        """A slow broker: every request (of ``api``) held ``delay_ms`` plus up to ``jitter_ms``, until removed."""
        return self.inject(api, delay_ms=delay_ms, jitter_ms=jitter_ms, count=None, **match)

    def error_rate(
        self, api: str | int | None, error: str | int, rate: float, seed: int | None = None, **match: Any
    ) -> Rule:
        """``rate`` of the matching requests answered ``error``, until removed (seeded: repeatable)."""
        return self.inject(api, error=error, rate=rate, seed=seed, count=match.pop("count", None), **match)

    def cut(self, api: str | int | None, after_bytes: int, count: int | None = 1, **match: Any) -> Rule:
        """Send only the first ``after_bytes`` bytes of the answer, then close the connection."""
        return self.inject(api, cut_bytes=after_bytes, count=count, **match)

    def throttle(self, api: str | int | None, throttle_ms: int, count: int | None = 1, **match: Any) -> Rule:
        """Answer with ``throttle_time_ms`` set: the client holds back its next requests that long."""
        return self.inject(api, throttle_ms=throttle_ms, count=count, **match)

    def duplicate(self, count: int | None = 1, **match: Any) -> Rule:
        """A Fetch answer with every partition's records twice (a consumer must skip the copies)."""
        return self.inject("Fetch", duplicate=True, count=count, **match)

    def rule(self, fault_id: int) -> Rule:
        """A rule by id (in force or used up, until ``clear()``)."""
        return Rule(self._call, self._call("rule", {"id": fault_id}))

    def remove(self, fault_id: int) -> bool:
        return self._call("unfault", {"id": fault_id})

    def rules(self) -> list[Rule]:
        """Rules still in force, with ``hits`` (requests they changed) and ``remaining``."""
        return [Rule(self._call, r) for r in self._call("faults", {})]

    def clear(self) -> None:
        """Remove every rule and the version cap, resume, stop recording."""
        self._call("clear", {})

    def cap_versions(self, release: str | None) -> None:
        """Advertise and accept only the API versions Kafka ``release`` ("2.8", "3.0") did; None lifts it."""
        self._call("cap", {"release": release})

    def record(self, on: bool = True) -> None:
        """Start (or stop) keeping api, version and client id of every request."""
        self._call("record", {"on": on})

    def recorded(self) -> list[dict]:
        return self._call("recorded", {})

    def status(self) -> dict[str, Any]:
        return self._call("status", {})


class Waits:
    """Waits on a broker's state (each a control operation run on the broker's loop, woken by the
    broker's own changes; see ``strom.testing.waits``). Bounded: WaitTimeout says what it saw."""

    _control: Callable[..., Any]  # (operation, args, timeout): the broker class's control call

    def _wait(self, operation: str, args: dict[str, Any]) -> Any:
        return self._control(operation, args, float(args["timeout"]) + WAIT_MARGIN_S)

    def wait_for_group(
        self, group_id: str, state: str | None = "Stable", members: int | None = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Until ``group_id`` (classic or consumer group) is in ``state`` (None: any) with ``members``
        members (None: any number); the group as seen then (type, state, members)."""
        return self._wait("wait_group", {"group_id": group_id, "state": state, "members": members, "timeout": timeout})

    def wait_for_lag(
        self, group_id: str, topic: str | None = None, lag: int = 0, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Until the group's lag (high watermark minus committed offset, summed over ``topic``'s
        partitions, or over the partitions it committed) is at most ``lag``."""
        return self._wait("wait_lag", {"group_id": group_id, "topic": topic, "lag": lag, "timeout": timeout})

    def wait_for_offset(
        self, topic: str, partition: int, offset: int, timeout: float = 10.0, kind: str = "high_watermark"
    ) -> dict[str, Any]:
        """Until ``topic``-``partition``'s high watermark (or ``kind="log_end_offset"``) reaches ``offset``."""
        return self._wait(
            "wait_offset",
            {"topic": topic, "partition": partition, "offset": offset, "timeout": timeout, "kind": kind},
        )

    def wait_for_connections(self, count: int, at_least: bool = True, timeout: float = 10.0) -> dict[str, Any]:
        """Until the broker has ``count`` client connections open (at least, or exactly)."""
        return self._wait("wait_connections", {"count": count, "at_least": at_least, "timeout": timeout})

    def group(self, group_id: str) -> dict[str, Any]:
        """The group now: type, state, members."""
        return self._control("group", {"group_id": group_id})

    def lag(self, group_id: str, topic: str | None = None) -> dict[str, Any]:
        """The group's lag now, in all and per partition."""
        return self._control("lag", {"group_id": group_id, "topic": topic})

    def connections(self) -> int:
        return int(self._control("connections", {})["connections"])

    def snapshot(self) -> dict[str, Any]:
        """Remember the topics and groups there are now: ``reset()`` keeps them."""
        return self._control("snapshot", {})

    def reset(self) -> dict[str, Any]:
        """Back to the snapshot (or to no topics and groups): delete every other topic and group,
        clear faults, version cap and recording, resume. What it did, and groups it kept because
        members are still in them."""
        return self._control("reset", {})

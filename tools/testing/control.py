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


class ControlClient:
    """``POST http://<address>/v1/<operation>`` with JSON arguments, JSON back."""

    def __init__(self, address: str, timeout: float = CONTROL_TIMEOUT_S):
        self.address = address
        self.timeout = timeout

    def __call__(self, operation: str, args: dict[str, Any] | None = None) -> Any:
        data = json.dumps(args or {}).encode()
        request = urllib.request.Request(
            f"http://{self.address}/v1/{operation}",
            data=data,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", str(exc))
            except ValueError:
                message = str(exc)
            raise ControlError(message) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ControlError(
                f"cannot reach the control endpoint at {self.address}: {exc}; is the broker "
                f"running with --dev (or control.listener set)?"
            ) from None
        return answer.get("result")


Call = Callable[[str, dict], Any]


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
    ) -> dict:
        """The next ``count`` requests of ``api`` (None: any API; ``count=None``: all of them until
        cleared), optionally only those of ``client_id`` or touching ``topic`` (and ``partition``):
        answer ``error``, wait ``delay_ms`` first, or ``drop`` the connection ("before" handling,
        or "after": the request takes effect, its answer is lost). Returns the rule (with its id)."""
        return self._call(
            "fault",
            {
                "api": api,
                "error": error,
                "delay_ms": delay_ms,
                "drop": drop,
                "count": count,
                "topic": topic,
                "partition": partition,
                "client_id": client_id,
            },
        )

    def error(self, api: str | int, error: str | int, count: int | None = 1, **match: Any) -> dict:
        return self.inject(api, error=error, count=count, **match)

    def delay(self, api: str | int, delay_ms: int, count: int | None = 1, **match: Any) -> dict:
        return self.inject(api, delay_ms=delay_ms, count=count, **match)

    def drop(self, api: str | int, when: str = "before", count: int | None = 1, **match: Any) -> dict:
        return self.inject(api, drop=when, count=count, **match)

    def remove(self, fault_id: int) -> bool:
        return self._call("unfault", {"id": fault_id})

    def rules(self) -> list[dict]:
        """Rules still in force, with ``hits`` (requests they changed) and ``remaining``."""
        return self._call("faults", {})

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

    def status(self) -> dict:
        return self._call("status", {})

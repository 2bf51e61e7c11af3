"""The control endpoint of a test cluster: its cluster actions and each broker's control
operations over HTTP, for tests in any language (``strom control --to ADDRESS cluster ...``).

A cluster in this process (``strom.testing.cluster(3, mode="thread")``) has actions that span
brokers (stop, kill, pause, resume, restart a broker; move a partition's leader or a coordinator;
isolate a broker): the cluster's ``operation(name, args)`` does them, dict in and dict out. They
block and may stop a broker, so they cannot run on a broker's own loop as the broker's control
operations do: this endpoint serves them from a thread of its own.

    POST /v1/cluster/<name>            {args}  -> {"result": cluster.operation(name, args)}
    POST /v1/broker/<id>/<operation>   {args}  -> {"result": that broker's control operation}

Errors answer 400 ``{"error": "..."}``; a wait or cluster action that ran out of time adds
``"kind": "timeout"`` (``strom control`` then exits with status 2). Loopback only.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from .control import WAIT_MARGIN_S, ControlError, WaitTimeout

log = logging.getLogger("strom.testing.cluster_control")

MAX_BODY_BYTES = 1024 * 1024
LOOPBACK = ("127.0.0.1", "::1", "localhost")


class ControlledBroker(Protocol):
    def _control(self, operation: str, args: dict[str, Any], timeout: float | None = None) -> Any: ...


class OperatedCluster(Protocol):
    """What the endpoint needs of a cluster: its actions as operations, and its brokers by id."""

    def operation(self, name: str, args: dict[str, Any]) -> dict[str, Any]: ...

    def broker(self, broker_id: int) -> Any: ...


class ClusterControl:
    """The HTTP endpoint of ``cluster`` on ``host`` and a port the OS chose (``port=0``), served
    from a daemon thread until ``close()``."""

    def __init__(self, cluster: OperatedCluster, host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in LOOPBACK:
            raise ValueError(f"host={host!r}: the cluster control endpoint listens on loopback only")
        self.cluster = cluster
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                status, answer = owner.handle(self.path, self._body())
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)

            def _body(self) -> bytes | None:
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    return None
                if not 0 <= length <= MAX_BODY_BYTES:
                    return None
                return self.rfile.read(length)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("cluster control: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="strom-cluster-control", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> ClusterControl:
        self._thread.start()
        log.info("cluster control endpoint on http://%s/v1/", self.address)
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> ClusterControl:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one request ----------------------------------------------------------------
    def handle(self, path: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
        if body is None:
            return 400, {"error": "bad or too large Content-Length"}
        try:
            args = json.loads(body or b"{}")
        except ValueError as exc:
            return 400, {"error": f"request body is not JSON: {exc}"}
        if not isinstance(args, dict):
            return 400, {"error": "request body must be a JSON object"}
        parts = path.split("?", 1)[0].strip("/").split("/")
        try:
            if len(parts) == 3 and parts[:2] == ["v1", "cluster"]:
                return 200, {"result": self.cluster.operation(parts[2], args)}
            if len(parts) == 4 and parts[:2] == ["v1", "broker"]:
                broker = self.cluster.broker(int(parts[2]))
                timeout = float(args["timeout"]) + WAIT_MARGIN_S if "timeout" in args else None
                return 200, {"result": broker._control(parts[3], args, timeout)}
        except (WaitTimeout, TimeoutError, AssertionError) as exc:  # a wait or an action ran out of time
            return 400, {"error": str(exc), "kind": "timeout"}
        except (ControlError, ValueError, KeyError, TypeError) as exc:
            return 400, {"error": f"{parts[-1]}: {exc!r}" if isinstance(exc, KeyError) else str(exc)}
        except Exception as exc:  # an action that failed: answered, never the end of the endpoint
            log.exception("cluster operation %s failed", path)
            return 500, {"error": f"{type(exc).__name__}: {exc}"}
        return 404, {"error": f"unknown path {path}; use /v1/cluster/<name> or /v1/broker/<id>/<operation>"}

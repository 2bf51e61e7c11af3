"""Test control of a running broker: fault injection, pause, version caps, maintenance "now".

``Controls`` holds the operations, each taking and returning JSON-able values, so the embedded
broker (``strom.testing``, through the broker's trio token), the HTTP endpoint below and
``strom control`` all do the same thing. The endpoint listens only where ``control.listener``
says (loopback only, checked by the config) and only when it is set: ``strom serve --dev`` and
``strom.testing``'s subprocess brokers set it, and then the layer that starts the broker (``strom
serve``, the embedded broker) starts :func:`serve_control` beside it; a production configuration
has no such port, and its broker never loads this module.

HTTP: ``POST /v1/<operation>`` with a JSON object of arguments (``GET /v1/status`` also works);
the answer is JSON, ``{"error": "..."}`` with status 400 for a bad request. One request per
connection, every read bounded.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

import trio

from strom.broker.config import Listener
from strom.broker.errors import TopicError
from strom.broker.server.listen import BoundSockets, bind_listener

from .control import WaitTimeout
from .faults import kafka_releases, request_faults
from .waits import group_lag, group_view, watcher

if TYPE_CHECKING:
    from strom.broker.connection_quota import ConnectionQuotas
    from strom.broker.coordinator.group.coordinator import GroupCoordinator
    from strom.broker.metadata.admin import AdminManager
    from strom.broker.metadata.cache import MetadataCache
    from strom.broker.replica.manager import ReplicaManager
    from strom.broker.server.dispatch import RequestDispatcher
    from strom.storage.log_manager import LogManager

log = logging.getLogger("strom.control")

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
REQUEST_TIMEOUT_S = 30.0


class ControlError(ValueError):
    """A control request that cannot be done; the message says why."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ControlledBroker(Protocol):
    """What the control operations read and do of a running broker."""

    node_id: int
    bound: Sequence[Any]  # listeners as bound, each with its ``advertised`` address
    topics: Any  # the topic metadata (``.topics``: name -> TopicInfo), None before it is open
    logs: LogManager | None
    groups: GroupCoordinator | None
    metadata: MetadataCache | None  # the live brokers (None before the metadata is open)
    admin: AdminManager | None  # topic creation and deletion
    replicas: ReplicaManager  # partitions hosted here (offsets, lag, their data waiters)
    connection_quotas: ConnectionQuotas  # open connections (and their watchers)

    @property
    def dispatcher(self) -> RequestDispatcher: ...


class Controls:
    """The operations. Run them on the broker's trio loop."""

    OPERATIONS = (
        "status",
        "fault",
        "unfault",
        "clear",
        "faults",
        "pause",
        "resume",
        "cap",
        "record",
        "recorded",
        "retention",
        "compact",
        "expire_offsets",
        "create_topic",
        "delete_topic",
        "rule",
        "wait_rule",
        "group",
        "lag",
        "connections",
        "wait_group",
        "wait_lag",
        "wait_offset",
        "wait_connections",
        "snapshot",
        "reset",
    )

    def __init__(self, broker: ControlledBroker):
        self.broker = broker
        self.faults = request_faults(broker)

    async def call(self, operation: str, args: dict[str, Any] | None = None) -> Any:
        """Run ``operation``; ControlError for bad arguments, WaitTimeout when a wait ran out."""
        if operation not in self.OPERATIONS:
            raise ControlError(f"unknown operation {operation!r}; known: {', '.join(self.OPERATIONS)}")
        if operation.startswith("wait_") and self.faults.paused:
            # a paused broker's clock stands still: the wait's own timeout would not run out
            raise ControlError(f"{operation}: the broker is paused; resume it first (nothing changes while paused)")
        try:
            return await getattr(self, "op_" + operation)(**(args or {}))
        except TypeError as exc:
            raise ControlError(f"{operation}: {exc}") from None
        except TopicError as exc:
            raise ControlError(f"{operation}: {exc.message}") from None
        except ValueError as exc:
            raise ControlError(str(exc)) from None

    # ---- faults -------------------------------------------------------------------
    async def op_status(self) -> dict:
        b = self.broker
        return {
            "node_id": b.node_id,
            "listeners": [str(x.advertised) for x in b.bound],
            "live_brokers": sorted(node for node, *_ in b.metadata.live_brokers()),
            "topics": sorted(b.topics.topics) if b.topics is not None else [],
            **self.faults.status(),
        }

    async def op_fault(self, api: str | int | None = None, **rule: Any) -> dict:
        """Add a rule: ``RequestFaults.add``'s arguments (an unknown one is refused)."""
        return self.faults.add(api, **rule).describe()

    async def op_rule(self, id: int) -> dict:
        return self.faults.rule(int(id)).describe()

    async def op_wait_rule(self, id: int, hits: int = 1, timeout: float = 10.0) -> dict:  # noqa: ASYNC109
        return (await self.faults.wait_hits(int(id), int(hits), float(timeout))).describe()

    # ---- waits ----------------------------------------------------------------------
    async def op_group(self, group_id: str) -> dict:
        return group_view(self.broker.groups, group_id)

    async def op_lag(self, group_id: str, topic: str | None = None) -> dict:
        return group_lag(self.broker, group_id, topic)

    async def op_connections(self) -> dict:
        return {"connections": self.broker.connection_quotas.total}

    async def op_wait_group(self, **args: Any) -> dict:
        return await watcher(self.broker).group(**args)

    async def op_wait_lag(self, **args: Any) -> dict:
        return await watcher(self.broker).lag(**args)

    async def op_wait_offset(self, **args: Any) -> dict:
        return await watcher(self.broker).offset(**args)

    async def op_wait_connections(self, **args: Any) -> dict:
        return await watcher(self.broker).connections(**args)

    # ---- reset between tests ---------------------------------------------------------
    def _state(self) -> tuple[set[str], set[str]]:
        b = self.broker
        topics = {t for t in (b.metadata.topic_names() if b.metadata is not None else []) if not t.startswith("__")}
        groups: set[str] = set()
        if b.groups is not None:
            groups = set(b.groups.groups) | set(b.groups.consumer.groups)
            share = getattr(b.groups, "share", None)  # KIP-932 share groups, where the broker has them
            if share is not None:
                groups |= set(share.groups)
        return topics, groups

    async def op_snapshot(self) -> dict:
        topics, groups = self._state()
        _baselines[self.broker] = (topics, groups)
        return {"topics": sorted(topics), "groups": sorted(groups)}

    async def op_reset(self, keep_topics: list[str] | None = None, keep_groups: list[str] | None = None) -> dict:
        """Delete every topic and group not kept (``keep_*``, else the last snapshot, else none: all
        but internal topics), clear faults, cap and recording, resume."""
        self.faults.clear()
        keep_topics_set, keep_groups_set = _baselines.get(self.broker, (set(), set()))
        if keep_topics is not None:
            keep_topics_set = set(keep_topics)
        if keep_groups is not None:
            keep_groups_set = set(keep_groups)
        topics, groups = self._state()
        kept: dict[str, str] = {}
        deleted_groups = []
        coordinator = self.broker.groups
        for group_id in sorted(groups - keep_groups_set):
            code = coordinator.delete_group(group_id) if coordinator is not None else None
            if code == 0:
                deleted_groups.append(group_id)
            elif code is not None:
                kept[group_id] = getattr(code, "name", str(code))  # NON_EMPTY_GROUP: a client is still in it
        deleted_topics = []
        for name in sorted(topics - keep_topics_set):
            try:
                await self.broker.admin.delete_topic(name)
                deleted_topics.append(name)
            except TopicError as exc:
                kept[name] = exc.message
        return {"deleted_topics": deleted_topics, "deleted_groups": deleted_groups, "kept": kept}

    async def op_unfault(self, id: int) -> bool:
        return self.faults.remove(int(id))

    async def op_faults(self) -> list[dict]:
        return [r.describe() for r in self.faults.rules]

    async def op_clear(self) -> None:
        self.faults.clear()

    async def op_pause(self) -> None:
        self.faults.pause()

    async def op_resume(self) -> None:
        self.faults.resume()

    async def op_cap(self, release: str | None = None) -> dict:
        self.faults.cap_versions(release)
        return {"release": release, "known": list(kafka_releases())}

    async def op_record(self, on: bool = True) -> None:
        self.faults.record(bool(on))

    async def op_recorded(self) -> list[dict]:
        return self.faults.recorded()

    # ---- maintenance now ---------------------------------------------------------------
    def _logs(self, topic: str | None, compacted: bool | None = None) -> list:
        out = []
        for (name, _), partition_log in self.broker.logs.all_logs().items():
            if topic is not None and name != topic:
                continue
            if topic is None and name.startswith("__"):
                continue
            if compacted is not None and partition_log.config.compact_enabled != compacted:
                continue
            out.append(partition_log)
        return out

    async def op_retention(self, topic: str | None = None, roll: bool = True) -> dict:
        """Apply retention now. With ``roll`` the active segments are rolled first, since retention
        (as Kafka's) never deletes the segment being written."""
        before = {id(log): log.log_start_offset for log in self._logs(topic)}
        if roll:
            for partition_log in self._logs(topic):
                partition_log.roll()
        deleted = self.broker.logs.cleanup()
        moved = sum(1 for log in self._logs(topic) if log.log_start_offset != before.get(id(log)))
        return {"segments_deleted": deleted, "partitions_trimmed": moved}

    async def op_compact(self, topic: str | None = None, roll: bool = True) -> dict:
        """Run the log cleaner now (on a worker thread). With ``roll`` the active segments of
        compacted logs are rolled first, since the cleaner never touches the active segment."""
        if roll:
            for partition_log in self._logs(topic, compacted=True):
                partition_log.roll()
        results = await trio.to_thread.run_sync(self.broker.logs.clean_compacted)
        done = [r for r in results.values() if r is not None and not r.aborted]
        return {
            "logs_cleaned": len(results),
            "records_removed": sum(r.records_removed for r in done),
            "markers_removed": sum(r.markers_removed for r in done),
        }

    async def op_expire_offsets(self, advance_ms: int = 0) -> dict:
        """Expire committed offsets now, as if the clock were ``advance_ms`` later."""
        removed = self.broker.groups.expire_offsets(_wall_ms() + int(advance_ms))
        return {"offsets_removed": removed}

    # ---- topics ------------------------------------------------------------------------
    async def op_create_topic(
        self, name: str, partitions: int = -1, replication_factor: int = -1, configs: dict | None = None
    ) -> dict:
        info = await self.broker.admin.create_topic(
            name, int(partitions), int(replication_factor), {k: str(v) for k, v in (configs or {}).items()}
        )
        return {"name": name, "partitions": info.partitions if info is not None else partitions}

    async def op_delete_topic(self, name: str) -> None:
        await self.broker.admin.delete_topic(name)


# what ``snapshot`` saw, per broker: ``reset`` keeps it
_baselines: WeakKeyDictionary[Any, tuple[set[str], set[str]]] = WeakKeyDictionary()


# ----------------------------------------------------------------------------- HTTP
async def serve_control(
    broker: ControlledBroker, address: Listener, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve the control operations of ``broker`` over HTTP on ``address`` (``control.listener``)
    until cancelled; ``task_status.started`` gets the bound port."""
    bound: BoundSockets = bind_listener(address)
    controls = Controls(broker)
    listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in bound.sockets]
    log.info("control endpoint on http://%s:%d/v1/ (fault injection and test control)", bound.listener.host, bound.port)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            status, answer = await _exchange(controls, stream)  # reading bounded, waits by their timeout
            with trio.fail_after(REQUEST_TIMEOUT_S):
                payload = json.dumps(answer).encode()
                head = (
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                    f"Connection: close\r\n\r\n"
                ).encode()
                await stream.send_all(head + payload)
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            log.debug("control connection ended early")
        except Exception:
            log.exception("control request failed")
        finally:
            with trio.move_on_after(1):
                await stream.aclose()

    try:
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(trio.serve_listeners, handle, [listener])
            task_status.started(bound.port)
    finally:
        with trio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()


async def _exchange(controls: Controls, stream) -> tuple[int, Any]:
    with trio.fail_after(REQUEST_TIMEOUT_S):
        read = await _read_request(stream)
    if isinstance(read[0], int):
        return read  # type: ignore[return-value]
    operation, args = read
    try:
        return 200, {"result": await controls.call(operation, args)}
    except WaitTimeout as exc:
        return 400, {"error": str(exc), "kind": "timeout"}
    except ControlError as exc:
        return 400, {"error": str(exc)}


async def _read_request(stream) -> tuple[int, Any] | tuple[str, dict]:
    """(operation, arguments) of one HTTP request, or (status, error answer)."""
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return 400, {"error": "connection closed before the request ended"}
        data += chunk
        if len(data) > MAX_HEADER_BYTES + MAX_BODY_BYTES:
            return 400, {"error": "request too large"}
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) < 2 or parts[0] not in ("GET", "POST"):
        return 400, {"error": f"expected GET or POST, got {lines[0]!r}"}
    length = 0
    for line in lines[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return 400, {"error": "bad Content-Length"}
    if not 0 <= length <= MAX_BODY_BYTES:
        return 400, {"error": "request body too large"}
    while len(body) < length:
        chunk = await stream.receive_some(min(65536, length - len(body)))
        if not chunk:
            return 400, {"error": "connection closed inside the request body"}
        body += chunk
    path = parts[1].split("?", 1)[0]
    if not path.startswith("/v1/"):
        return 404, {"error": f"unknown path {path}; operations are under /v1/"}
    try:
        args = json.loads(body[:length] or b"{}")
    except ValueError as exc:
        return 400, {"error": f"request body is not JSON: {exc}"}
    if not isinstance(args, dict):
        return 400, {"error": "request body must be a JSON object"}
    return path[4:].strip("/"), args

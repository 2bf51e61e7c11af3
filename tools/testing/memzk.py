"""An in-memory ZooKeeper: deterministic, thread-free, driven by trio's clock.

``MemoryZooKeeper`` is a ZooKeeper server object; its sessions implement the broker's ZooKeeper
port (:class:`strom.broker.zk.session.ZkSession`), so ``KafkaZkClient``, the controller and the
cluster member run on it unchanged. One trio loop runs the server (``await nursery.start(zk.run)``);
sessions may live on that loop (the deterministic simulation) or on other trio loops in other
threads (``strom.testing.cluster(mode="thread")``): every operation is handed to the server's loop
and its reply, watch events and state changes back to the session's loop, in order, with
``TrioToken.run_sync_soon`` (no worker threads, no locks: the server's state is touched only in its
own loop).

What it does as ZooKeeper does:

* one totally ordered log of writes (a zxid per transaction; a multi is one transaction), znode
  stats (czxid, mzxid, pzxid, version, cversion, ephemeralOwner, numChildren...);
* errors as kazoo raises them: ``NoNodeError``, ``NodeExistsError``, ``BadVersionError``,
  ``NotEmptyError``, ``NoChildrenForEphemeralsError``; a failed multi changes nothing and reports
  ``RolledBackError`` before the failing operation and ``RuntimeInconsistency`` after it;
* sequential znodes named from the parent's cversion (``%010d``);
* one-shot data, exists and children watches, fired per session once per event (as ZooKeeper fires
  a watcher once), with kazoo's fan-out to the callbacks of that path; a session's events arrive
  before the reply of the write that caused them;
* a lost connection as kazoo reports it: ``SUSPENDED``, and every watch of the session fires once
  with a ``NONE`` event and is gone (operations sent meanwhile wait for the connection);
* sessions with a timeout: a session the server does not hear from (cut off or paused) for longer
  than its timeout expires (time from the server loop's trio clock, so a ``MockClock`` drives it):
  its ephemeral znodes are deleted and its watches dropped. The client learns it when it hears
  from the server again: ``LOST``, then ``CONNECTED`` on a new session, as kazoo reports it;
  operations it issued meanwhile fail with ``SessionExpiredError``.

Faults: :meth:`MemoryZooKeeper.cut` (the client sees ``SUSPENDED`` at once, its watches fire ``NONE``;
its operations wait for the connection), :meth:`pause_session` (a frozen client: told nothing,
operations wait, events it misses are delivered when it resumes),
:meth:`heal` (reconnect; ``LOST`` first if the session expired meanwhile), :meth:`expire`,
:meth:`disconnect_for` (cut, healed after some seconds), :meth:`pause` and :meth:`resume` (the
whole server out of service: every session cut, none expiring until it serves again). It does not
emulate: ACLs and auth, quotas, containers and TTL nodes, the ``/zookeeper`` config node's
contents, multiple servers and their quorum, a lagging follower's stale reads (every read sees the
latest write), ``sync``, refusing new connections while paused.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import outcome
import trio
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from strom.broker.zk.session import CheckOp, CreateOp, DeleteOp, MultiOp, SessionState, SetDataOp, WatchCallback

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_SESSION_ID = 0x100_0000_0000
"""Session ids count up from here (ZooKeeper puts the server id in the high bits)."""


@dataclass
class _Znode:
    data: bytes
    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int = 0
    cversion: int = 0
    ephemeral_owner: int = 0
    pzxid: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> ZnodeStat:
        return ZnodeStat(
            self.czxid,
            self.mzxid,
            self.ctime,
            self.mtime,
            self.version,
            self.cversion,
            0,
            self.ephemeral_owner,
            len(self.data),
            len(self.children),
            self.pzxid,
        )


@dataclass
class _Request:
    run: Callable[[], Any]
    reply: Callable[[outcome.Outcome], None]
    cancelled: bool = False


class _ServerSession:
    """The server's side of one session."""

    def __init__(self, session_id: int, timeout_s: float, client: MemorySession) -> None:
        self.id = session_id
        self.timeout_s = timeout_s
        self.client = client
        self.connected = True
        self.expired = False
        self.closed = False
        self.deadline = math.inf  # expiry time while the server does not hear from it
        self.held: list[_Request] = []  # operations sent while cut off, run on reconnect
        self.pending: list[Callable[[], None]] = []  # events for the client while cut off
        self.data_watches: dict[str, list[WatchCallback]] = {}
        self.child_watches: dict[str, list[WatchCallback]] = {}


class MemoryZooKeeper:
    """The server. Start it with ``await nursery.start(zk.run)`` in the loop that owns it."""

    def __init__(self) -> None:
        self._zxid = 0
        self._nodes: dict[str, _Znode] = {"/": _Znode(b"", 0, 0, 0, 0)}
        self._sessions: dict[int, _ServerSession] = {}
        self._session_ids = itertools.count(FIRST_SESSION_ID)
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._deadlines_changed = trio.Event()
        self._paused: list[int] = []  # sessions the server's own pause cut off
        self._create("/zookeeper", b"", 0)

    # ---- running -----------------------------------------------------------------------------
    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled: expires sessions at their deadlines."""
        self._token = trio.lowlevel.current_trio_token()
        self._deadlines_changed = trio.Event()
        for s in self._sessions.values():  # served again: an unheard session's timeout starts now
            if not s.connected and not s.expired:
                s.deadline = trio.current_time() + s.timeout_s
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    self._expire_due()
                    deadline = min((s.deadline for s in self._sessions.values()), default=math.inf)
                    with trio.move_on_at(deadline):
                        await self._deadlines_changed.wait()
                    self._deadlines_changed = trio.Event()
            finally:
                self._token = None
                self._nursery = None

    @property
    def running(self) -> bool:
        return self._token is not None

    async def session_factory(self, connect: str, session_timeout_s: float, connect_timeout_s: float) -> MemorySession:
        """The broker's ``ZkSessionFactory``: a new session; ``connect``'s chroot is honoured
        (created when missing). Call it in the loop the session is to live on."""
        _, slash, chroot = connect.partition("/")
        chroot = f"/{chroot}".rstrip("/") if slash else ""
        session = MemorySession(self, session_timeout_s, chroot)
        await session._open()
        return session

    # ---- faults (call them in the server's loop; ThreadedMemoryZooKeeper.call from others) ----
    def session_ids(self) -> list[int]:
        """The live (not expired, not closed) sessions."""
        return [s.id for s in self._sessions.values() if not s.expired and not s.closed]

    def cut(self, session_id: int) -> None:
        """Cut the session's connection: its client sees SUSPENDED; the session expires unless
        healed within its timeout."""
        self._disconnect(session_id, notify=True)

    def pause_session(self, session_id: int) -> None:
        """The client stops talking (a frozen process): no state change reaches it; its
        operations wait; the session expires unless resumed within its timeout."""
        self._disconnect(session_id, notify=False)

    def heal(self, session_id: int) -> None:
        """Reconnect a cut or paused session (LOST and a new session if it expired meanwhile);
        while the server is paused, when it resumes."""
        if self._paused:
            if session_id not in self._paused:
                self._paused.append(session_id)
            return
        s = self._sessions.get(session_id)
        if s is None or s.connected or s.closed or s.client._closed:  # an abandoned client never comes back
            return
        s.connected = True
        s.deadline = math.inf
        self._deadlines_changed.set()
        client = s.client
        if s.expired:
            del self._sessions[s.id]
            held, s.held = s.held, []
            for request in held:
                request.reply(outcome.Error(SessionExpiredError()))
            new = self._new_session(client, s.timeout_s)
            client._post(client._renewed, new)
            return
        client._post(client._notify, SessionState.CONNECTED)
        pending, s.pending = s.pending, []
        for event in pending:
            client._post(event)
        held, s.held = s.held, []
        for request in held:
            self._execute(s, request)

    def disconnect_for(self, session_id: int, seconds: float, *, notify: bool = True) -> None:
        """Cut (or pause) the session now and heal it ``seconds`` later (server clock)."""
        self._disconnect(session_id, notify=notify)

        async def heal_later() -> None:
            await trio.sleep(seconds)
            self.heal(session_id)

        if self._nursery is None:
            raise RuntimeError("the in-memory ZooKeeper is not running")
        self._nursery.start_soon(heal_later)

    def pause(self) -> None:
        """The server stops serving (a ZooKeeper outage): every connected session is cut (its
        client sees SUSPENDED, its operations wait). No session expires meanwhile: the server is
        not running to expire them."""
        if self._paused:
            return
        for s in list(self._sessions.values()):
            if s.connected and not s.closed:
                self._disconnect(s.id, notify=True)
                self._paused.append(s.id)
        for s in self._sessions.values():
            s.deadline = math.inf
        self._paused.append(0)  # paused, even with no session

    def resume(self) -> None:
        """Serve again: the sessions the pause cut reconnect, each with a fresh timeout (as a
        restarted ZooKeeper gives them); other cut sessions' timeouts start again now."""
        paused, self._paused = self._paused, []
        for s in self._sessions.values():
            if not s.connected and not s.expired:
                s.deadline = trio.current_time() + s.timeout_s
        self._deadlines_changed.set()
        for session_id in paused:
            if session_id:
                self.heal(session_id)

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    def expire(self, session_id: int) -> None:
        """Expire the session now (as when the server stops hearing from it beyond its timeout);
        a connected client learns it at once."""
        s = self._sessions.get(session_id)
        if s is None or s.expired or s.closed:
            return
        was_connected = s.connected
        if was_connected:
            s.connected = False
        self._expire(s)
        if was_connected:
            self.heal(session_id)

    # ---- reading the tree (tests, the simulation's checks) -------------------------------------
    def dump(self) -> dict[str, bytes]:
        """Every znode's data by path (a snapshot)."""
        return {path: node.data for path, node in sorted(self._nodes.items())}

    def data_of(self, path: str) -> bytes | None:
        """A znode's data, None when it does not exist."""
        node = self._nodes.get(path)
        return None if node is None else node.data

    @property
    def zxid(self) -> int:
        return self._zxid

    # ---- internals: sessions -------------------------------------------------------------------
    def _new_session(self, client: MemorySession, timeout_s: float) -> _ServerSession:
        s = _ServerSession(next(self._session_ids), timeout_s, client)
        self._sessions[s.id] = s
        return s

    def _disconnect(self, session_id: int, *, notify: bool) -> None:
        s = self._sessions.get(session_id)
        if s is None or not s.connected or s.closed:
            return
        s.connected = False
        s.deadline = math.inf if self._paused else trio.current_time() + s.timeout_s
        self._deadlines_changed.set()
        if notify:
            # As kazoo on a lost connection: SUSPENDED, then every watch of the session fires once
            # with a NONE event and is dropped (a watch recipe reads, and so sets it, again).
            client = s.client
            client._post(client._notify, SessionState.SUSPENDED)
            fired: list[WatchCallback] = []
            for watches in (s.child_watches, s.data_watches):
                for callbacks in watches.values():
                    fired += [c for c in callbacks if c not in fired]
                watches.clear()
            event = WatchedEvent("NONE", "CONNECTING", None)
            for callback in fired:
                client._post(_bind(callback, event))

    def _expire_due(self) -> None:
        if self._paused:
            return
        now = trio.current_time()
        for s in sorted(self._sessions.values(), key=lambda s: (s.deadline, s.id)):
            if s.deadline <= now and not s.expired:
                self._expire(s)

    def _expire(self, s: _ServerSession) -> None:
        log.debug("in-memory ZooKeeper: session 0x%x expired", s.id)
        s.expired = True
        s.deadline = math.inf
        s.pending.clear()
        self._end_session(s)

    def _end_session(self, s: _ServerSession) -> None:
        s.data_watches.clear()
        s.child_watches.clear()
        owned = sorted((p for p, n in self._nodes.items() if n.ephemeral_owner == s.id), reverse=True)
        if owned:
            self._zxid += 1
            for path in owned:
                self._delete(path, -1, self._zxid)

    def _submit(self, s: _ServerSession, request: _Request) -> None:
        """In the server's loop: run a client's request, or hold it while the session is cut."""
        if request.cancelled:
            return
        if s.closed:
            request.reply(outcome.Error(ConnectionClosedError("Connection has been closed")))
        elif not s.connected:
            s.held.append(request)
        elif s.expired:
            request.reply(outcome.Error(SessionExpiredError()))
        else:
            self._execute(s, request)

    def _execute(self, s: _ServerSession, request: _Request) -> None:
        if request.cancelled:
            return
        request.reply(outcome.capture(request.run))

    def _close(self, s: _ServerSession) -> None:
        if s.closed:
            return
        s.closed = True
        self._sessions.pop(s.id, None)
        if not s.expired:
            self._end_session(s)
        for request in s.held:
            request.reply(outcome.Error(ConnectionClosedError("Connection has been closed")))
        s.held.clear()

    # ---- internals: the tree -------------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(trio.current_time() * 1000) if self._token is not None else 0

    @staticmethod
    def _parent(path: str) -> str:
        parent = path.rsplit("/", 1)[0]
        return parent or "/"

    @staticmethod
    def _check_path(path: str) -> None:
        if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
            raise ValueError(f"invalid path {path!r}")

    def _node(self, path: str) -> _Znode:
        self._check_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError()
        return node

    def _create(self, path: str, data: bytes, zxid: int, *, owner: int = 0, sequence: bool = False) -> str:
        self._check_path(path)
        parent_path = self._parent(path)
        parent = self._nodes.get(parent_path)
        if parent is None:
            raise NoNodeError()
        if parent.ephemeral_owner:
            raise NoChildrenForEphemeralsError()
        if sequence:
            path = f"{path}{parent.cversion:010d}"
        if path in self._nodes:
            raise NodeExistsError()
        now = self._now_ms()
        self._nodes[path] = _Znode(bytes(data), zxid, zxid, now, now, ephemeral_owner=owner, pzxid=zxid)
        parent.children.add(path.rsplit("/", 1)[1])
        parent.cversion += 1
        parent.pzxid = zxid
        self._trigger(path, "CREATED")
        self._trigger(parent_path, "CHILD")
        return path

    def _set(self, path: str, data: bytes, version: int, zxid: int) -> ZnodeStat:
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError()
        node.data = bytes(data)
        node.version += 1
        node.mzxid = zxid
        node.mtime = self._now_ms()
        self._trigger(path, "CHANGED")
        return node.stat()

    def _delete(self, path: str, version: int, zxid: int) -> None:
        node = self._node(path)
        if path == "/":
            raise BadVersionError()  # ZooKeeper refuses to delete the root
        if version != -1 and version != node.version:
            raise BadVersionError()
        if node.children:
            raise NotEmptyError()
        del self._nodes[path]
        parent_path = self._parent(path)
        parent = self._nodes[parent_path]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.cversion += 1
        parent.pzxid = zxid
        self._trigger(path, "DELETED")
        self._trigger(parent_path, "CHILD")

    def _check(self, path: str, version: int) -> None:
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError()

    def _trigger(self, path: str, kind: str) -> None:
        """Fire the one-shot watches on ``path`` for an event (once per session, fanned out to
        the callbacks that session registered, as kazoo does)."""
        for s in list(self._sessions.values()):
            callbacks: list[WatchCallback] = []
            if kind in ("CREATED", "CHANGED", "DELETED"):
                callbacks += s.data_watches.pop(path, [])
            if kind in ("CHILD", "DELETED"):
                callbacks += [c for c in s.child_watches.pop(path, []) if c not in callbacks]
            if not callbacks:
                continue
            client = s.client
            event = WatchedEvent(kind, "CONNECTED", client._relative(path))
            for callback in callbacks:
                deliver = _bind(callback, event)
                if s.connected:
                    client._post(deliver)
                else:
                    s.pending.append(deliver)

    def _watch(self, s: _ServerSession, table: str, path: str, callback: WatchCallback | None) -> None:
        if callback is None:
            return
        watches = s.data_watches if table == "data" else s.child_watches
        registered = watches.setdefault(path, [])
        if callback not in registered:
            registered.append(callback)

    # ---- internals: operations (run in the server's loop for a session) ------------------------
    def _op_create(
        self, s: _ServerSession, path: str, data: bytes, ephemeral: bool, sequence: bool, makepath: bool
    ) -> str:
        self._zxid += 1
        owner = s.id if ephemeral else 0
        try:
            return self._create(path, data, self._zxid, owner=owner, sequence=sequence)
        except NoNodeError:
            if not makepath:
                raise
        self._op_ensure(s, self._parent(path))
        self._zxid += 1
        return self._create(path, data, self._zxid, owner=owner, sequence=sequence)

    def _op_get(self, s: _ServerSession, path: str, watch: WatchCallback | None) -> tuple[bytes, ZnodeStat]:
        node = self._node(path)
        self._watch(s, "data", path, watch)
        return node.data, node.stat()

    def _op_exists(self, s: _ServerSession, path: str, watch: WatchCallback | None) -> ZnodeStat | None:
        self._check_path(path)
        self._watch(s, "data", path, watch)  # an exists watch on a missing znode fires on create
        node = self._nodes.get(path)
        return None if node is None else node.stat()

    def _op_children(self, s: _ServerSession, path: str, watch: WatchCallback | None) -> list[str]:
        node = self._node(path)
        self._watch(s, "child", path, watch)
        return sorted(node.children)

    def _op_set(self, s: _ServerSession, path: str, data: bytes, version: int) -> ZnodeStat:
        self._node(path)
        self._zxid += 1
        return self._set(path, data, version, self._zxid)

    def _op_delete(self, s: _ServerSession, path: str, version: int) -> None:
        self._node(path)
        self._zxid += 1
        self._delete(path, version, self._zxid)

    def _op_ensure(self, s: _ServerSession, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            if prefix not in self._nodes:
                self._zxid += 1
                try:
                    self._create(prefix, b"", self._zxid)
                except NodeExistsError:
                    pass

    def _op_multi(self, s: _ServerSession, ops: Sequence[MultiOp]) -> list[Any]:
        """All or nothing: the operations are checked against a scratch copy first."""
        scratch = MemoryZooKeeper.__new__(MemoryZooKeeper)
        scratch._nodes = {p: _copy(n) for p, n in self._nodes.items()}
        scratch._sessions = {}
        scratch._token = self._token
        scratch._zxid = self._zxid + 1
        for i, op in enumerate(ops):
            try:
                scratch._apply(s, op, scratch._zxid)
            except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError, NoChildrenForEphemeralsError) as e:
                self._zxid += 1  # a failed write is a transaction too (an error one), as in ZooKeeper
                results: list[Any] = [RolledBackError() for _ in ops[:i]]
                results.append(e)
                results += [RuntimeInconsistency() for _ in ops[i + 1 :]]
                return results
        self._zxid += 1
        return [self._apply(s, op, self._zxid) for op in ops]

    def _apply(self, s: _ServerSession, op: MultiOp, zxid: int) -> Any:
        if isinstance(op, CreateOp):
            return self._create(op.path, op.data, zxid, owner=s.id if op.ephemeral else 0, sequence=op.sequence)
        if isinstance(op, SetDataOp):
            return self._set(op.path, op.data, op.version, zxid)
        if isinstance(op, DeleteOp):
            self._delete(op.path, op.version, zxid)
            return True
        self._check(op.path, op.version)
        return True


def _copy(node: _Znode) -> _Znode:
    return _Znode(
        node.data,
        node.czxid,
        node.mzxid,
        node.ctime,
        node.mtime,
        node.version,
        node.cversion,
        node.ephemeral_owner,
        node.pzxid,
        set(node.children),
    )


def _bind(callback: WatchCallback, event: WatchedEvent) -> Callable[[], None]:
    def deliver() -> None:
        try:
            callback(event)
        except Exception:
            log.exception("ZooKeeper watch callback %r failed", callback)

    return deliver


class MemorySession:
    """A client session on a :class:`MemoryZooKeeper` (the broker's ``ZkSession`` port), living on
    the trio loop that opened it; renewed after expiry as kazoo renews its session."""

    def __init__(self, server: MemoryZooKeeper, timeout_s: float, chroot: str) -> None:
        self._server = server
        self._timeout_s = timeout_s
        self._chroot = chroot
        self._token = trio.lowlevel.current_trio_token()
        self._listeners: list[Callable[[SessionState], None]] = []
        self._closed = False
        self._s: _ServerSession | None = None

    async def _open(self) -> None:
        server = self._server

        def open_on_server() -> _ServerSession:
            s = server._new_session(self, self._timeout_s)
            if self._chroot:
                server._op_ensure(s, self._chroot)
            return s

        self._s = await self._on_server(open_on_server)

    @property
    def session_id(self) -> int:
        return 0 if self._s is None else self._s.id

    @property
    def server(self) -> MemoryZooKeeper:
        return self._server

    # ---- the port --------------------------------------------------------------------------
    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False, makepath: bool = False
    ) -> str:
        created = await self._op(self._server._op_create, self._abs(path), data, ephemeral, sequence, makepath)
        return self._relative(created)

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Any]:
        return await self._op(self._server._op_get, self._abs(path), watch)

    async def set(self, path: str, data: bytes, version: int = -1) -> Any:
        return await self._op(self._server._op_set, self._abs(path), data, version)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._op(self._server._op_delete, self._abs(path), version)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Any | None:
        return await self._op(self._server._op_exists, self._abs(path), watch)

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        return await self._op(self._server._op_children, self._abs(path), watch)

    async def multi(self, ops: Sequence[MultiOp]) -> list[Any]:
        absolute = [_with_path(op, self._abs(op.path)) for op in ops]
        results = await self._op(self._server._op_multi, absolute)
        return [self._relative(r) if isinstance(r, str) else r for r in results]

    async def ensure_path(self, path: str) -> None:
        await self._op(self._server._op_ensure, self._abs(path))

    def add_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._listeners.append(callback)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        s = self._s
        if s is not None:
            try:
                await self._on_server(self._server._close, s)
            except ConnectionClosedError:
                pass

    def abandon(self) -> None:
        """The client goes away without closing (a killed process): the server stops hearing
        from the session, which expires after its timeout; nothing more reaches this client."""
        self._closed = True
        s, server = self._s, self._server
        if s is None or server._token is None:
            return
        try:
            server._token.run_sync_soon(server.pause_session, s.id)
        except trio.RunFinishedError:
            pass

    # ---- internals ---------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"invalid path {path!r}")
        return self._chroot + path if path != "/" else (self._chroot or "/")

    def _relative(self, path: str) -> str:
        if self._chroot and path.startswith(self._chroot):
            return path[len(self._chroot) :] or "/"
        return path

    async def _op(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise ConnectionClosedError("Connection has been closed")
        s = self._s
        assert s is not None
        return await self._request(s, lambda: fn(s, *args))

    async def _on_server(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the server's loop right away (not a session request)."""
        return await self._request(None, lambda: fn(*args))

    async def _request(self, s: _ServerSession | None, run: Callable[[], T]) -> T:
        server = self._server
        token = server._token
        if token is None:
            raise ConnectionClosedError("the in-memory ZooKeeper is not running")
        task = trio.lowlevel.current_task()
        request: _Request

        def reply(result: outcome.Outcome) -> None:  # server loop -> this loop
            def wake() -> None:
                if not request.cancelled:
                    trio.lowlevel.reschedule(task, result)

            self._post(wake)

        request = _Request(run, reply)

        def receive() -> None:
            if s is None:
                server._execute(s, request)  # type: ignore[arg-type]
            else:
                server._submit(s, request)

        try:
            token.run_sync_soon(receive)
        except trio.RunFinishedError:
            raise ConnectionClosedError("the in-memory ZooKeeper stopped") from None

        def abort(_: Any) -> trio.lowlevel.Abort:
            request.cancelled = True  # a request already run stays applied: its reply is lost
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """From the server's loop: run ``fn(*args)`` in this session's loop, in order."""
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass

    def _notify(self, state: SessionState) -> None:
        if self._closed:
            return
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                log.exception("ZooKeeper session listener %r failed", listener)

    def _renewed(self, new: _ServerSession) -> None:
        """The old session expired: LOST, then CONNECTED on ``new`` (as kazoo reports it)."""
        if self._closed:
            return
        self._s = new
        self._notify(SessionState.LOST)
        self._notify(SessionState.CONNECTED)


def _with_path(op: MultiOp, path: str) -> MultiOp:
    if isinstance(op, CreateOp):
        return CreateOp(path, op.data, op.ephemeral, op.sequence)
    if isinstance(op, SetDataOp):
        return SetDataOp(path, op.data, op.version)
    if isinstance(op, DeleteOp):
        return DeleteOp(path, op.version)
    return CheckOp(path, op.version)


class ThreadedMemoryZooKeeper:
    """A :class:`MemoryZooKeeper` on its own trio loop in a daemon thread, for brokers that run
    on other loops (``strom.testing.cluster(mode="thread")``). ``call(fn, *args)`` runs a server
    method (a fault) in its loop from any thread and returns its result. ``stop()`` keeps the
    znodes: ``start()`` serves them again (sessions nobody resumes then expire)."""

    def __init__(self) -> None:
        self.zk = MemoryZooKeeper()
        self._thread: threading.Thread | None = None
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> ThreadedMemoryZooKeeper:
        if self.running:
            return self
        ready = threading.Event()
        errors: list[BaseException] = []

        async def main() -> None:
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            async with trio.open_nursery() as nursery:
                await nursery.start(self.zk.run)
                ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        def target() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # reported by start()
                errors.append(exc)
            finally:
                ready.set()

        self._thread = threading.Thread(target=target, name="strom-memory-zookeeper", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise RuntimeError(f"in-memory ZooKeeper failed to start: {errors[0]!r}")
        return self

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the server's loop, from plain, asyncio or trio code (trio refuses to
        block a thread that runs a trio loop: from there a helper thread waits instead)."""
        token = self._token
        if token is None:
            raise RuntimeError("the in-memory ZooKeeper is not running")
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return trio.from_thread.run_sync(fn, *args, trio_token=token)
        result: list[outcome.Outcome] = []
        helper = threading.Thread(
            target=lambda: result.append(outcome.capture(trio.from_thread.run_sync, fn, *args, trio_token=token)),
            daemon=True,
        )
        helper.start()
        helper.join()
        return result[0].unwrap()

    @property
    def session_factory(self) -> Callable[..., Any]:
        return self.zk.session_factory

    def stop(self) -> None:
        token, stop = self._token, self._stop
        if token is not None and stop is not None:
            try:
                token.run_sync_soon(stop.set)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(10)
        self._thread = None
        self._token = None


@contextmanager
def memory_zookeeper_thread() -> Iterator[ThreadedMemoryZooKeeper]:
    """A started :class:`ThreadedMemoryZooKeeper` for the ``with`` block."""
    zk = ThreadedMemoryZooKeeper().start()
    try:
        yield zk
    finally:
        zk.stop()

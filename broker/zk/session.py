"""The ZooKeeper port: the znode operations ``KafkaZkClient`` needs, as one narrow protocol.

:class:`ZkSession` is what Kafka's ``ZooKeeperClient`` is to ``KafkaZkClient``: create
(ephemeral, sequential), get, set and delete with versions, exists, children, multi, one-shot
data and children watches, a session-state listener (CONNECTED, SUSPENDED, LOST) and close.
Everything above it (``KafkaZkClient``, the controller, election, the cluster member) is written
against this port only, so it runs unchanged over either implementation:

* :class:`KazooSession` (here): a real ZooKeeper through kazoo; kazoo's blocking calls run in
  trio worker threads, its watch and state callbacks are handed to the trio loop in order;
* ``strom.testing.memzk.MemoryZooKeeper``: an in-memory, thread-free, deterministic ZooKeeper
  for tests and the simulation (a broker gets it through ``BrokerServer(zk_sessions=...)``).

Semantics are ZooKeeper's as kazoo reports them: errors are kazoo's exception classes
(``NoNodeError``, ``NodeExistsError``, ``BadVersionError``, ``NotEmptyError``,
``ConnectionLoss``, ``SessionExpiredError``...), stats are kazoo's ``ZnodeStat``, watch events
kazoo's ``WatchedEvent`` (type ``CREATED``/``DELETED``/``CHANGED``/``CHILD``). A multi returns
one result per operation (the created path, the new stat of a set, True for delete and check);
when one fails nothing is applied and the results hold exceptions: the failing operation's own,
``RolledBackError`` before it and ``RuntimeInconsistency`` after it. Every callback (watches,
state listeners) runs in the session owner's trio thread, in the order ZooKeeper reported it.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import trio

T = TypeVar("T")


class SessionState(enum.Enum):
    """kazoo's connection states: CONNECTED, SUSPENDED (connection lost, session may live on),
    LOST (session expired: every ephemeral znode of this client is gone; the client then opens a
    new session and reports CONNECTED again)."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


# --- multi operations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int = -1


@dataclass(frozen=True)
class CheckOp:
    path: str
    version: int


MultiOp = CreateOp | SetDataOp | DeleteOp | CheckOp

WatchCallback = Callable[[Any], None]
"""Called once, in the owner's trio thread, with a kazoo ``WatchedEvent``."""


class ZkSession(Protocol):
    """One ZooKeeper client connection (a session, renewed after expiry as kazoo does)."""

    @property
    def session_id(self) -> int: ...

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False, makepath: bool = False
    ) -> str:
        """The created path (with its sequence suffix for a sequential znode)."""
        ...

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Any]: ...

    async def set(self, path: str, data: bytes, version: int = -1) -> Any:
        """The new ``ZnodeStat``."""
        ...

    async def delete(self, path: str, version: int = -1) -> None: ...

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Any | None: ...

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]: ...

    async def multi(self, ops: Sequence[MultiOp]) -> list[Any]: ...

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents (not atomic, as kazoo's)."""
        ...

    def add_listener(self, callback: Callable[[SessionState], None]) -> None: ...

    async def close(self) -> None:
        """End the session: its ephemeral znodes go at once."""
        ...


class ZkSessionFactory(Protocol):
    """Opens a session for ``zookeeper.connect`` (``host:port[,...][/chroot]``), creating a
    missing chroot first."""

    def __call__(self, connect: str, session_timeout_s: float, connect_timeout_s: float) -> Awaitable[ZkSession]: ...


# --- kazoo --------------------------------------------------------------------------------------


class KazooSession:
    """The port over kazoo: blocking calls in worker threads, callbacks back in trio's thread."""

    def __init__(self, zk: Any, token: trio.lowlevel.TrioToken) -> None:
        self._zk = zk
        self._token = token
        self._listeners: list[Callable[[SessionState], None]] = []
        self._wrappers: dict[int, Callable[[Any], None]] = {}
        zk.add_listener(self._on_state)

    @classmethod
    async def open(cls, connect: str, session_timeout_s: float, connect_timeout_s: float) -> KazooSession:
        from kazoo.client import KazooClient

        from strom.broker.zk.zkclient import split_connect_string

        hosts, chroot = split_connect_string(connect)
        if chroot:
            await trio.to_thread.run_sync(_ensure_chroot, hosts, chroot, connect_timeout_s)
        zk = KazooClient(hosts=hosts + chroot, timeout=session_timeout_s)
        await trio.to_thread.run_sync(_start, zk, connect_timeout_s)
        return cls(zk, trio.lowlevel.current_trio_token())

    @property
    def kazoo(self) -> Any:
        """The kazoo client (tests that reach ZooKeeper directly)."""
        return self._zk

    @property
    def session_id(self) -> int:
        return self._zk.client_id[0] if self._zk.client_id else 0

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False, makepath: bool = False
    ) -> str:
        return await self._run(self._zk.create, path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath)

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, Any]:
        return await self._run(self._zk.get, path, self._in_trio(watch))

    async def set(self, path: str, data: bytes, version: int = -1) -> Any:
        return await self._run(self._zk.set, path, data, version)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._run(self._zk.delete, path, version)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> Any | None:
        return await self._run(self._zk.exists, path, self._in_trio(watch))

    async def get_children(self, path: str, watch: WatchCallback | None = None) -> list[str]:
        return await self._run(self._zk.get_children, path, self._in_trio(watch))

    async def multi(self, ops: Sequence[MultiOp]) -> list[Any]:
        def commit() -> list[Any]:
            transaction = self._zk.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    transaction.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
                elif isinstance(op, SetDataOp):
                    transaction.set_data(op.path, op.data, version=op.version)
                elif isinstance(op, DeleteOp):
                    transaction.delete(op.path, version=op.version)
                else:
                    transaction.check(op.path, op.version)
            return transaction.commit()

        return await self._run(commit)

    async def ensure_path(self, path: str) -> None:
        await self._run(self._zk.ensure_path, path)

    def add_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._listeners.append(callback)

    async def close(self) -> None:
        await trio.to_thread.run_sync(_stop, self._zk)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    def _in_trio(self, watch: WatchCallback | None) -> Callable[[Any], None] | None:
        """kazoo keeps one-shot watches in a set per path: the same callback registered twice
        fires once, so the wrapper is cached per callback."""
        if watch is None:
            return None
        key = id(watch)
        wrapper = self._wrappers.get(key)
        if wrapper is None:

            def wrapper(event: Any) -> None:
                self._wrappers.pop(key, None)
                self._deliver(watch, event)

            self._wrappers[key] = wrapper
        return wrapper

    def _deliver(self, callback: Callable[[T], None], value: T) -> None:
        try:
            self._token.run_sync_soon(callback, value)
        except trio.RunFinishedError:
            pass

    def _on_state(self, state: str) -> None:
        self._deliver(self._notify, SessionState(state))

    def _notify(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            listener(state)


def _start(zk: Any, timeout_s: float) -> None:
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from strom.broker.zk.zkclient import ZkConnectionError

    try:
        zk.start(timeout=timeout_s)
    except (KazooTimeoutError, KazooException) as exc:
        _stop(zk)
        raise ZkConnectionError(f"cannot connect to ZooKeeper at {zk.hosts}: {exc!r}") from exc


def _stop(zk: Any) -> None:
    try:
        zk.stop()
    finally:
        zk.close()


def _ensure_chroot(hosts: str, chroot: str, timeout_s: float) -> None:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts)
    _start(zk, timeout_s)
    try:
        zk.ensure_path(chroot)
    finally:
        _stop(zk)


open_kazoo_session: ZkSessionFactory = KazooSession.open

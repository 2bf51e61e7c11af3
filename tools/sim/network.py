"""An in-memory network for brokers and clients on one trio loop.

Each node (a broker, a client) gets a :class:`NodeNetwork`, which is what ``BrokerServer`` takes
as its ``network`` (``listen`` and ``connect``) and what ``BrokerClient`` takes as its connector.
A connection is two one-way pipes. Bytes written are delivered after a delay drawn from the
network's seeded generator, never before bytes written earlier on the same pipe (TCP's order).
Faults, all driven by the caller (the simulation's nemesis):

- ``partition(a, b, until)``: nothing flows between ``a`` and ``b`` (either way) until ``until``
  (trio time); bytes already sent wait and arrive after the heal, as TCP retransmits them, and a
  connection attempt waits too (callers bound it with their connect timeout).
- ``drop(conn)``: the connection breaks at both ends (reads and writes raise
  ``trio.BrokenResourceError``, as after a reset).
- ``crash(node)``: the node's listeners close and all its connections break.

Nothing here reads the wall clock or a global random generator, so a run is determined by the
generator it is given and the order in which trio runs the tasks.
"""

from __future__ import annotations

import errno
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import trio
import trio.lowlevel

from strom.broker.config import Listener


@dataclass
class DelayModel:
    """Per-write delivery delay in seconds: usually ``low``..``high``, with probability
    ``spike_p`` up to ``spike`` (a congested or retransmitting link)."""

    low: float = 0.0001
    high: float = 0.002
    spike_p: float = 0.01
    spike: float = 0.2

    def draw(self, rng: random.Random) -> float:
        if rng.random() < self.spike_p:
            return rng.uniform(self.high, self.spike)
        return rng.uniform(self.low, self.high)


class _Pipe:
    """Bytes from ``src`` to ``dst`` in write order, each chunk due at its delivery time."""

    def __init__(self, net: SimNetwork, src: str, dst: str) -> None:
        self.net, self.src, self.dst = net, src, dst
        self.queue: deque[tuple[float, bytes]] = deque()
        self.last_due = 0.0
        self.eof = False  # the writer closed: the reader gets b"" once the queue is drained
        self.broken = False
        self.lot = trio.lowlevel.ParkingLot()

    def push(self, data: bytes) -> None:
        due = max(trio.current_time() + self.net.delay.draw(self.net.rng), self.last_due)
        self.last_due = due
        self.queue.append((due, data))
        self.lot.unpark_all()

    def close(self) -> None:
        self.eof = True
        self.lot.unpark_all()

    def break_(self) -> None:
        self.broken = True
        self.queue.clear()
        self.lot.unpark_all()

    async def pull(self, max_bytes: int | None) -> bytes:
        while True:
            if self.broken:
                raise trio.BrokenResourceError("connection reset")
            if self.queue:
                due = max(self.queue[0][0], self.net.blocked_until(self.src, self.dst))
                if due <= trio.current_time():
                    _, data = self.queue.popleft()
                    if max_bytes is not None and len(data) > max_bytes:
                        self.queue.appendleft((due, data[max_bytes:]))
                        data = data[:max_bytes]
                    await trio.lowlevel.checkpoint()
                    return data
                with trio.move_on_at(due):
                    await self.lot.park()
                continue
            if self.eof:
                await trio.lowlevel.checkpoint()
                return b""
            await self.lot.park()


class SimStream(trio.abc.Stream):
    """One end of a simulated connection."""

    def __init__(self, conn: SimConnection, send: _Pipe, receive: _Pipe) -> None:
        self.conn = conn
        self._send = send
        self._receive = receive
        self._closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("stream closed")
        await trio.lowlevel.checkpoint()
        if self._send.broken or self._send.eof or self._receive.broken:
            raise trio.BrokenResourceError("connection reset")
        if data:
            self._send.push(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._closed:
            raise trio.ClosedResourceError("stream closed")
        return await self._receive.pull(max_bytes)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._send.close()
            self.conn.net._closed(self.conn)
        await trio.lowlevel.checkpoint()


class SimConnection:
    def __init__(self, net: SimNetwork, number: int, client: str, server: str, address: tuple[str, int]) -> None:
        self.net, self.number, self.client, self.server, self.address = net, number, client, server, address
        up, down = _Pipe(net, client, server), _Pipe(net, server, client)
        self.client_end = SimStream(self, up, down)
        self.server_end = SimStream(self, down, up)
        self.pipes = (up, down)

    def break_(self) -> None:
        for pipe in self.pipes:
            pipe.break_()

    def __repr__(self) -> str:
        return f"conn#{self.number} {self.client}->{self.server}:{self.address[1]}"


class SimListener(trio.abc.Listener[trio.abc.Stream]):
    def __init__(self, net: SimNetwork, node: str, address: tuple[str, int]) -> None:
        self.net, self.node, self.address = net, node, address
        self.pending: deque[SimStream] = deque()
        self.lot = trio.lowlevel.ParkingLot()
        self.closed = False

    async def accept(self) -> trio.abc.Stream:
        while True:
            if self.closed:
                raise trio.ClosedResourceError("listener closed")
            if self.pending:
                await trio.lowlevel.checkpoint()
                return self.pending.popleft()
            await self.lot.park()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.net._listeners.pop(self.address, None)
            for stream in self.pending:
                stream.conn.break_()
            self.pending.clear()
            self.lot.unpark_all()


class NodeNetwork:
    """One node's view: ``BrokerServer``'s ``network`` and a ``BrokerClient`` connector."""

    def __init__(self, net: SimNetwork, node: str) -> None:
        self.net, self.node = net, node

    def listen(self, listener: Listener) -> tuple[int, trio.abc.Listener]:
        return self.net._listen(self.node, listener.host, listener.port)

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await self.net._connect(self.node, host, port)


class SimNetwork:
    def __init__(
        self, rng: random.Random, delay: DelayModel | None = None, on_event: Callable[[str], None] | None = None
    ):
        self.rng = rng
        self.delay = delay or DelayModel()
        self._on_event = on_event or (lambda text: None)
        self._listeners: dict[tuple[str, int], SimListener] = {}
        self._blocked: dict[frozenset[str], float] = {}
        self.connections: dict[int, SimConnection] = {}  # open ones, by number (creation order)
        self._numbers = 0
        self._next_port = 10000
        self._lot = trio.lowlevel.ParkingLot()  # connects waiting out a partition

    def node(self, name: str) -> NodeNetwork:
        return NodeNetwork(self, name)

    # ------------------------------------------------------------------ faults
    def blocked_until(self, a: str, b: str) -> float:
        return self._blocked.get(frozenset((a, b)), 0.0)

    def partition(self, a: str, b: str, until: float) -> None:
        key = frozenset((a, b))
        self._blocked[key] = max(self._blocked.get(key, 0.0), until)
        self._on_event(f"partition {a} <-> {b} until {until:.3f}")

    def stall(self, conn: SimConnection, direction: int, until: float) -> None:
        """One way of ``conn`` (0: client to server, 1: back) delivers nothing until ``until``,
        then everything in order, as TCP does after its retransmission timer backs off on a lossy
        link; the other way and other connections are unaffected."""
        pipe = conn.pipes[direction]
        pipe.queue = deque((max(due, until), data) for due, data in pipe.queue)
        pipe.last_due = max(pipe.last_due, until)
        pipe.lot.unpark_all()
        self._on_event(f"stall {conn} {'->' if direction == 0 else '<-'} until {until:.3f}")

    def heal(self) -> None:
        self._blocked.clear()
        self._wake_all()

    def drop(self, conn: SimConnection) -> None:
        self._on_event(f"drop {conn}")
        conn.break_()
        self.connections.pop(conn.number, None)

    def crash(self, node: str) -> None:
        for listener in [lst for lst in self._listeners.values() if lst.node == node]:
            listener.close()
        for conn in [c for c in self.connections.values() if node in (c.client, c.server)]:
            conn.break_()
            self.connections.pop(conn.number, None)

    def _wake_all(self) -> None:
        for conn in self.connections.values():
            for pipe in conn.pipes:
                pipe.lot.unpark_all()
        self._lot.unpark_all()

    # ------------------------------------------------------------------ plumbing
    def _listen(self, node: str, host: str, port: int) -> tuple[int, trio.abc.Listener]:
        if not port:
            port = self._next_port
            self._next_port += 1
        address = (host, port)
        if address in self._listeners:
            raise OSError(errno.EADDRINUSE, f"{host}:{port} is in use")
        listener = self._listeners[address] = SimListener(self, node, address)
        return port, listener

    async def _connect(self, node: str, host: str, port: int) -> trio.abc.Stream:
        await trio.sleep(self.delay.draw(self.rng))  # the handshake
        while True:
            listener = self._listeners.get((host, port))
            if listener is None:
                raise OSError(errno.ECONNREFUSED, f"connection to {host}:{port} refused")
            until = self.blocked_until(node, listener.node)
            if until <= trio.current_time():
                break
            with trio.move_on_at(until):
                await self._lot.park()
        self._numbers += 1
        conn = SimConnection(self, self._numbers, node, listener.node, (host, port))
        self.connections[conn.number] = conn
        listener.pending.append(conn.server_end)
        listener.lot.unpark_all()
        return conn.client_end

    def _closed(self, conn: SimConnection) -> None:
        if conn.client_end._closed and conn.server_end._closed:
            self.connections.pop(conn.number, None)

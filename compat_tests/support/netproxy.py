"""A loopback TCP proxy whose links a test can cut, stall, delay and heal: the network half of
the cluster nemesis (compat_tests/cluster/test_cluster_partitions.py).

A :class:`Proxy` listens on 127.0.0.1 at a port the OS chooses and forwards each accepted
connection to an upstream address (which may change, e.g. after a broker restart: new
connections go to the new one). Every connection belongs to a :class:`Link`, chosen when the
connection is accepted, or, with ``classify``, from the first bytes the client sends (the
inter-broker proxies tell which broker is calling from the client id of its first Kafka request).
A link is in one of three states:

- open: bytes flow, each chunk held ``delay_s`` first (latency, not a throughput limit);
- stalled (a blackhole, what a dropped-packet partition looks like to TCP): nothing is read or
  written, so the sender's buffers fill and its requests time out; new connections are accepted
  and hang the same way. Healed, the held bytes flow again, as TCP would retransmit them;
- cut: every connection is reset and new ones are closed as soon as they are accepted.

Threads, not trio: the proxies run beside blocking confluent-kafka clients in the test's process.
Everything stops at :meth:`Proxy.close` (or with the ``with`` block).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

from strom.protocol.connection import NEED_DATA, SERVER, Connection

HOST = "127.0.0.1"
OPEN, STALLED, CUT = "open", "stalled", "cut"
CHUNK = 1 << 16


class Link:
    """One direction of traffic a test controls: a state and a delay shared by its connections."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = OPEN
        self.delay_s = 0.0
        self.changed = threading.Condition()
        self.connections: set[_Connection] = set()

    def __repr__(self) -> str:
        return f"Link({self.name}, {self.state}, delay={self.delay_s})"

    def _set(self, state: str, delay_s: float | None = None) -> None:
        with self.changed:
            self.state = state
            if delay_s is not None:
                self.delay_s = delay_s
            doomed = list(self.connections) if state == CUT else []
            self.changed.notify_all()
        for conn in doomed:
            conn.reset()

    def cut(self) -> None:
        """Reset every connection; refuse new ones until healed."""
        self._set(CUT)

    def stall(self) -> None:
        """Hold every byte, in both directions, until healed."""
        self._set(STALLED)

    def delay(self, seconds: float) -> None:
        """Open, each chunk held ``seconds`` before it is passed on."""
        self._set(OPEN, seconds)

    def heal(self) -> None:
        """Open with no delay: held bytes flow again."""
        self._set(OPEN, 0.0)

    def wait_open(self, conn: _Connection) -> bool:
        """Block while stalled; False when the link or the connection is cut."""
        with self.changed:
            while self.state == STALLED and not conn.closed:
                self.changed.wait(0.5)
            return self.state == OPEN and not conn.closed


class _Connection:
    def __init__(self, link: Link, client: socket.socket, server: socket.socket, prefix: bytes) -> None:
        self.link = link
        self.client, self.server = client, server
        self.closed = False
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        for name, src, dst, first in (("up", client, server, prefix), ("down", server, client, b"")):
            queue: deque = deque()
            cond = threading.Condition()
            self._threads += [
                threading.Thread(
                    target=self._read,
                    args=(src, queue, cond, first),
                    daemon=True,
                    name=f"proxy-{link.name}-{name}-read",
                ),
                threading.Thread(
                    target=self._write, args=(dst, queue, cond), daemon=True, name=f"proxy-{link.name}-{name}-write"
                ),
            ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def _read(self, src: socket.socket, queue: deque, cond: threading.Condition, first: bytes) -> None:
        if first:
            with cond:
                queue.append((time.monotonic() + self.link.delay_s, first))
                cond.notify()
        while self.link.wait_open(self):
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            with cond:
                queue.append((time.monotonic() + self.link.delay_s, data))
                cond.notify()
            if not data:
                return

    def _write(self, dst: socket.socket, queue: deque, cond: threading.Condition) -> None:
        while not self.closed:
            with cond:
                while not queue and not self.closed:
                    cond.wait(0.5)
                if self.closed:
                    return
                due, data = queue.popleft()
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if not self.link.wait_open(self):
                return
            if not data:  # the other side closed: pass the close on, then end the connection
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                self.close()
                return
            try:
                dst.sendall(data)
            except OSError:
                self.close()
                return

    def reset(self) -> None:
        """Close both sockets with a reset (SO_LINGER 0), like a connection a firewall killed."""
        for sock in (self.client, self.server):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        with self.link.changed:
            self.link.connections.discard(self)
            self.link.changed.notify_all()
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


Classifier = Callable[[socket.socket], "tuple[Link, bytes] | None"]


class Proxy:
    """Listens on 127.0.0.1 (OS-chosen port) and forwards to ``upstream``. ``classify(sock)`` reads
    what it needs from a new connection and answers its link and the bytes it consumed (None:
    close the connection); without it every connection belongs to ``link``."""

    def __init__(
        self,
        name: str,
        upstream: tuple[str, int] | None = None,
        *,
        link: Link | None = None,
        classify: Classifier | None = None,
    ) -> None:
        self.name = name
        self.upstream = upstream
        self.link = link or Link(name)
        self._classify = classify
        self._sock = socket.create_server((HOST, 0))
        self._sock.settimeout(0.5)
        self.port = self._sock.getsockname()[1]
        self._stopped = threading.Event()
        self._links: set[Link] = {self.link}
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name=f"proxy-{name}")
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            threading.Thread(target=self._serve, args=(client,), daemon=True, name=f"proxy-{self.name}-new").start()

    def _serve(self, client: socket.socket) -> None:
        link, prefix = self.link, b""
        if self._classify is not None:
            try:
                client.settimeout(10)
                found = self._classify(client)
                client.settimeout(None)
            except OSError:
                found = None
            if found is None:
                client.close()
                return
            link, prefix = found
            self._links.add(link)
        # a stalled link hangs the new connection before it reaches the upstream (a SYN dropped)
        with link.changed:
            while link.state == STALLED and not self._stopped.is_set():
                link.changed.wait(0.5)
        if link.state == CUT or self._stopped.is_set() or self.upstream is None:
            client.close()
            return
        try:
            server = socket.create_connection(self.upstream, timeout=5)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        for sock in (client, server):  # as Kafka clients and brokers do: no Nagle delay on small frames
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(link, client, server, prefix)
        with link.changed:
            if link.state == CUT:
                conn.closed = True
            else:
                link.connections.add(conn)
        if conn.closed:
            client.close()
            server.close()
            return
        conn.start()

    def close(self) -> None:
        """Stop accepting, reset every connection this proxy carries."""
        self._stopped.set()
        self._sock.close()
        self._thread.join(5)
        for link in list(self._links):
            with link.changed:
                conns = list(link.connections)
                link.changed.notify_all()
            for conn in conns:
                conn.reset()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kafka_client_id(sock: socket.socket) -> tuple[str | None, bytes]:
    """The client id of the first Kafka request on ``sock`` (read by the protocol's server-role
    connection; None when its header has none or cannot be read) and the bytes read to find it."""
    conn = Connection(SERVER)
    seen = bytearray()
    while (event := conn.next_event()) is NEED_DATA:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed before the first request")
        seen += chunk
        conn.receive_data(chunk)
    header = getattr(event, "header", None)
    return (header.client_id if header is not None else None), bytes(seen)

"""Listening sockets opened with the standard library, before the broker's heavier modules load.

`strom serve` binds its listeners first and only then imports trio, the protocol and the storage
and opens the logs. From the moment ``listen()`` returns the kernel completes TCP handshakes and
queues the connections (and the bytes clients send) in the backlog; the broker accepts and answers
them as soon as it serves. A client started together with the broker is therefore never refused
and never sits out a reconnect backoff (librdkafka's starts at 100 ms and doubles).

Binding follows ``trio.open_tcp_listeners``: every address ``getaddrinfo`` gives for the host
(all interfaces when the host is empty), ``SO_REUSEADDR``, ``IPV6_V6ONLY`` on IPv6 sockets so a
dual-stack bind does not collide, and a backlog of ``SOMAXCONN``. With port 0 the first socket's
port is reused for the others, so one listener has one port.

This module imports only the standard library and ``broker.config`` (``Listener``, ``ConfigError``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from strom.broker.config import ConfigError, Listener

BACKLOG = socket.SOMAXCONN


@dataclass
class BoundSockets:
    """The sockets bound for one configured listener, and the port they share."""

    listener: Listener
    port: int
    sockets: list[socket.socket]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def _addresses(host: str, port: int) -> list[tuple]:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    seen, out = set(), []
    for family, type_, proto, _, addr in infos:
        if (family, addr[0]) not in seen:
            seen.add((family, addr[0]))
            out.append((family, type_, proto, addr))
    return out


def bind_listener(listener: Listener) -> BoundSockets:
    """Bind and listen on every address of ``listener``; raise ``ConfigError`` saying what to do."""
    port = listener.port
    sockets: list[socket.socket] = []
    try:
        try:
            addresses = _addresses(listener.host, port)
        except socket.gaierror as exc:
            raise ConfigError(f"listeners: cannot resolve host of {listener}: {exc.strerror}") from None
        for family, type_, proto, addr in addresses:
            sock = socket.socket(family, type_, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((addr[0], port, *addr[2:]))
            except OSError as exc:
                raise ConfigError(
                    f"listeners: cannot listen on {listener}: {exc.strerror}; choose another port or stop what uses it"
                ) from None
            sock.listen(BACKLOG)
            port = sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return BoundSockets(listener, port, sockets)


def bind_listeners(listeners: list[Listener]) -> list[BoundSockets]:
    """Bind every configured listener; on any failure close what was bound and re-raise."""
    out: list[BoundSockets] = []
    try:
        for listener in listeners:
            out.append(bind_listener(listener))
    except BaseException:
        for bound in out:
            bound.close()
        raise
    return out

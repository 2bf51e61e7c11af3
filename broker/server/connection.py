"""Listeners and connections: bytes from a socket into the sans-IO protocol, responses back out.

One task per connection reads whatever has arrived, takes every whole request out of it, answers
them in order and sends the responses that are ready together in one write. Record data in Fetch
responses goes from the segment file to the socket with `os.sendfile`; any stream that is not a
plain socket (tests' memory streams, later TLS) gets the bytes read instead. What a request is
answered is the request dispatcher's (`strom.broker.server.dispatch`).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import trio

from strom.broker import context
from strom.broker.apis import error_response as malformed_request_response
from strom.broker.errors import AnswerInVersion, DropConnection
from strom.broker.security import PLAINTEXT, ListenerSecurity
from strom.broker.security.connection import SecureConnection
from strom.broker.server.dispatch import unexpected_error_answer
from strom.protocol.codec import encode_response
from strom.protocol.connection import (
    NEED_DATA,
    SERVER,
    BadRequest,
    Connection,
    ConnectionClosed,
    FrameTooLarge,
    Request,
)
from strom.protocol.errors import EncodeError

if TYPE_CHECKING:
    from strom.broker.server.root import BrokerServer

log = logging.getLogger("strom.server")

RECEIVE_SIZE = 256 * 1024
SEND_TIMEOUT_S = 60.0
# Requests that may wait (long-poll Fetch, JoinGroup, SyncGroup, acks=all Produce in a cluster):
# responses ready before them are sent first.
_WAITING_APIS = frozenset({1, 11, 14})


def _may_wait(broker, request: Request) -> bool:
    key = request.header.api_key
    return key in _WAITING_APIS or (key == 0 and broker.cluster is not None and request.body.acks == -1)


async def send_parts(stream: trio.abc.SendStream, parts: list) -> None:
    """Send bytes and file regions in order, joining neighbouring bytes into one write."""
    sock = getattr(stream, "socket", None)
    pending: list[bytes] = []
    for part in parts:
        if isinstance(part, (bytes, bytearray, memoryview)):
            pending.append(part)
            continue
        if sock is None and part.size <= READ_JOIN_BYTES:
            # TLS (or a test's memory stream): small regions are read and joined with their
            # neighbours, so one fetch answer goes out in few TLS records
            pending.append(_read_region(part, part.position, part.size))
            continue
        if pending:
            await stream.send_all(b"".join(pending))
            pending = []
        if sock is None:
            await _send_read(stream, part)
        else:
            await _sendfile(sock, part)
    if pending:
        await stream.send_all(b"".join(pending) if len(pending) > 1 else pending[0])


READ_JOIN_BYTES = 256 * 1024
READ_CHUNK_BYTES = 1 << 20


def _read_region(region, position: int, size: int) -> bytes:
    data = os.pread(region.fileno(), size, position)
    while len(data) < size:  # pread may return less; only the end of the file returns nothing
        more = os.pread(region.fileno(), size - len(data), position + len(data))
        if not more:
            # the frame's size is already announced: a short answer would desynchronise the client
            raise OSError(f"segment file ended {size - len(data)} bytes early while sending")
        data += more
    return data


async def _send_read(stream, region) -> None:
    """A large region through a stream that cannot sendfile (TLS): read and sent 1 MiB at a time."""
    position, end = region.position, region.position + region.size
    while position < end:
        chunk = _read_region(region, position, min(READ_CHUNK_BYTES, end - position))
        await stream.send_all(chunk)
        position += len(chunk)


async def _sendfile(sock, region) -> None:
    out_fd = sock.fileno()
    in_fd = region.fileno()
    offset, remaining = region.position, region.size
    while remaining:
        try:
            sent = os.sendfile(out_fd, in_fd, offset, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        if sent == 0:
            raise OSError(f"segment file ended {remaining} bytes early while sending")
        offset += sent
        remaining -= sent
    await trio.lowlevel.checkpoint()


async def serve_listener(
    broker: BrokerServer,
    name: str,
    listener: trio.abc.Listener,
    handler: ConnectionHandler,
    *,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on one listening socket of listener `name` and serve each in a task.
    Each accepted connection passes the connection quotas (`strom.broker.connection_quota`)
    before the next is accepted: at a connection limit, or over a creation rate, accepting waits;
    a connection from an IP at its limit is closed at once, one over its IP's creation rate after
    the throttle time."""
    quotas = broker.connection_quotas
    async with trio.open_nursery() as nursery:
        task_status.started()
        while True:
            stream = await listener.accept()
            try:
                admission = await quotas.accept(name, _peer_ip(stream))
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            if admission is None:
                await trio.aclose_forcefully(stream)
            elif isinstance(admission, int):
                nursery.start_soon(_close_after, stream, admission)
            else:
                nursery.start_soon(handler, stream, admission)


async def _close_after(stream, delay_ms: int) -> None:
    try:
        await trio.sleep(delay_ms / 1000)
    finally:
        await trio.aclose_forcefully(stream)


class ConnectionHandler:
    def __init__(self, broker: BrokerServer, security: ListenerSecurity = PLAINTEXT):
        self.broker = broker
        self.security = security
        self.dispatcher = broker.dispatcher  # API handlers and the interceptors around them (dispatch.py)

    async def __call__(self, stream: trio.SocketStream, admission=None) -> None:
        """Serve one connection; `admission`: its place in the connection limits (None for
        connections that did not come through a listener, as tests' memory streams)."""
        peer = _peer_name(stream)
        context.client_host.set("/" + peer.rsplit(":", 1)[0])
        context.listener_name.set(self.security.name)
        conn = Connection(SERVER, max_frame_size=self.broker.config["socket.request.max.bytes"])
        stats = self.broker.stats.open_connection(peer, self.security.name)
        context.connection_stats.set(stats)
        idle_s = max(self.broker.config["connections.max.idle.ms"], 1) / 1000
        secure = SecureConnection(self.security, self.broker, peer, conn)
        scope = trio.CancelScope() if admission is None else admission.scope
        if admission is not None:
            admission.stats = stats
        try:
            with scope:  # cancelled to close the connection for max.connections
                wrapped = await secure.start(stream)
                if wrapped is None:
                    return
                stream = wrapped
                while True:
                    with trio.move_on_after(idle_s) as idle:
                        data = await stream.receive_some(RECEIVE_SIZE)
                    if idle.cancelled_caught:
                        log.info("closing idle connection peer=%s", peer)
                        return
                    self.broker.stats.received(stats, len(data))
                    conn.receive_data(data)
                    if not await self._answer(conn, stream, peer, secure):
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            log.debug("connection lost peer=%s", peer)
        except trio.TooSlowError:
            log.warning("closing connection peer=%s: client did not read its responses", peer)
        except Exception:
            log.exception("closing connection peer=%s after an unexpected error", peer)
        finally:
            self.broker.stats.close_connection(stats)
            if admission is not None:
                self.broker.connection_quotas.release(admission)
            with trio.move_on_after(1):
                await stream.aclose()

    async def _answer(self, conn: Connection, stream, peer: str, secure: SecureConnection) -> bool:
        """Answer every whole request received so far; False when the connection must close."""
        out: list = []
        keep_open = True
        while keep_open:
            event = conn.next_event()
            if event is NEED_DATA:
                break
            if secure.intercepts(event):
                # SASL before authentication (or re-authentication): answered by the session
                if out:
                    await self._send(stream, out)
                    out = []
                keep_open = await secure.answer(event, stream, self._send)
                if keep_open == "dispatch":
                    keep_open = await self._dispatch(conn, event, out, peer)
            elif isinstance(event, Request):
                if out and _may_wait(self.broker, event):
                    await self._send(stream, out)
                    out = []
                keep_open = await self._dispatch(conn, event, out, peer)
                muted = context.muted_until.get()
                if muted and keep_open:  # over a client quota: answer now, read nothing more until then
                    context.muted_until.set(0.0)
                    if out:
                        await self._send(stream, out)
                        out = []
                    await trio.sleep_until(muted)
            elif isinstance(event, BadRequest):
                keep_open = self._reject(conn, event, out, peer)
            elif isinstance(event, FrameTooLarge):
                log.warning(
                    "closing connection peer=%s: request of %d bytes exceeds socket.request.max.bytes=%d",
                    peer,
                    event.size,
                    event.limit,
                )
                keep_open = False
            elif isinstance(event, ConnectionClosed):
                keep_open = False
        if out:
            await self._send(stream, out)
        return keep_open

    async def _dispatch(self, conn: Connection, request: Request, out: list, peer: str) -> bool:
        """Hand ``request`` to the dispatcher; its answer, if any, joins ``out``. False: close."""
        try:
            body = await self.dispatcher.dispatch(request, peer)
        except DropConnection:
            return False
        except AnswerInVersion as answer:  # ApiVersions above a version cap: v0, UNSUPPORTED_VERSION
            header = request.header
            out.extend(encode_response(header.api_key, answer.version, header.correlation_id, answer.body))
            return True
        if body is not None:
            before = len(out)
            try:
                out.extend(conn.send_response(request, body))
            except EncodeError:  # a handler built an answer its version cannot carry: a broker bug
                return self._answer_unencodable(conn, request, out, peer)
            cut = context.cut_answer_after.get()
            if cut is not None:  # a test's fault: the answer's first `cut` bytes, then close
                context.cut_answer_after.set(None)
                answer = b"".join(
                    p if isinstance(p, (bytes, bytearray, memoryview)) else p.read() for p in out[before:]
                )
                out[before:] = [answer[:cut]]
                return False
        return True

    def _answer_unencodable(self, conn: Connection, request: Request, out: list, peer: str) -> bool:
        """The handler's answer does not encode (a field the version lacks, a value out of range): a
        broker bug, answered as a handler that raised is (logged with the encoder's error, the
        request answered UNKNOWN_SERVER_ERROR, the connection kept); closed where that answer does
        not encode either or there is none."""
        body = unexpected_error_answer(request, peer)
        if body is None:
            return False
        try:
            out.extend(conn.send_response(request, body))
        except EncodeError:
            log.exception("closing connection peer=%s: the error answer does not encode either", peer)
            return False
        return True

    def _reject(self, conn: Connection, bad: BadRequest, out: list, peer: str) -> bool:
        header = bad.header
        body = malformed_request_response(bad) if header is not None else None
        if body is None:
            log.warning("closing connection peer=%s: %s", peer, bad.reason)
            return False
        log.warning(
            "answering with an error peer=%s api_key=%d version=%d: %s",
            peer,
            header.api_key,
            header.api_version,
            bad.reason,
        )
        out.extend(conn.send_error(bad, body))
        return True

    async def _send(self, stream, parts: list) -> None:
        self.broker.stats.sent(context.connection_stats.get(None), parts)
        with trio.fail_after(SEND_TIMEOUT_S):
            await send_parts(stream, parts)


def _peer_ip(stream) -> str | None:
    try:
        return stream.socket.getpeername()[0]
    except (AttributeError, OSError):
        return None


def _peer_name(stream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except (AttributeError, OSError):
        return "memory"

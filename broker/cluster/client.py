"""A small trio Kafka client for broker-to-broker requests (replica fetching, transaction
markers and verification, the share-group state persister).

One connection, one request at a time: tasks that share a client take turns (a request waits for
the one before it to be answered, within its own timeout). Every wait is bounded. Any failure
closes the connection and raises `BrokerUnavailable`, so callers back off and reconnect.
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio
from construct import Container

from strom.protocol.connection import CLIENT, NEED_DATA, Connection, ConnectionClosed, Response

from ..security.interbroker import InterBrokerAuthError, secure

log = logging.getLogger("strom.cluster.client")

CONNECT_TIMEOUT_S = 5.0
MAX_RESPONSE_SIZE = 0x7FFFFFFF  # responses are bounded by what this broker asked for (fetch sizes)


class Connector(Protocol):
    """How a broker opens a connection to another: TCP (``trio.open_tcp_stream``), or the
    deterministic simulation's in-memory network (``strom.sim``)."""

    async def __call__(self, host: str, port: int) -> trio.abc.Stream: ...


class BrokerUnavailable(Exception):
    """The other broker could not be reached or broke the connection."""


class BrokerClient:
    """Requests to one other broker over one connection (the protocol's client-role Connection),
    reconnecting on the next request after a failure. Safe to share between tasks: requests are
    sent and answered one at a time, so no task reads another's answer."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        request_timeout_s: float = 30.0,
        security=None,
        connect: Connector | None = None,
    ):
        self._open_stream: Connector = connect or trio.open_tcp_stream
        self.security = security  # broker.security.interbroker.InterBrokerSecurity: TLS and SASL, or None
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._stream: trio.abc.Stream | None = None
        self._conn = Connection(CLIENT, MAX_RESPONSE_SIZE, client_id, first_correlation_id=1)
        self._turn = trio.Lock()  # one request in flight: its answer is the next one read

    async def _connect(self) -> trio.abc.Stream:
        if self._stream is None:
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    stream = await self._open_stream(self.host, self.port)
                    try:
                        self._stream = await secure(stream, self.host, self.security, self.client_id)
                    except BaseException:
                        with trio.move_on_after(1):
                            await stream.aclose()
                        raise
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, InterBrokerAuthError) as exc:
                raise BrokerUnavailable(f"cannot connect to {self.host}:{self.port}: {exc}") from None
            # a fresh connection: nothing buffered, nothing in flight; correlation ids go on
            self._conn = Connection(
                CLIENT, MAX_RESPONSE_SIZE, self.client_id, first_correlation_id=self._conn.last_correlation_id + 1
            )
        return self._stream

    async def request(self, api_key: int, version: int, body: dict, *, timeout_s: float | None = None) -> Container:
        timeout = timeout_s or self.request_timeout_s
        try:
            with trio.fail_after(timeout):  # the wait for the turn counts too
                await self._turn.acquire()
        except trio.TooSlowError:
            raise BrokerUnavailable(
                f"{self.host}:{self.port}: no answer to the requests before this one within {timeout:g} s"
            ) from None
        try:
            return await self._request(api_key, version, body, timeout)
        finally:
            self._turn.release()

    async def _request(self, api_key: int, version: int, body: dict, limit_s: float) -> Container:
        stream = await self._connect()
        conn = self._conn
        try:
            with trio.fail_after(limit_s):
                await stream.send_all(conn.send_request(api_key, version, body))
                sent = conn.last_correlation_id
                while (event := conn.next_event()) is NEED_DATA:
                    conn.receive_data(await stream.receive_some(1 << 20))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
            await self.close()
            raise BrokerUnavailable(f"{self.host}:{self.port}: {exc or type(exc).__name__}") from None
        if isinstance(event, ConnectionClosed):
            await self.close()
            raise BrokerUnavailable(f"{self.host}:{self.port}: connection closed")
        if not isinstance(event, Response) or event.correlation_id != sent:
            await self.close()
            raise BrokerUnavailable(f"{self.host}:{self.port}: unexpected answer to correlation id {sent}: {event}")
        return event.body

    async def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.move_on_after(1):
                await stream.aclose()

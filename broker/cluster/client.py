"""A small trio Kafka client for broker-to-broker requests (replica fetching).

One connection, requests answered in order; every wait is bounded. Any failure closes the
connection and raises `BrokerUnavailable`, so callers back off and reconnect.
"""
from __future__ import annotations

import itertools
import logging

import trio

from strom.protocol.codec import decode_response, encode_request

from ..security.interbroker import InterBrokerAuthError, secure

log = logging.getLogger("strom.cluster.client")

CONNECT_TIMEOUT_S = 5.0


class BrokerUnavailable(Exception):
    """The other broker could not be reached or broke the connection."""


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str, request_timeout_s: float = 30.0, security=None):
        self.security = security  # broker.security.interbroker.InterBrokerSecurity: TLS and SASL, or None
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._stream: trio.SocketStream | None = None
        self._buffer = bytearray()
        self._correlation = itertools.count(1)

    async def _connect(self) -> trio.SocketStream:
        if self._stream is None:
            try:
                with trio.fail_after(CONNECT_TIMEOUT_S):
                    stream = await trio.open_tcp_stream(self.host, self.port)
                    try:
                        self._stream = await secure(stream, self.host, self.security, self.client_id)
                    except BaseException:
                        with trio.move_on_after(1):
                            await stream.aclose()
                        raise
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, InterBrokerAuthError) as exc:
                raise BrokerUnavailable(f"cannot connect to {self.host}:{self.port}: {exc}") from None
            self._buffer.clear()
        return self._stream

    async def request(self, api_key: int, version: int, body: dict, *, timeout_s: float | None = None):
        stream = await self._connect()
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        try:
            with trio.fail_after(timeout_s or self.request_timeout_s):
                await stream.send_all(encode_request(api_key, version, correlation_id, self.client_id, body))
                frame = await self._receive_frame(stream)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, EOFError) as exc:
            await self.close()
            raise BrokerUnavailable(f"{self.host}:{self.port}: {exc or type(exc).__name__}") from None
        received, response = decode_response(api_key, version, frame)
        if received != correlation_id:
            await self.close()
            raise BrokerUnavailable(f"{self.host}:{self.port}: correlation id {received} != {correlation_id}")
        return response

    async def _receive_frame(self, stream) -> bytes:
        buffer = self._buffer
        while True:
            if len(buffer) >= 4:
                size = int.from_bytes(buffer[:4], "big")
                if len(buffer) >= 4 + size:
                    frame = bytes(buffer[4:4 + size])
                    del buffer[:4 + size]
                    return frame
            data = await stream.receive_some(1 << 20)
            if not data:
                raise EOFError("connection closed")
            buffer += data

    async def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.move_on_after(1):
                await stream.aclose()

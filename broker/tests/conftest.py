"""An in-process broker (storage under tmp_path, no listener) and a client over trio memory streams."""
from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from strom.broker.server.root import BrokerServer
from strom.broker.config import BrokerConfig
from strom.broker.server.connection import ConnectionHandler
from strom.protocol.codec import decode_response, encode_request


class Client:
    """Sends requests over one in-memory connection and decodes the responses."""

    def __init__(self, stream, client_id: str = "test"):
        self.stream = stream
        self.client_id = client_id
        self.correlation = itertools.count(1)
        self.buffer = bytearray()

    async def send(self, api_key: int, version: int, body: dict) -> int:
        correlation_id = next(self.correlation)
        await self.stream.send_all(encode_request(api_key, version, correlation_id, self.client_id, body))
        return correlation_id

    async def receive(self, api_key: int, version: int):
        frame = await self.receive_frame()
        return decode_response(api_key, version, frame)

    async def receive_frame(self) -> bytes:
        while len(self.buffer) < 4 or len(self.buffer) < 4 + int.from_bytes(self.buffer[:4], "big"):
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("broker closed the connection")
            self.buffer += data
        size = int.from_bytes(self.buffer[:4], "big")
        frame = bytes(self.buffer[4:4 + size])
        del self.buffer[:4 + size]
        return frame

    async def request(self, api_key: int, version: int, body: dict):
        sent = await self.send(api_key, version, body)
        correlation_id, response = await self.receive(api_key, version)
        assert correlation_id == sent
        return response


def make_broker(path, **overrides) -> BrokerServer:
    props = {"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    broker = BrokerServer(BrokerConfig(props))
    broker.open_storage()
    return broker


@pytest.fixture
def broker(tmp_path):
    b = make_broker(tmp_path / "data")
    yield b
    b.close()


def open_client(broker: BrokerServer, nursery) -> Client:
    """A Client on a new in-memory connection to `broker`, served in `nursery`."""
    client_side, server_side = trio.testing.memory_stream_pair()
    nursery.start_soon(ConnectionHandler(broker), server_side)
    return Client(client_side)


@pytest.fixture
async def connect(broker, nursery):
    """connect() -> a Client on a new in-memory connection to `broker`."""

    async def connect_client() -> Client:
        return open_client(broker, nursery)

    return connect_client

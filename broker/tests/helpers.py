"""What the in-process broker tests share: a broker with storage under a test's directory (no
listener), and a client that talks Kafka's protocol to it over a trio memory stream.
The fixtures built from these (``broker``, ``connect``) are in conftest.py beside this module."""
from __future__ import annotations

import itertools

import trio
import trio.testing

from strom.broker.server.root import Broker
from strom.broker.config import BrokerConfig
from strom.broker.server.connection import ConnectionHandler
from strom.protocol.codec import decode_response, encode_request

# a group coordinator that rebalances at once, over few partitions (the group tests' brokers)
GROUP_TEST_CONFIG = {"group_initial_rebalance_delay_ms": 0, "offsets_topic_num_partitions": 5,
                     "num_partitions": 3}


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


def make_broker(path, **overrides) -> Broker:
    props = {"log.dirs": str(path), "listeners": "PLAINTEXT://127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    broker = Broker(BrokerConfig(props))
    broker.open_storage()
    return broker


def open_client(broker: Broker, nursery) -> Client:
    """A Client on a new in-memory connection to `broker`, served in `nursery`."""
    client_side, server_side = trio.testing.memory_stream_pair()
    nursery.start_soon(ConnectionHandler(broker), server_side)
    return Client(client_side)

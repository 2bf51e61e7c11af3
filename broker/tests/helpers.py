"""What the in-process broker tests share: a broker with storage under a test's directory (no
listener), and a client that talks Kafka's protocol to it over a trio memory stream.
The fixtures built from these (``broker``, ``connect``) are in conftest.py beside this module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import trio
import trio.testing
from construct import Container

from strom.broker.config import BrokerConfig
from strom.broker.server.connection import ConnectionHandler
from strom.broker.server.root import BrokerServer
from strom.protocol.connection import CLIENT, NEED_DATA, Connection, ConnectionClosed, RawFrame, Response

# a group coordinator that rebalances at once, over few partitions (the group tests' brokers)
GROUP_TEST_CONFIG = {"group_initial_rebalance_delay_ms": 0, "offsets_topic_num_partitions": 5, "num_partitions": 3}


class Client:
    """Sends requests over one in-memory connection and decodes the responses (the protocol's
    client-role Connection over a trio stream)."""

    def __init__(self, stream, client_id: str = "test"):
        self.stream = stream
        self.conn = Connection(CLIENT, 0x7FFFFFFF, client_id, first_correlation_id=1)

    @property
    def client_id(self) -> str | None:
        return self.conn.client_id

    @client_id.setter
    def client_id(self, value: str | None) -> None:
        self.conn.client_id = value  # the header of the requests sent from now on

    async def send(self, api_key: int, version: int, body: dict) -> int:
        await self.stream.send_all(self.conn.send_request(api_key, version, body))
        return self.conn.last_correlation_id

    async def receive(self, api_key: int, version: int) -> tuple[int, Container]:
        """The next response, which must answer a request of ``api_key`` sent with ``send``."""
        event = await self._next_event()
        if not isinstance(event, Response):
            raise AssertionError(f"expected a response, got {event}")
        assert event.api_key == api_key and event.api_version in (version, 0), event
        return event.correlation_id, event.body

    async def receive_frame(self) -> bytes:
        """The next frame undecoded (correlation id first); EOFError when the broker closed."""
        self.conn.raw_frames = True
        try:
            event = await self._next_event()
        finally:
            self.conn.raw_frames = False
        assert isinstance(event, RawFrame), event
        return event.data

    async def _next_event(self):
        while (event := self.conn.next_event()) is NEED_DATA:
            self.conn.receive_data(await self.stream.receive_some(65536))
        if isinstance(event, ConnectionClosed):
            raise EOFError("broker closed the connection")
        return event

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


def open_client(broker: BrokerServer, nursery) -> Client:
    """A Client on a new in-memory connection to `broker`, served in `nursery`."""
    client_side, server_side = trio.testing.memory_stream_pair()
    nursery.start_soon(ConnectionHandler(broker), server_side)
    return Client(client_side)


Restart = Callable[[], Awaitable[tuple[BrokerServer, Client]]]


async def transaction_env(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[tuple[BrokerServer, Client, Restart]]:
    """(broker, client, restart) with the transaction coordinator's timers and marker tasks running: the
    `env` fixture of the broker's and the transaction coordinator's tests (their conftests declare it)."""
    state: dict[str, BrokerServer] = {}

    async def start() -> tuple[BrokerServer, Client]:
        broker = make_broker(tmp_path / "data", transaction_state_log_num_partitions=3, offsets_topic_num_partitions=3)
        assert broker.txn is not None
        await nursery.start(broker.txn.run)
        state["broker"] = broker
        return broker, open_client(broker, nursery)

    async def restart() -> tuple[BrokerServer, Client]:
        state["broker"].close()
        return await start()

    broker, client = await start()
    yield broker, client, restart
    state["broker"].close()

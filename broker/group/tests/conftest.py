"""A broker with its group coordinator running, and clients over trio memory streams."""
from __future__ import annotations

import pytest
import trio
import trio.testing

from broker.server import ConnectionHandler
from broker.tests.conftest import Client, make_broker

GROUP_TEST_CONFIG = {"group_initial_rebalance_delay_ms": 0, "offsets_topic_num_partitions": 5,
                     "num_partitions": 3}


@pytest.fixture
def group_broker(tmp_path):
    b = make_broker(tmp_path / "data", **GROUP_TEST_CONFIG)
    yield b
    b.close()


@pytest.fixture
async def gconnect(group_broker, nursery):
    """gconnect() -> a Client on a new in-memory connection; the coordinator's timers run."""
    nursery.start_soon(group_broker.groups.run)
    handler = ConnectionHandler(group_broker)

    async def open_client() -> Client:
        client_side, server_side = trio.testing.memory_stream_pair()
        nursery.start_soon(handler, server_side)
        return Client(client_side)

    return open_client

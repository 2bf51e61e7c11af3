"""Fixtures shared by the broker's test folders (broker/tests, broker/coordinator/*/tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trio

from strom.broker.server.root import BrokerServer
from strom.broker.tests.helpers import Client, make_broker, open_client

Restart = Callable[[], Awaitable[tuple[BrokerServer, Client]]]


@pytest.fixture
async def env(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[tuple[BrokerServer, Client, Restart]]:
    """(broker, client, restart) with the transaction coordinator's timers and marker tasks running."""
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

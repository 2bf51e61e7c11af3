"""A broker with its group coordinator running, and clients over trio memory streams."""

from __future__ import annotations

import pytest

from strom.broker.tests.helpers import GROUP_TEST_CONFIG, Client, make_broker, open_client


@pytest.fixture
def group_broker(tmp_path):
    b = make_broker(tmp_path / "data", **GROUP_TEST_CONFIG)
    yield b
    b.close()


@pytest.fixture
async def gconnect(group_broker, nursery):
    """gconnect() -> a Client on a new in-memory connection; the coordinator's timers run."""
    nursery.start_soon(group_broker.groups.run)

    async def connect_client() -> Client:
        return open_client(group_broker, nursery)

    return connect_client

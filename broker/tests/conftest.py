"""Fixtures: an in-process broker (storage under tmp_path, no listener) and clients over trio memory
streams (the helpers they use are in helpers.py)."""

from __future__ import annotations

import pytest

from strom.broker.tests.helpers import Client, make_broker, open_client, transaction_env

# (broker, client, restart) with the transaction coordinator running
env = pytest.fixture(transaction_env, name="env")


@pytest.fixture
def broker(tmp_path):
    b = make_broker(tmp_path / "data")
    yield b
    b.close()


@pytest.fixture
async def connect(broker, nursery):
    """connect() -> a Client on a new in-memory connection to `broker`."""

    async def connect_client() -> Client:
        return open_client(broker, nursery)

    return connect_client

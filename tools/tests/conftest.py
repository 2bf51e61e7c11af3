"""One live Strom broker (a child process on 127.0.0.1, OS-chosen port) for the tool tests.

Every test uses its own topic names, so they share the broker. The broker writes an offset
index entry for every batch (``log.index.interval.bytes=1``) so dump-log has indexes to check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from strom.tools.broker_process import BrokerProcess
from strom.tools.tests.helpers import BROKER_OVERRIDES, Strom


@pytest.fixture(scope="session")
def tools_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("tools-broker"), BROKER_OVERRIDES).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    return "t-" + re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:200]


@pytest.fixture
def strom(tools_broker: BrokerProcess) -> Strom:
    return Strom(tools_broker)

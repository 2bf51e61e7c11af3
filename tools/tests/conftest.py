"""One live Strom broker (a child process on 127.0.0.1, OS-chosen port) for the tool tests.

Every test uses its own topic names, so they share the broker. The broker writes an offset
index entry for every batch (``log.index.interval.bytes=1``) so dump-log has indexes to check.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner, Result

from strom.tools.broker_process import BrokerProcess

BROKER_OVERRIDES = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "log.index.interval.bytes": "1",
}


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


class Strom:
    """Runs `strom ...` in-process through click, against the test broker."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None, bootstrap: bool = True) -> Result:
        from strom.broker.cli import main

        argv = list(args)
        if bootstrap:
            argv[1:1] = ["--bootstrap-server", self.broker.bootstrap]
        return self.runner.invoke(main, argv, input=input, prog_name="strom")

    def ok(self, *args: str, input: str | None = None) -> Result:
        result = self(*args, input=input)
        assert result.exit_code == 0, f"strom {' '.join(args)} failed ({result.exit_code}):\n{result.output}" \
                                      f"\n{result.exception!r}"
        return result

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.broker.log_dir / f"{topic}-{partition}"


@pytest.fixture
def strom(tools_broker: BrokerProcess) -> Strom:
    return Strom(tools_broker)

"""What the tool tests share: `strom ...` run in-process through click against a test broker, and
the broker settings the tool tests' broker starts with (fixtures: conftest.py beside this module)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from strom.tools.broker_process import BrokerProcess

# every batch gets an offset index entry (log.index.interval.bytes=1), so dump-log has indexes to check
BROKER_OVERRIDES = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "log.index.interval.bytes": "1",
}


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
        assert result.exit_code == 0, (
            f"strom {' '.join(args)} failed ({result.exit_code}):\n{result.output}\n{result.exception!r}"
        )
        return result

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.broker.log_dir / f"{topic}-{partition}"

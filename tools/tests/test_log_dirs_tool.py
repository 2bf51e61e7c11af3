"""`strom log-dirs` against a real broker with two log dirs, one of which cannot be used."""

from __future__ import annotations

import json

from click.testing import CliRunner

from strom.tools.broker_process import BrokerProcess
from strom.tools.log_dirs import log_dirs


def test_log_dirs_shows_an_offline_dir_and_the_partitions_of_the_working_one(tmp_path):
    good = tmp_path / "good"
    broken = tmp_path / "broken"
    broken.write_text("a file where a log dir should be")  # the dir cannot be created: offline
    broker = BrokerProcess(tmp_path / "b", {"log.dirs": f"{good},{broken}", "num.partitions": "2"})
    broker.start()
    try:
        runner = CliRunner()
        from strom.tools.admin import topics

        created = runner.invoke(
            topics, ["--bootstrap-server", broker.bootstrap, "create", "--topic", "t", "--partitions", "2"]
        )
        assert created.exit_code == 0, created.output
        result = runner.invoke(log_dirs, ["--bootstrap-server", broker.bootstrap, "--json"])
        doc = json.loads(result.output)
        (entry,) = doc["brokers"]
        dirs = {d["logDir"]: d for d in entry["logDirs"]}
        assert dirs[str(broken)]["error"] == "KAFKA_STORAGE_ERROR"
        assert dirs[str(good)]["error"] is None
        assert sorted(p["partition"] for p in dirs[str(good)]["partitions"]) == ["t-0", "t-1"]
        assert dirs[str(good)]["totalBytes"] > 0
        human = runner.invoke(log_dirs, ["--bootstrap-server", broker.bootstrap])
        assert human.exit_code == 1  # a failed dir is an error for scripts
        assert "OFFLINE (KAFKA_STORAGE_ERROR)" in human.output and "2 partitions" in human.output
        assert "load log dir" in broker.log_tail() and str(broken) in broker.log_tail()
    finally:
        broker.stop()

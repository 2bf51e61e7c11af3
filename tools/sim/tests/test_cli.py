"""``python -m strom.sim``: every SimConfig field is an option, a failing seed's report replays it
with the same configuration, and a batch runs on several processes with a summary."""

from __future__ import annotations

import argparse
import shlex

import pytest

from strom.sim import SimConfig
from strom.sim.__main__ import main
from strom.sim.options import add_config_options, config_args, config_from_args, replay_command
from strom.sim.run import SimResult
from strom.sim.trace import Trace

CONFIGS = [
    SimConfig(),
    SimConfig(duration=3.0),
    SimConfig(duration=10, fault_weights={"isolate": 1}, fault_rate=1.0),
    SimConfig(duration=8, fault_weights={"crash": 3, "isolate": 1}, fast_restarts=True),
    SimConfig(faults=False, partitions=3, broker_configs={"log.segment.bytes": "4096", "a.list": "x,y"}),
    SimConfig(topic_configs={"cleanup.policy": "compact"}, settle=30.0, idempotent_producers=0),
]


def _parse(words: list[str]) -> SimConfig:
    parser = argparse.ArgumentParser()
    add_config_options(parser)
    return config_from_args(parser.parse_args(words))


@pytest.mark.parametrize("config", CONFIGS)
def test_the_options_of_a_config_give_that_config(config):
    assert _parse(config_args(config)) == config


def test_a_failing_seeds_report_replays_it_with_its_configuration():
    config = SimConfig(duration=3.0, fault_weights={"isolate": 1})
    result = SimResult(4, ["an acknowledged record is lost"], Trace(), "", 0.0, 0, {}, 0, config)
    replay = next(line for line in result.report().splitlines() if "replay:" in line).split("replay: ", 1)[1]
    words = shlex.split(replay)
    assert words[:5] == ["python", "-m", "strom.sim", "--seed", "4"]
    assert _parse([w for w in words[5:] if w != "--trace"]) == config
    assert replay == replay_command(4, config)


def test_a_batch_on_two_processes_reports_every_seed(capsys):
    assert main(["--seeds", "2", "--start", "5", "--duration", "0.5", "--no-faults", "--jobs", "2"]) == 0
    summary = capsys.readouterr().out
    assert "2 seeds (5..6)" in summary and "2 passed, 0 failed" in summary and "CPU s per seed" in summary

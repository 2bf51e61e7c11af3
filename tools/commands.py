"""The `strom` subcommands that talk to a running cluster (topics, produce, consume, ...).

Each is a click command; `broker/cli.py` adds every one in COMMANDS to the `strom` group. They
import their client libraries lazily, so `strom serve` starts without loading them.
"""
from __future__ import annotations

import click

from strom.tools.admin import configs, topics
from strom.tools.bench.testbroker import bench_testbroker
from strom.tools.bench.benchmark import bench
from strom.tools.console import consume, produce
from strom.tools.control_cli import control
from strom.tools.dump_log import dump_log
from strom.tools.groups import groups
from strom.tools.log_dirs import log_dirs
from strom.tools.perf import perf
from strom.tools.spark.pipeline import pipeline

COMMANDS: list[click.Command] = [topics, produce, consume, groups, configs, dump_log, perf, bench, pipeline,
                                 control, log_dirs, bench_testbroker]

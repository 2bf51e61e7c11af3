"""The `strom` subcommands that talk to a running cluster (topics, produce, consume, ...).

Each is a click command; `broker/cli.py` adds every one in COMMANDS to the `strom` group. They
import their client libraries lazily, so `strom serve` starts without loading them.
"""
from __future__ import annotations

import click

from tools.admin import configs, topics
from tools.benchmark import bench
from tools.console import consume, produce
from tools.dump_log import dump_log
from tools.groups import groups
from tools.perf import perf
from tools.spark.pipeline import pipeline

COMMANDS: list[click.Command] = [topics, produce, consume, groups, configs, dump_log, perf, bench, pipeline]

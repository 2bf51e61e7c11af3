"""The `strom` subcommands that talk to a running cluster (topics, produce, consume, ...).

Each is a click command; `broker/cli.py` adds every one in COMMANDS to the `strom` group. They
import their client libraries lazily, so `strom serve` starts without loading them.
"""
from __future__ import annotations

import click

COMMANDS: list[click.Command] = []

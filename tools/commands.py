"""The `strom` subcommands beside `serve`: the tools a Kafka user expects (topics, configs, produce,
consume, groups, perf, dump-log, log-dirs), the benchmarks (tools/bench), the Spark pipeline
(tools/spark), the control endpoint's client and the documentation site (`strom docs`).

`broker/cli.py` lists :data:`COMMANDS` and loads a command's module only when it is asked for,
so `strom serve` imports none of them. A command whose client library comes with an extra of
the distribution (``pip install 'strom[tools]'``, ``'strom[spark]'``) says which one to install
when that library is missing, before it runs.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class Extra:
    """An optional part of the distribution (pyproject.toml's optional-dependencies) and the
    modules a command needs from it."""

    name: str
    modules: tuple[str, ...]

    def missing(self) -> list[str]:
        return [module for module in self.modules if importlib.util.find_spec(module) is None]


TOOLS = Extra("tools", ("confluent_kafka",))
SPARK = Extra("spark", ("pyspark", "pyarrow", "confluent_kafka"))
DOCS = Extra("docs", ("sphinx", "myst_parser", "furo", "sphinx_click"))


@dataclass(frozen=True)
class Entry:
    """Where a command lives (module and attribute) and the extra it needs, if any."""

    module: str
    attribute: str
    extra: Extra | None = None


COMMANDS: dict[str, Entry] = {
    "topics": Entry("strom.tools.admin", "topics", TOOLS),
    "configs": Entry("strom.tools.admin", "configs", TOOLS),
    "produce": Entry("strom.tools.console", "produce", TOOLS),
    "consume": Entry("strom.tools.console", "consume", TOOLS),
    "groups": Entry("strom.tools.groups", "groups", TOOLS),
    "perf": Entry("strom.tools.perf", "perf", TOOLS),
    "dump-log": Entry("strom.tools.dump_log", "dump_log"),
    "log-dirs": Entry("strom.tools.log_dirs", "log_dirs"),
    "control": Entry("strom.tools.control_cli", "control"),
    "bench": Entry("strom.tools.bench.benchmark", "bench", TOOLS),
    "bench-testbroker": Entry("strom.tools.bench.testbroker", "bench_testbroker", TOOLS),
    "pipeline": Entry("strom.tools.spark.pipeline", "pipeline", SPARK),
    "docs": Entry("strom.tools.docs_site", "docs", DOCS),
}


def missing_extra_message(command: str, extra: Extra, missing: list[str]) -> str:
    return (
        f"`strom {command}` needs {', '.join(missing)}, which come with the {extra.name!r} extra: "
        f"pip install 'strom[{extra.name}]'"
    )


def _checked(command: click.Command, extra: Extra) -> click.Command:
    """``command``, refusing to run (not to show its help) while a module of ``extra`` is missing."""
    invoke = command.invoke

    def invoke_when_installed(ctx: click.Context) -> Any:
        missing = extra.missing()
        if missing:
            raise click.ClickException(missing_extra_message(command.name or "", extra, missing))
        return invoke(ctx)

    command.invoke = invoke_when_installed  # type: ignore[method-assign]
    return command


@functools.cache
def load(name: str) -> click.Command | None:
    """The command called ``name`` (its module imported on the first call), or None when there is
    none."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    command = getattr(importlib.import_module(entry.module), entry.attribute)
    assert isinstance(command, click.Command) and command.name == name, (name, command)
    return command if entry.extra is None else _checked(command, entry.extra)

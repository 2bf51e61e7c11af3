"""``SimConfig`` on the command line, both ways: options for every field of the configuration
(``--duration 3``, ``--fault-weights isolate=1,crash=2``, ``--no-faults``,
``--broker-configs log.segment.bytes=4096``) and the command that replays a seed with a given
configuration, which a failing seed's report prints.

The options follow the dataclass's fields, so a field added to ``SimConfig`` is an option too:
numbers and strings take a value, a flag that is off by default is ``--name``, one that is on is
``--no-name``, and a ``dict[str, ...]`` field takes ``key=value`` pairs, comma-separated or repeated
(its values converted to the dict's value type), replacing the default dict.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from typing import Any

from .run import SimConfig

_DEFAULTS = SimConfig()


def _fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(SimConfig))


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _dict_value_type(field: dataclasses.Field) -> type:
    annotation = str(field.type).replace(" ", "")
    if annotation.endswith(",int]"):
        return int
    if annotation.endswith(",float]"):
        return float
    return str


def _kind(field: dataclasses.Field) -> type:
    value = getattr(_DEFAULTS, field.name)
    return dict if isinstance(value, dict) else type(value)


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """An option per ``SimConfig`` field (defaults: the dataclass's)."""
    group = parser.add_argument_group("simulation (SimConfig)")
    for field in _fields():
        default = getattr(_DEFAULTS, field.name)
        kind = _kind(field)
        dest = f"config_{field.name}"
        if kind is bool:
            flag = _option(field.name) if not default else "--no-" + field.name.replace("_", "-")
            group.add_argument(
                flag, dest=dest, action="store_true", help=f"{field.name} = {not default} (default {default})"
            )
        elif kind is dict:
            group.add_argument(
                _option(field.name),
                dest=dest,
                action="append",
                metavar="KEY=VALUE" if _dict_value_type(field) is str else "KEY=VALUE[,KEY=VALUE]",
                help=f"replaces the default {default or '{}'} (repeatable)",
            )
        else:
            group.add_argument(
                _option(field.name), dest=dest, type=kind, metavar=kind.__name__.upper(), help=f"default {default}"
            )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    changes: dict[str, Any] = {}
    for field in _fields():
        value = getattr(args, f"config_{field.name}", None)
        kind = _kind(field)
        if kind is bool:
            if value:
                changes[field.name] = not getattr(_DEFAULTS, field.name)
        elif kind is dict:
            if value is not None:
                changes[field.name] = _parse_pairs(value, _dict_value_type(field), field)
        elif value is not None:
            changes[field.name] = value
    return dataclasses.replace(SimConfig(), **changes)


def _parse_pairs(values: list[str], value_type: type, field: dataclasses.Field) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for value in values:
        # a str-valued dict (configs) takes one pair per option: a config value may hold commas
        parts = value.split(",") if value_type is not str else [value]
        for part in parts:
            key, sep, item = part.partition("=")
            if not sep or not key:
                raise SystemExit(f"{_option(field.name)}: expected KEY=VALUE, got {part!r}")
            out[key] = value_type(item)
    return out


def config_args(config: SimConfig) -> list[str]:
    """The options that give ``config`` (only where it differs from the defaults)."""
    args: list[str] = []
    for field in _fields():
        value = getattr(config, field.name)
        default = getattr(_DEFAULTS, field.name)
        if value == default:
            continue
        kind = _kind(field)
        if kind is bool:
            args.append(_option(field.name) if value else "--no-" + field.name.replace("_", "-"))
        elif kind is dict:
            if _dict_value_type(field) is str:
                for k, v in sorted(value.items()):
                    args += [_option(field.name), f"{k}={v}"]
            else:
                args += [_option(field.name), ",".join(f"{k}={v}" for k, v in sorted(value.items()))]
        else:
            args += [_option(field.name), str(value)]
    return args


def replay_command(seed: int, config: SimConfig | None, *, trace: bool = True) -> str:
    """The shell command that replays ``seed`` with ``config``."""
    words = ["python", "-m", "strom.sim", "--seed", str(seed), *config_args(config or SimConfig())]
    if trace:
        words.append("--trace")
    return shlex.join(words)

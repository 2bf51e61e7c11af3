"""The `strom` command."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
from pathlib import Path

import click

from strom.broker import logging_setup as logs
from strom.broker.server.listen import BoundSockets, bind_listeners

from .config import DEV_CONFIGS, BrokerConfig, ConfigError, read_properties

log = logging.getLogger("strom")


def _overrides(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected key=value", param_hint="--override")
        out[key.strip()] = value.strip()
    return out


class _Commands(click.Group):
    """`serve` is built in; the tools' commands load only when one of them is asked for, so that
    `strom serve` starts without importing them (or their client library)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from strom.tools.commands import COMMANDS

        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is not None:
            return command
        from strom.tools.commands import load

        return load(name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="strom")
def main() -> None:
    """Strom: a Kafka-compatible message broker."""


@main.command()
@click.argument("properties", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a config key, overriding the properties file (repeatable).",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write JSON with the bound host, port and pid here once accepting connections.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--dev",
    is_flag=True,
    help="Test-friendly defaults (no initial rebalance delay, short session timeouts allowed, "
    "auto-create, one offsets partition) and a control endpoint on 127.0.0.1 for fault "
    "injection; the properties file and --override still win.",
)
def serve(
    properties: Path | None, overrides: tuple[str, ...], ready_file: Path | None, log_level: str, dev: bool
) -> None:
    """Start a broker, as Kafka's kafka-server-start.

    With no arguments: a standalone broker on 127.0.0.1:9092 with data under ./strom-data.
    """
    logs.setup(log_level)
    try:
        props = {**DEV_CONFIGS, "control.listener": "127.0.0.1:0"} if dev else {}
        props.update(read_properties(properties) if properties else {})
        props.update(_overrides(overrides))
        config = BrokerConfig(props)
    except ConfigError as exc:
        raise click.ClickException(f"invalid configuration: {exc}") from None
    if config.console_listeners:
        from strom.broker.console import unavailable_reason

        reason = unavailable_reason()
        if reason is not None:
            raise click.ClickException(reason)
    try:
        # listen before importing the broker: connections queue in the backlog meanwhile
        prebound = bind_listeners(config.listeners)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    import trio

    try:
        if config.control is None:
            trio.run(_serve, config, prebound, ready_file)
        else:  # test hooks, only when asked for: `strom control pause` stops the broker's timers too
            from strom.testing.clock import PausableClock

            trio.run(_serve, config, prebound, ready_file, clock=PausableClock())
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass


async def _serve(config: BrokerConfig, prebound: list[BoundSockets], ready_file: Path | None) -> None:
    import trio

    from strom.broker.server.root import BrokerServer

    broker = BrokerServer(config)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(broker.run, prebound)
        # The start-up heap (every log, segment, index, topic and group loaded) lives as long as the
        # process: frozen out of the collector, a full collection no longer walks it (one on a
        # 10,000-partition broker stalled it ~0.2 s). Only here: the embedded broker lives in the
        # user's process, whose heap is not ours to freeze.
        gc.freeze()
        control = None
        if config.control is not None:  # the test control endpoint (control.listener, --dev)
            from strom.testing.control_endpoint import serve_control

            control = f"{config.control.host}:{await nursery.start(serve_control, broker, config.control)}"
            log.info("control endpoint: strom control --to %s ...", control)
        if ready_file is not None:
            _write_ready(ready_file, bound, broker.console.url if broker.console is not None else None, control)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("shutting down on %s", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def _write_ready(path: Path, bound, console: str | None = None, control: str | None = None) -> None:
    first = bound[0].listener
    data = {
        "host": first.host,
        "port": first.port,
        "pid": os.getpid(),
        "listeners": [str(b.listener) for b in bound],
        "bootstrap_servers": ",".join(f"{b.advertised.host}:{b.advertised.port}" for b in bound),
    }
    if console is not None:
        data["console"] = console
    if control is not None:
        data["control"] = control
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())

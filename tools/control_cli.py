"""`strom control`: fault injection and test control of a running broker, for tests in any language.

The broker must run with its control endpoint (`strom serve --dev`, or `control.listener`);
`--to` names it, or `--ready-file` reads it from the file `strom serve --ready-file` wrote.

    strom serve --dev --ready-file ready.json &
    strom control --ready-file ready.json fault --api Produce --error NOT_LEADER_OR_FOLLOWER --count 2
    strom control --ready-file ready.json cap 2.8
    strom control --ready-file ready.json clear

Every command prints the broker's answer as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from strom.testing.control import ControlClient, ControlError


def _address(to: str | None, ready_file: Path | None) -> str:
    if to:
        return to
    if ready_file is None:
        raise click.UsageError("say where the broker's control endpoint is: --to HOST:PORT or --ready-file FILE")
    try:
        doc = json.loads(ready_file.read_text())
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read {ready_file}: {exc}") from None
    if not doc.get("control"):
        raise click.ClickException(
            f"{ready_file} names no control endpoint: start the broker with "
            f"`strom serve --dev` (or set control.listener)"
        )
    return doc["control"]


@click.group("control")
@click.option("--to", metavar="HOST:PORT", help="The broker's control endpoint.")
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the control endpoint from the ready file of `strom serve --ready-file`.",
)
@click.pass_context
def control(ctx: click.Context, to: str | None, ready_file: Path | None) -> None:
    """Fault injection and test control of a running broker (`strom serve --dev`)."""
    ctx.obj = lambda: ControlClient(_address(to, ready_file))


def _call(ctx: click.Context, operation: str, args: dict[str, Any] | None = None) -> None:
    try:
        result = ctx.obj()(operation, args or {})
    except ControlError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=None))


@control.command()
@click.option("--api", help="Kafka API name (Produce, Fetch, ...) or key; default: any API.")
@click.option("--error", help="Answer with this error (NOT_LEADER_OR_FOLLOWER, or a code).")
@click.option("--delay-ms", type=int, default=0, help="Hold the request this long first.")
@click.option(
    "--drop",
    type=click.Choice(["before", "after"]),
    help="Close the connection before handling the request, or after (it took effect).",
)
@click.option("--count", type=int, default=1, show_default=True, help="How many requests; 0: all until cleared.")
@click.option("--topic", help="Only requests for this topic.")
@click.option("--partition", type=int, help="Only this partition of --topic.")
@click.option("--client-id", help="Only requests of this client id.")
@click.pass_context
def fault(ctx: click.Context, api, error, delay_ms, drop, count, topic, partition, client_id) -> None:
    """Make the next COUNT matching requests fail, wait or lose their connection."""
    _call(
        ctx,
        "fault",
        {
            "api": api,
            "error": error,
            "delay_ms": delay_ms,
            "drop": drop,
            "count": count or None,
            "topic": topic,
            "partition": partition,
            "client_id": client_id,
        },
    )


@control.command()
@click.argument("fault_id", type=int)
@click.pass_context
def unfault(ctx: click.Context, fault_id: int) -> None:
    """Remove one fault rule by its id."""
    _call(ctx, "unfault", {"id": fault_id})


@control.command()
@click.argument("release", required=False)
@click.option("--off", is_flag=True, help="Lift the cap.")
@click.pass_context
def cap(ctx: click.Context, release: str | None, off: bool) -> None:
    """Advertise and accept only the API versions of Kafka RELEASE (2.8, 3.0, ...)."""
    if not off and not release:
        raise click.UsageError("name a Kafka release (2.8, 3.0, ...) or --off")
    _call(ctx, "cap", {"release": None if off else release})


@control.command()
@click.option("--off", is_flag=True, help="Stop recording.")
@click.pass_context
def record(ctx: click.Context, off: bool) -> None:
    """Keep api, version and client id of every request (read them with `recorded`)."""
    _call(ctx, "record", {"on": not off})


@control.command()
@click.option("--topic", help="Only this topic (default: every topic but internal ones).")
@click.option("--no-roll", is_flag=True, help="Leave active segments alone (Kafka never deletes them).")
@click.pass_context
def retention(ctx: click.Context, topic: str | None, no_roll: bool) -> None:
    """Apply retention now."""
    _call(ctx, "retention", {"topic": topic, "roll": not no_roll})


@control.command()
@click.option("--topic", help="Only this topic.")
@click.option("--no-roll", is_flag=True, help="Leave active segments alone (the cleaner never touches them).")
@click.pass_context
def compact(ctx: click.Context, topic: str | None, no_roll: bool) -> None:
    """Run the log cleaner now over compacted topics."""
    _call(ctx, "compact", {"topic": topic, "roll": not no_roll})


@control.command("expire-offsets")
@click.option("--advance-ms", type=int, default=0, help="Expire as if the clock were this much later.")
@click.pass_context
def expire_offsets(ctx: click.Context, advance_ms: int) -> None:
    """Expire committed offsets now."""
    _call(ctx, "expire_offsets", {"advance_ms": advance_ms})


def _simple(name: str, operation: str, doc: str) -> None:
    @control.command(name, help=doc)
    @click.pass_context
    def command(ctx: click.Context) -> None:
        _call(ctx, operation)


_simple("status", "status", "Show the broker's listeners, topics, fault rules, pause, cap and recording.")
_simple("faults", "faults", "List the fault rules in force (with hits and remaining counts).")
_simple("clear", "clear", "Remove every fault rule and the version cap, resume, stop recording.")
_simple("pause", "pause", "Hold every request until `resume`.")
_simple("resume", "resume", "Answer requests again.")
_simple("recorded", "recorded", "Print the requests recorded since `record`.")

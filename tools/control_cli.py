"""`strom control`: fault injection and test control of a running broker, for tests in any language.

The broker must run with its control endpoint (`strom serve --dev`, or `control.listener`);
`--to` names it, or `--ready-file` reads it from the file `strom serve --ready-file` wrote.

    strom serve --dev --ready-file ready.json &
    strom control --ready-file ready.json fault --api Produce --error NOT_LEADER_OR_FOLLOWER --count 2
    strom control --ready-file ready.json cap 2.8
    strom control --ready-file ready.json clear
    strom control --ready-file ready.json wait group my-group --state Stable --members 2 --timeout 30
    strom control --ready-file ready.json wait rule 3 --hits 2

Every command prints the broker's answer as JSON; a wait that runs out of time prints what it saw
and exits with status 2 (other errors: 1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from strom.testing.control import CHAOS_DEFAULTS, WAIT_MARGIN_S, ControlClient, ControlError, WaitTimeout


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


class WaitTimedOut(click.ClickException):
    exit_code = 2


def _call(ctx: click.Context, operation: str, args: dict[str, Any] | None = None, timeout: float | None = None) -> None:
    try:
        result = ctx.obj()(operation, args or {}, timeout)
    except WaitTimeout as exc:
        raise WaitTimedOut(str(exc)) from None
    except ControlError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=None))


@control.command()
@click.option("--api", help="Kafka API name (Produce, Fetch, ...) or key; default: any API.")
@click.option("--error", help="Answer with this error (NOT_LEADER_OR_FOLLOWER, or a code).")
@click.option("--delay-ms", type=int, default=0, help="Hold the request this long first.")
@click.option("--jitter-ms", type=int, default=0, help="Plus a random 0..JITTER ms (seeded by --seed).")
@click.option(
    "--drop",
    type=click.Choice(["before", "after"]),
    help="Close the connection before handling the request, or after (it took effect).",
)
@click.option("--cut-bytes", type=int, help="Send only the first N bytes of the answer, then close.")
@click.option("--throttle-ms", type=int, help="Answer with this throttle_time_ms.")
@click.option(
    "--duplicate",
    is_flag=True,
    help="Fetch only: answer from one offset earlier, so records the consumer has come again.",
)
@click.option("--observe", is_flag=True, help="Change nothing, only count the matching requests.")
@click.option("--rate", type=float, help="Act on this fraction (0..1] of the matching requests.")
@click.option("--seed", type=int, help="Seed of --rate and --jitter-ms choices (repeatable runs).")
@click.option("--count", type=int, default=1, show_default=True, help="How many requests; 0: all until cleared.")
@click.option("--topic", help="Only requests for this topic.")
@click.option("--partition", type=int, help="Only this partition of --topic.")
@click.option("--client-id", help="Only requests of this client id.")
@click.pass_context
def fault(
    ctx: click.Context,
    api,
    error,
    delay_ms,
    jitter_ms,
    drop,
    cut_bytes,
    throttle_ms,
    duplicate,
    observe,
    rate,
    seed,
    count,
    topic,
    partition,
    client_id,
) -> None:
    """Make the next COUNT matching requests fail, wait, lose their connection, ... or count them."""
    args: dict[str, Any] = {
        "api": api,
        "error": error,
        "delay_ms": delay_ms,
        "drop": drop,
        "count": count or None,
        "topic": topic,
        "partition": partition,
        "client_id": client_id,
    }
    chaos = {
        "jitter_ms": jitter_ms,
        "cut_bytes": cut_bytes,
        "throttle_ms": throttle_ms,
        "duplicate": duplicate,
        "observe": observe,
        "rate": rate,
        "seed": seed,
    }
    args.update({k: v for k, v in chaos.items() if v != CHAOS_DEFAULTS[k]})
    _call(ctx, "fault", args)


@control.command()
@click.argument("fault_id", type=int)
@click.pass_context
def rule(ctx: click.Context, fault_id: int) -> None:
    """Show one fault rule (in force or used up) with its hits."""
    _call(ctx, "rule", {"id": fault_id})


@control.group()
def wait() -> None:
    """Wait (bounded) until the broker reaches a state; prints it, or exits 2 saying what it saw."""


def _wait(ctx: click.Context, operation: str, args: dict[str, Any]) -> None:
    _call(ctx, operation, args, float(args["timeout"]) + WAIT_MARGIN_S)


_TIMEOUT = click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait at most.")


@wait.command("rule")
@click.argument("fault_id", type=int)
@click.option("--hits", type=int, default=1, show_default=True, help="Hits in all since the rule was added.")
@_TIMEOUT
@click.pass_context
def wait_rule(ctx: click.Context, fault_id: int, hits: int, timeout: float) -> None:
    """Until fault rule FAULT_ID was hit HITS times."""
    _wait(ctx, "wait_rule", {"id": fault_id, "hits": hits, "timeout": timeout})


@wait.command("group")
@click.argument("group_id")
@click.option("--state", default="Stable", show_default=True, help="Kafka's state name; 'any' for any state.")
@click.option("--members", type=int, help="This many members (default: any number).")
@_TIMEOUT
@click.pass_context
def wait_group(ctx: click.Context, group_id: str, state: str, members: int | None, timeout: float) -> None:
    """Until group GROUP_ID (classic or consumer) is in STATE with MEMBERS members."""
    args = {"group_id": group_id, "state": None if state.lower() == "any" else state, "members": members}
    _wait(ctx, "wait_group", {**args, "timeout": timeout})


@wait.command("lag")
@click.argument("group_id")
@click.option("--topic", help="Every partition of this topic (default: the partitions the group committed).")
@click.option("--lag", type=int, default=0, show_default=True, help="Total lag at most this.")
@_TIMEOUT
@click.pass_context
def wait_lag(ctx: click.Context, group_id: str, topic: str | None, lag: int, timeout: float) -> None:
    """Until group GROUP_ID's lag is at most LAG."""
    _wait(ctx, "wait_lag", {"group_id": group_id, "topic": topic, "lag": lag, "timeout": timeout})


@wait.command("offset")
@click.argument("topic")
@click.argument("partition", type=int)
@click.argument("offset", type=int)
@click.option("--log-end", is_flag=True, help="The log end offset, not the high watermark.")
@_TIMEOUT
@click.pass_context
def wait_offset(ctx: click.Context, topic: str, partition: int, offset: int, log_end: bool, timeout: float) -> None:
    """Until TOPIC-PARTITION's high watermark reaches OFFSET."""
    kind = "log_end_offset" if log_end else "high_watermark"
    _wait(
        ctx,
        "wait_offset",
        {"topic": topic, "partition": partition, "offset": offset, "kind": kind, "timeout": timeout},
    )


@wait.command("connections")
@click.argument("count", type=int)
@click.option("--exactly", is_flag=True, help="Exactly COUNT (default: at least).")
@_TIMEOUT
@click.pass_context
def wait_connections(ctx: click.Context, count: int, exactly: bool, timeout: float) -> None:
    """Until the broker has COUNT client connections."""
    _wait(ctx, "wait_connections", {"count": count, "at_least": not exactly, "timeout": timeout})


@control.command()
@click.argument("group_id")
@click.option("--topic", help="Every partition of this topic.")
@click.pass_context
def lag(ctx: click.Context, group_id: str, topic: str | None) -> None:
    """Show a group's lag now."""
    _call(ctx, "lag", {"group_id": group_id, "topic": topic})


@control.command()
@click.argument("group_id")
@click.pass_context
def group(ctx: click.Context, group_id: str) -> None:
    """Show a group's type, state and member count now."""
    _call(ctx, "group", {"group_id": group_id})


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


def _pairs(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``key=value`` arguments; a value that reads as JSON (numbers, true, null, lists) is taken as such."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"expected key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


@control.command("cluster")
@click.argument("name")
@click.argument("args", nargs=-1)
@click.pass_context
def cluster_operation(ctx: click.Context, name: str, args: tuple[str, ...]) -> None:
    """A cluster action on a test cluster's control endpoint (strom.testing.cluster_control): NAME
    is stop, kill, pause, resume, restart, move_leader, isolate, ... ARGS as key=value
    (broker=2 topic=t partition=0 seconds=5)."""
    values = _pairs(args)
    timeout = float(values["timeout"]) + WAIT_MARGIN_S if "timeout" in values else None
    _call(ctx, f"cluster/{name}", values, timeout)


@control.command("broker")
@click.argument("broker_id", type=int)
@click.argument("operation")
@click.argument("args", nargs=-1)
@click.pass_context
def broker_operation(ctx: click.Context, broker_id: int, operation: str, args: tuple[str, ...]) -> None:
    """One broker's control OPERATION (fault, wait_group, reset, ...) through a test cluster's
    control endpoint; ARGS as key=value."""
    values = _pairs(args)
    timeout = float(values["timeout"]) + WAIT_MARGIN_S if "timeout" in values else None
    _call(ctx, f"broker/{broker_id}/{operation}", values, timeout)


_simple("status", "status", "Show the broker's listeners, topics, fault rules, pause, cap and recording.")
_simple("faults", "faults", "List the fault rules in force (with hits and remaining counts).")
_simple("clear", "clear", "Remove every fault rule and the version cap, resume, stop recording.")
_simple("pause", "pause", "Hold every request until `resume`.")
_simple("resume", "resume", "Answer requests again.")
_simple("recorded", "recorded", "Print the requests recorded since `record`.")
_simple("connections", "connections", "Show how many client connections the broker has open.")
_simple("snapshot", "snapshot", "Remember the topics and groups there are now (`reset` keeps them).")
_simple(
    "reset",
    "reset",
    "Delete every topic and group made since `snapshot` (none taken: all), clear faults, cap, recording; resume.",
)

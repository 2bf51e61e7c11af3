"""`strom groups`: consumer group administration as kafka-consumer-groups does it, through
confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups).

Before any group request the broker's ApiVersions are probed, so a broker without a group
coordinator gets a clear message instead of a time-out.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from strom.tools.admin import list_metadata, log_offsets
from strom.tools.common import (
    ClusterError,
    admin_client,
    cluster_errors,
    connection_options,
    emit_json,
    print_table,
    remember_connection,
    require_group_support,
    resolve_connection,
    wait_futures,
)

DESCRIBE_HEADERS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]
RESET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
INACTIVE_STATES = {"EMPTY", "DEAD", "UNKNOWN"}
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed

TopicPartitionKey = tuple[str, int]


def _group_admin(bootstrap_server: str | None, command_config: Path | None) -> Any:
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    admin = admin_client(bootstrap, extra)
    require_group_support(bootstrap, extra)
    return admin


def _state_name(state: Any) -> str:
    return getattr(state, "name", str(state)).upper()


def committed_offsets(admin: Any, group: str) -> dict[TopicPartitionKey, int]:
    """The group's committed offsets; partitions with nothing committed are left out."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = wait_futures(futures, lambda g: f"offsets of group {g}")[group]
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.offset != NO_OFFSET and tp.error is None
    }


def describe_group(admin: Any, group: str) -> Any:
    return wait_futures(admin.describe_consumer_groups([group]), lambda g: f"cannot describe group {g}")[group]


def _owners(description: Any) -> dict[TopicPartitionKey, Any]:
    owners = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions if member.assignment else []:
            owners[(tp.topic, tp.partition)] = member
    return owners


def group_lag(admin: Any, group: str) -> list[dict[str, Any]]:
    """Per partition: committed offset, log end offset, lag and owning member, sorted."""
    description = describe_group(admin, group)
    committed = committed_offsets(admin, group)
    owners = _owners(description)
    keys = sorted(set(committed) | set(owners))
    ends = log_offsets(admin, keys, "latest")
    rows = []
    for key in keys:
        current, member = committed.get(key), owners.get(key)
        rows.append(
            {
                "group": group,
                "topic": key[0],
                "partition": key[1],
                "current_offset": current,
                "log_end_offset": ends[key],
                "lag": None if current is None else max(0, ends[key] - current),
                "consumer_id": member.member_id if member else None,
                "host": member.host if member else None,
                "client_id": member.client_id if member else None,
            }
        )
    return rows


@click.group("groups")
@connection_options
@click.pass_context
def groups(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None) -> None:
    """List, describe, reset offsets of and delete consumer groups (as kafka-consumer-groups)."""
    remember_connection(ctx, bootstrap_server, command_config)


@groups.command("list")
@connection_options
@click.option("--state", is_flag=True, help="Show each group's state too.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of {group, state}.")
@cluster_errors
def groups_list(bootstrap_server: str | None, command_config: Path | None, state: bool, as_json: bool) -> None:
    """List consumer groups."""
    admin = _group_admin(bootstrap_server, command_config)
    future = admin.list_consumer_groups(request_timeout=30)
    result = wait_futures({"groups": future}, lambda _: "cannot list groups")["groups"]
    listing = sorted(
        ({"group": g.group_id, "state": _state_name(g.state)} for g in result.valid), key=lambda g: g["group"]
    )
    if as_json:
        emit_json(listing)
    elif state:
        print_table([[g["group"], g["state"]] for g in listing], ["GROUP", "STATE"])
    else:
        for g in listing:
            click.echo(g["group"])


@groups.command("describe")
@connection_options
@click.option("--group", "names", multiple=True, required=True, help="Group to describe (repeatable).")
@click.option("--members", is_flag=True, help="Show the members instead of offsets.")
@click.option("--state", is_flag=True, help="Show the group state instead of offsets.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per group.")
@cluster_errors
def groups_describe(
    bootstrap_server: str | None,
    command_config: Path | None,
    names: tuple[str, ...],
    members: bool,
    state: bool,
    as_json: bool,
) -> None:
    """Committed offset, log end offset and lag per partition (or --members, --state)."""
    admin = _group_admin(bootstrap_server, command_config)
    views: dict[tuple[bool, bool], Callable[[Any, str, bool], None]] = {
        (False, False): _show_offsets,
        (True, False): _show_members,
        (False, True): _show_state,
    }
    view = views.get((members, state))
    if view is None:
        raise click.UsageError("give at most one of --members and --state")
    for name in names:
        view(admin, name, as_json)


def _show_offsets(admin: Any, group: str, as_json: bool) -> None:
    rows = group_lag(admin, group)
    if as_json:
        emit_json({"group": group, "partitions": rows})
        return
    if not rows:
        click.echo(f"Consumer group '{group}' has no committed offsets and no active members.")
        return
    print_table(
        [
            [
                r["group"],
                r["topic"],
                r["partition"],
                r["current_offset"],
                r["log_end_offset"],
                r["lag"],
                r["consumer_id"],
                r["host"],
                r["client_id"],
            ]
            for r in rows
        ],
        DESCRIBE_HEADERS,
    )


def _show_members(admin: Any, group: str, as_json: bool) -> None:
    description = describe_group(admin, group)
    rows = [
        {
            "consumer_id": m.member_id,
            "host": m.host,
            "client_id": m.client_id,
            "partitions": [
                f"{tp.topic}-{tp.partition}" for tp in (m.assignment.topic_partitions if m.assignment else [])
            ],
        }
        for m in description.members
    ]
    if as_json:
        emit_json({"group": group, "members": rows})
        return
    print_table(
        [[group, r["consumer_id"], r["host"], r["client_id"], len(r["partitions"])] for r in rows],
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
    )


def _show_state(admin: Any, group: str, as_json: bool) -> None:
    d = describe_group(admin, group)
    coordinator = f"{d.coordinator.host}:{d.coordinator.port} ({d.coordinator.id})" if d.coordinator else None
    row = {
        "group": group,
        "state": _state_name(d.state),
        "assignment_strategy": d.partition_assignor,
        "coordinator": coordinator,
        "members": len(d.members),
    }
    if as_json:
        emit_json(row)
        return
    print_table(
        [[row["group"], row["coordinator"], row["assignment_strategy"], row["state"], row["members"]]],
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
    )


@groups.command("delete")
@connection_options
@click.option("--group", "names", multiple=True, required=True, help="Group to delete (repeatable).")
@cluster_errors
def groups_delete(bootstrap_server: str | None, command_config: Path | None, names: tuple[str, ...]) -> None:
    """Delete inactive consumer groups and their committed offsets."""
    admin = _group_admin(bootstrap_server, command_config)
    wait_futures(admin.delete_consumer_groups(list(names), request_timeout=30), lambda g: f"cannot delete group {g}")
    for name in names:
        click.echo(f"Deleted consumer group '{name}'.")


# --------------------------------------------------------------------------- reset-offsets


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 (``2024-01-31T12:00:00``, optional fraction and zone; UTC if none) -> epoch ms."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected YYYY-MM-DDTHH:MM:SS[.sss][+HH:MM]", param_hint="--to-datetime"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _topic_partitions(admin: Any, specs: tuple[str, ...]) -> list[TopicPartitionKey]:
    """``topic`` (every partition) or ``topic:0,2`` -> (topic, partition) pairs."""
    metadata = list_metadata(admin)
    out: list[TopicPartitionKey] = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        if topic not in metadata.topics:
            raise ClusterError(f"topic {topic!r} does not exist (list the topics with `strom topics list`)")
        known = sorted(metadata.topics[topic].partitions)
        wanted = [int(p) for p in parts.split(",")] if parts else known
        out += [(topic, p) for p in wanted if p in known]
    return out


def _plan(
    admin: Any, keys: list[TopicPartitionKey], committed: dict[TopicPartitionKey, int], scenario: tuple[str, Any]
) -> dict[TopicPartitionKey, int]:
    """New offset per partition for one reset scenario, clamped to [earliest, latest]."""
    kind, arg = scenario
    earliest, latest = log_offsets(admin, keys, "earliest"), log_offsets(admin, keys, "latest")
    targets: dict[str, Callable[[TopicPartitionKey], int]] = {
        "to-earliest": lambda k: earliest[k],
        "to-latest": lambda k: latest[k],
        "to-offset": lambda k: arg,
        "shift-by": lambda k: committed.get(k, latest[k]) + arg,
        "to-current": lambda k: committed.get(k, latest[k]),
    }
    if kind == "to-datetime":
        found = log_offsets(admin, keys, arg)
        targets[kind] = lambda k: found[k] if found[k] >= 0 else latest[k]
    return {k: min(max(targets[kind](k), earliest[k]), latest[k]) for k in keys}


def _scenario(
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    shift_by: int | None,
    to_current: bool,
) -> tuple[str, Any]:
    chosen = [
        (name, value)
        for name, value, given in (
            ("to-earliest", None, to_earliest),
            ("to-latest", None, to_latest),
            ("to-offset", to_offset, to_offset is not None),
            ("to-datetime", to_datetime, to_datetime is not None),
            ("shift-by", shift_by, shift_by is not None),
            ("to-current", None, to_current),
        )
        if given
    ]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by, --to-current"
        )
    name, value = chosen[0]
    return (name, parse_datetime_ms(value)) if name == "to-datetime" else (name, value)


@groups.command("reset-offsets")
@connection_options
@click.option("--group", required=True, help="The consumer group (must have no active members).")
@click.option("--topic", "topic_specs", multiple=True, metavar="TOPIC[:P,P...]", help="Topic to reset (repeatable).")
@click.option("--all-topics", is_flag=True, help="Every topic the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int)
@click.option("--to-datetime", help="First offset at or after this time (ISO 8601, UTC unless a zone is given).")
@click.option("--shift-by", type=int, help="Move the committed offset by N (negative goes back).")
@click.option("--to-current", is_flag=True, help="Keep the committed offsets (commits them for new partitions).")
@click.option("--execute", is_flag=True, help="Commit the new offsets (otherwise only show them).")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@cluster_errors
def groups_reset_offsets(
    bootstrap_server: str | None,
    command_config: Path | None,
    group: str,
    topic_specs: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    shift_by: int | None,
    to_current: bool,
    execute: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Move a group's committed offsets; shows the plan unless --execute."""
    scenario = _scenario(to_earliest, to_latest, to_offset, to_datetime, shift_by, to_current)
    if bool(topic_specs) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    if execute and dry_run:
        raise click.UsageError("--execute and --dry-run exclude each other")
    admin = _group_admin(bootstrap_server, command_config)
    committed = committed_offsets(admin, group)
    keys = sorted(committed) if all_topics else _topic_partitions(admin, topic_specs)
    plan = _plan(admin, keys, committed, scenario)
    if execute:
        _check_inactive(admin, group)
        _commit(admin, group, plan)
    rows = [{"group": group, "topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(plan.items())]
    if as_json:
        emit_json({"executed": execute, "partitions": rows})
    else:
        print_table([[r["group"], r["topic"], r["partition"], r["new_offset"]] for r in rows], RESET_HEADERS)
        if not execute:
            click.echo("(dry run: pass --execute to commit these offsets)", err=True)


def _check_inactive(admin: Any, group: str) -> None:
    state = _state_name(describe_group(admin, group).state)
    if state not in INACTIVE_STATES:
        raise ClusterError(
            f"group {group} is {state.lower()}: offsets can only be reset when it has no "
            f"active members; stop its consumers first"
        )


def _commit(admin: Any, group: str, plan: dict[TopicPartitionKey, int]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(plan.items())])
    result = wait_futures(admin.alter_consumer_group_offsets([request]), lambda g: f"cannot commit offsets of {g}")
    failed = [f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in result[group].topic_partitions if tp.error]
    if failed:
        raise ClusterError(f"some offsets of group {group} were not committed: " + "; ".join(failed))

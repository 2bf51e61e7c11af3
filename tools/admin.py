"""`strom topics` and `strom configs`: cluster administration over the Kafka protocol, as
kafka-topics and kafka-configs do it, through confluent-kafka's AdminClient.

Works against any Kafka-compatible cluster, not only Strom.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from strom.tools.common import (
    IGNORED,
    ClusterError,
    admin_client,
    cluster_call,
    cluster_errors,
    connection_options,
    emit_json,
    parse_config_items,
    remember_connection,
    resolve_connection,
    wait_futures,
)

METADATA_TIMEOUT_S = 10.0
USE_BROKER_DEFAULT = -1


# --------------------------------------------------------------------------- shared helpers


def list_metadata(admin: Any, topic: str | None = None) -> Any:
    return cluster_call(lambda: admin.list_topics(topic=topic, timeout=METADATA_TIMEOUT_S), "metadata")


def log_offsets(admin: Any, partitions: list[tuple[str, int]], spec: str | int) -> dict[tuple[str, int], int]:
    """Offsets per (topic, partition): spec "earliest", "latest" or a timestamp in ms."""
    if not partitions:
        return {}
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    specs = {"earliest": OffsetSpec.earliest, "latest": OffsetSpec.latest}
    make = specs[spec] if isinstance(spec, str) else (lambda: OffsetSpec.for_timestamp(spec))
    request = {TopicPartition(t, p): make() for t, p in partitions}
    futures = admin.list_offsets(request, request_timeout=METADATA_TIMEOUT_S)
    results = wait_futures(futures, lambda tp: f"offsets of {tp.topic}-{tp.partition}")
    return {(tp.topic, tp.partition): info.offset for tp, info in results.items()}


def matching_topics(metadata: Any, pattern: str | None, include_internal: bool = True) -> list[str]:
    """Topic names matching ``pattern`` (a regex over the whole name, or a comma list)."""
    names = sorted(t for t in metadata.topics if include_internal or not t.startswith("__"))
    if pattern is None:
        return names
    wanted = set(pattern.split(","))
    regex = re.compile(pattern) if _is_regex(pattern) else None
    return [n for n in names if n in wanted or (regex is not None and regex.fullmatch(n))]


def _is_regex(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def topic_configs(admin: Any, topic: str, include_defaults: bool) -> dict[str, dict[str, Any]]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = wait_futures(admin.describe_configs([resource]), lambda r: f"configs of topic {topic}")[resource]
    return _config_rows(entries, include_defaults)


def _config_rows(entries: dict[str, Any], include_defaults: bool) -> dict[str, dict[str, Any]]:
    rows = {}
    for name, entry in sorted(entries.items()):
        if entry.is_default and not include_defaults:
            continue
        value = None if entry.is_sensitive else entry.value
        rows[name] = {
            "value": value,
            "source": _source_name(entry.source),
            "sensitive": entry.is_sensitive,
            "read_only": entry.is_read_only,
        }
    return rows


def _source_name(source: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


# --------------------------------------------------------------------------- strom topics


@click.group("topics")
@connection_options
@click.pass_context
def topics(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None) -> None:
    """Create, list, describe, alter and delete topics (as kafka-topics)."""
    remember_connection(ctx, bootstrap_server, command_config)


@topics.command("create")
@connection_options
@click.option("--topic", required=True, help="Name of the topic to create.")
@click.option(
    "--partitions", type=click.IntRange(min=1), help="Partition count [default: the broker's num.partitions]."
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    help="Replicas per partition [default: the broker's default.replication.factor].",
)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A topic config (repeatable).")
@click.option("--if-not-exists", is_flag=True, help="Succeed if the topic already exists.")
@click.option("--validate-only", is_flag=True, help="Ask the broker to check the request without creating.")
@cluster_errors
def topics_create(
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
    validate_only: bool,
) -> None:
    """Create a topic."""
    from confluent_kafka.admin import NewTopic

    config = parse_config_items(configs, "--config")
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    admin = admin_client(bootstrap, extra)
    new = NewTopic(
        topic,
        num_partitions=partitions or USE_BROKER_DEFAULT,
        replication_factor=replication_factor or USE_BROKER_DEFAULT,
        config=config,
    )
    ignore = frozenset({"TOPIC_ALREADY_EXISTS"}) if if_not_exists else frozenset()
    results = wait_futures(
        admin.create_topics([new], validate_only=validate_only), lambda t: f"cannot create topic {t}", ignore
    )
    verb = "Validated" if validate_only else "Created"
    click.echo(f"Topic {topic} already exists." if results[topic] is IGNORED else f"{verb} topic {topic}.")


@topics.command("list")
@connection_options
@click.option("--topic", help="Only topics matching this regex or comma list.")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (names starting with __).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of names.")
@cluster_errors
def topics_list(
    bootstrap_server: str | None, command_config: Path | None, topic: str | None, exclude_internal: bool, as_json: bool
) -> None:
    """List topic names."""
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    names = matching_topics(list_metadata(admin_client(bootstrap, extra)), topic, not exclude_internal)
    if as_json:
        emit_json(names)
    else:
        for name in names:
            click.echo(name)


@topics.command("describe")
@connection_options
@click.option("--topic", help="Only topics matching this regex or comma list [default: all].")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics.")
@click.option(
    "--under-replicated-partitions", is_flag=True, help="Only partitions whose ISR is smaller than the replicas."
)
@click.option("--unavailable-partitions", is_flag=True, help="Only partitions without a leader.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per topic.")
@cluster_errors
def topics_describe(
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str | None,
    exclude_internal: bool,
    under_replicated_partitions: bool,
    unavailable_partitions: bool,
    as_json: bool,
) -> None:
    """Partitions with leader, replicas, ISR and earliest/latest offsets; non-default configs."""
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    admin = admin_client(bootstrap, extra)
    metadata = list_metadata(admin)
    names = matching_topics(metadata, topic, not exclude_internal)
    if topic is not None and not names:
        raise ClusterError(f"topic {topic!r} does not exist (list the topics with `strom topics list`)")
    keep = _partition_filter(under_replicated_partitions, unavailable_partitions)
    for name in names:
        info = _describe_topic(admin, metadata.topics[name], keep)
        emit_json(info) if as_json else _print_topic(info)


def _partition_filter(under_replicated: bool, unavailable: bool):
    if under_replicated:
        return lambda p: len(p.isrs) < len(p.replicas)
    if unavailable:
        return lambda p: p.leader < 0
    return lambda p: True


def _describe_topic(admin: Any, meta: Any, keep) -> dict[str, Any]:
    if meta.error is not None:
        raise ClusterError(f"topic {meta.topic}: {meta.error.str()}")
    parts = sorted(meta.partitions.values(), key=lambda p: p.id)
    keys = [(meta.topic, p.id) for p in parts]
    earliest, latest = log_offsets(admin, keys, "earliest"), log_offsets(admin, keys, "latest")
    configs = topic_configs(admin, meta.topic, include_defaults=False)
    return {
        "topic": meta.topic,
        "partition_count": len(parts),
        "replication_factor": max((len(p.replicas) for p in parts), default=0),
        "configs": {k: v["value"] for k, v in configs.items()},
        "partitions": [
            {
                "partition": p.id,
                "leader": p.leader,
                "replicas": list(p.replicas),
                "isr": list(p.isrs),
                "earliest_offset": earliest[(meta.topic, p.id)],
                "latest_offset": latest[(meta.topic, p.id)],
            }
            for p in parts
            if keep(p)
        ],
    }


def _ids(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


def _print_topic(info: dict[str, Any]) -> None:
    configs = ",".join(f"{k}={v}" for k, v in info["configs"].items())
    click.echo(
        f"Topic: {info['topic']}\tPartitionCount: {info['partition_count']}\t"
        f"ReplicationFactor: {info['replication_factor']}\tConfigs: {configs}"
    )
    for p in info["partitions"]:
        click.echo(
            f"\tTopic: {info['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
            f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}\t"
            f"EarliestOffset: {p['earliest_offset']}\tLatestOffset: {p['latest_offset']}"
        )


@topics.command("alter")
@connection_options
@click.option("--topic", required=True, help="The topic to change.")
@click.option("--partitions", type=click.IntRange(min=1), help="New (larger) partition count.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="Set a topic config (repeatable).")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="KEY", help="Remove a topic config override.")
@cluster_errors
def topics_alter(
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str,
    partitions: int | None,
    configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
) -> None:
    """Add partitions to a topic, or change its configs."""
    from confluent_kafka.admin import NewPartitions

    if partitions is None and not configs and not delete_configs:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    config = parse_config_items(configs, "--config")
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    admin = admin_client(bootstrap, extra)
    if partitions is not None:
        wait_futures(
            admin.create_partitions([NewPartitions(topic, partitions)]), lambda t: f"cannot add partitions to {t}"
        )
        click.echo(f"Topic {topic} now has {partitions} partitions.")
    if config or delete_configs:
        alter_configs(admin, "topic", topic, config, list(delete_configs))
        click.echo(f"Updated configs of topic {topic}.")


@topics.command("delete")
@connection_options
@click.option("--topic", required=True, help="Topic to delete (a comma list or regex matches several).")
@click.option("--if-exists", is_flag=True, help="Succeed if no such topic exists.")
@cluster_errors
def topics_delete(bootstrap_server: str | None, command_config: Path | None, topic: str, if_exists: bool) -> None:
    """Delete topics."""
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    admin = admin_client(bootstrap, extra)
    names = matching_topics(list_metadata(admin), topic)
    if not names:
        if if_exists:
            click.echo(f"No topic matches {topic}.")
            return
        raise ClusterError(
            f"topic {topic!r} does not exist (pass --if-exists to ignore, or list the topics with `strom topics list`)"
        )
    ignore = frozenset({"UNKNOWN_TOPIC_OR_PART"}) if if_exists else frozenset()
    wait_futures(
        admin.delete_topics(names, operation_timeout=METADATA_TIMEOUT_S), lambda t: f"cannot delete topic {t}", ignore
    )
    for name in names:
        click.echo(f"Deleted topic {name}.")


# --------------------------------------------------------------------------- strom configs

RESOURCE_TYPES = {"topic": "TOPIC", "broker": "BROKER"}


def _resource(kind: str, name: str) -> Any:
    from confluent_kafka.admin import ConfigResource, ResourceType

    return ConfigResource(getattr(ResourceType, RESOURCE_TYPES[kind]), name)


def alter_configs(admin: Any, kind: str, name: str, set_: dict[str, str], delete: list[str]) -> None:
    """IncrementalAlterConfigs: SET every ``set_`` item, DELETE every ``delete`` name."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource = _resource(kind, name)
    for key, value in set_.items():
        resource.add_incremental_config(ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET))
    for key in delete:
        resource.add_incremental_config(ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE))
    wait_futures(admin.incremental_alter_configs([resource]), lambda r: f"cannot alter configs of {kind} {name}")


def _target(topic: str | None, broker: int | None) -> tuple[str, str]:
    if (topic is None) == (broker is None):
        raise click.UsageError("give exactly one of --topic or --broker")
    return ("topic", topic) if topic is not None else ("broker", str(broker))


@click.group("configs")
@connection_options
@click.pass_context
def configs(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None) -> None:
    """Describe and alter topic and broker configs (as kafka-configs)."""
    remember_connection(ctx, bootstrap_server, command_config)


@configs.command("describe")
@connection_options
@click.option("--topic", help="A topic's configs.")
@click.option("--broker", type=int, help="A broker's configs (its id).")
@click.option("--all", "show_all", is_flag=True, help="Include configs left at their defaults.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object of name -> {value, source, ...}.")
@cluster_errors
def configs_describe(
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str | None,
    broker: int | None,
    show_all: bool,
    as_json: bool,
) -> None:
    """Show configs: overrides only, or every config with --all."""
    kind, name = _target(topic, broker)
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    admin = admin_client(bootstrap, extra)
    resource = _resource(kind, name)
    entries = wait_futures(admin.describe_configs([resource]), lambda r: f"configs of {kind} {name}")[resource]
    rows = _config_rows(entries, show_all)
    if as_json:
        emit_json(rows)
        return
    label = "All" if show_all else "Dynamic"
    click.echo(f"{label} configs for {kind} {name} are:")
    for key, row in rows.items():
        value = "(sensitive)" if row["sensitive"] else row["value"]
        click.echo(f"  {key}={value} source={row['source']}")


@configs.command("alter")
@connection_options
@click.option("--topic", help="Alter this topic's configs.")
@click.option("--broker", type=int, help="Alter this broker's configs.")
@click.option(
    "--add-config",
    "add",
    multiple=True,
    metavar="K=V[,K=V...]",
    help="Configs to set; list values in brackets: k=[a,b] (repeatable).",
)
@click.option("--delete-config", "delete", multiple=True, metavar="K[,K...]", help="Configs to remove (repeatable).")
@cluster_errors
def configs_alter(
    bootstrap_server: str | None,
    command_config: Path | None,
    topic: str | None,
    broker: int | None,
    add: tuple[str, ...],
    delete: tuple[str, ...],
) -> None:
    """Set or remove config overrides."""
    kind, name = _target(topic, broker)
    if not add and not delete:
        raise click.UsageError("nothing to alter: give --add-config or --delete-config")
    set_ = parse_config_items(add, "--add-config")
    removed = [k.strip() for item in delete for k in item.split(",") if k.strip()]
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    alter_configs(admin_client(bootstrap, extra), kind, name, set_, removed)
    click.echo(f"Completed updating config for {kind} {name}.")

"""The broker configs the group coordinator reads (Kafka's GroupCoordinatorConfig), read once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.broker.coordinator.group.assignors import parse_assignors
from strom.broker.coordinator.group.consumer import ConsumerGroupSettings
from strom.broker.coordinator.group.migration import MigrationPolicy
from strom.broker.coordinator.group.state import GroupSettings
from strom.broker.coordinator.runtime import ConfigSource


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    classic: GroupSettings = field(default_factory=GroupSettings)
    consumer: ConsumerGroupSettings = field(default_factory=ConsumerGroupSettings)
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL  # group.consumer.migration.policy
    offsets_topic_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024  # offsets.topic.segment.bytes
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_commit_timeout_ms: int = 5_000  # offsets.commit.timeout.ms
    share_max_size: int = 200  # group.share.max.size
    # the broker configs group configs default to and are bounded by (group_configs.GroupConfigs)
    group_config_defaults: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: ConfigSource) -> GroupCoordinatorConfig:
        policy = MigrationPolicy.parse(config["group.consumer.migration.policy"])
        return cls(
            classic=GroupSettings(
                initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                min_session_timeout_ms=config["group.min.session.timeout.ms"],
                max_session_timeout_ms=config["group.max.session.timeout.ms"],
                max_size=config["group.max.size"],
            ),
            consumer=ConsumerGroupSettings(
                session_timeout_ms=config["group.consumer.session.timeout.ms"],
                heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
                max_size=config["group.consumer.max.size"],
                assignors=tuple(parse_assignors(",".join(config["group.consumer.assignors"]))),
                downgrade_enabled=policy.downgrade,
                classic_max_size=config["group.max.size"],
            ),
            migration_policy=policy,
            offsets_topic_partitions=config["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=config["offsets.topic.replication.factor"],
            offsets_topic_segment_bytes=config["offsets.topic.segment.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            offset_commit_timeout_ms=config["offsets.commit.timeout.ms"],
            share_max_size=config["group.share.max.size"],
            group_config_defaults=group_config_defaults(config),
        )


def group_config_defaults(config: ConfigSource) -> dict[str, Any]:
    """The broker configs that group configs name as their defaults and bounds, read once."""
    from strom.broker.coordinator.group.group_configs import GROUP_CONFIGS

    keys = {k for d in GROUP_CONFIGS.values() for k in (d.broker_key, d.min_key, d.max_key) if k is not None}
    out: dict[str, Any] = {}
    for key in sorted(keys):
        try:
            out[key] = config[key]
        except KeyError:
            continue
    return out

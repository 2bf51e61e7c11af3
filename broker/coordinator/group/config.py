"""The broker configs the group coordinator reads (Kafka's GroupCoordinatorConfig), read once."""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.broker.coordinator.group.assignors import parse_assignors
from strom.broker.coordinator.group.consumer import ConsumerGroupSettings
from strom.broker.coordinator.group.migration import MigrationPolicy
from strom.broker.coordinator.group.state import GroupSettings
from strom.broker.coordinator.runtime import ConfigSource


@dataclass(frozen=True)
class StreamsGroupSettings:
    """Streams groups (KIP-1071): Kafka's group.streams.* broker configs."""

    session_timeout_ms: int = 45_000  # group.streams.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.streams.heartbeat.interval.ms
    max_size: int = 2_147_483_647  # group.streams.max.size
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    initial_rebalance_delay_ms: int = 3_000  # group.streams.initial.rebalance.delay.ms
    assignment_interval_ms: int = 1_000  # group.streams.assignment.interval.ms


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    classic: GroupSettings = field(default_factory=GroupSettings)
    consumer: ConsumerGroupSettings = field(default_factory=ConsumerGroupSettings)
    streams: StreamsGroupSettings = field(default_factory=StreamsGroupSettings)
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL  # group.consumer.migration.policy
    offsets_topic_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024  # offsets.topic.segment.bytes
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_commit_timeout_ms: int = 5_000  # offsets.commit.timeout.ms

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
            streams=StreamsGroupSettings(
                session_timeout_ms=config["group.streams.session.timeout.ms"],
                heartbeat_interval_ms=config["group.streams.heartbeat.interval.ms"],
                max_size=config["group.streams.max.size"],
                num_standby_replicas=config["group.streams.num.standby.replicas"],
                initial_rebalance_delay_ms=config["group.streams.initial.rebalance.delay.ms"],
                assignment_interval_ms=config["group.streams.assignment.interval.ms"],
            ),
            migration_policy=policy,
            offsets_topic_partitions=config["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=config["offsets.topic.replication.factor"],
            offsets_topic_segment_bytes=config["offsets.topic.segment.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            offset_commit_timeout_ms=config["offsets.commit.timeout.ms"],
        )

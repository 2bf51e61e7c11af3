"""Per-topic log configuration, with Kafka's topic-level config names."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _int(value: str) -> int:
    return int(value.strip())


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        value = value.strip()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


def _ratio(value: str) -> float:
    ratio = float(value.strip())
    if not 0.0 <= ratio <= 1.0:
        raise ValueError("must be between 0 and 1")
    return ratio


def _cleanup_policy(value: str) -> str:
    """A list of delete and compact; empty (Kafka 4.0 accepts it, e.g. after IncrementalAlterConfigs
    subtracted the last value) is neither: no retention by time or size, no compaction."""
    parts = sorted(p.strip() for p in value.split(",") if p.strip())
    if any(p not in ("delete", "compact") for p in parts):
        raise ValueError("must be a list of delete, compact")
    return ",".join(parts)


# Kafka's internal topic config that overrides segment.bytes (below its 1 MiB minimum, for tests)
INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"

# Kafka key -> (field name, parser, smallest allowed value or None)
_PROPERTIES: dict[str, tuple[str, Callable[[str], object], int | None]] = {
    "segment.bytes": ("segment_bytes", _int, 14),
    "segment.ms": ("segment_ms", _int, 1),
    "segment.index.bytes": ("segment_index_bytes", _int, 8),
    "index.interval.bytes": ("index_interval_bytes", _int, 0),
    "retention.ms": ("retention_ms", _int, -1),
    "retention.bytes": ("retention_bytes", _int, None),  # any negative value: unlimited, as in Kafka
    "cleanup.policy": ("cleanup_policy", _cleanup_policy, None),
    "max.message.bytes": ("max_message_bytes", _int, 0),
    "message.timestamp.type": ("message_timestamp_type", _choice("CreateTime", "LogAppendTime"), None),
    "file.delete.delay.ms": ("file_delete_delay_ms", _int, 0),
    "compression.type": (
        "compression_type",
        _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
        None,
    ),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio, None),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int, 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _int, 1),
    "delete.retention.ms": ("delete_retention_ms", _int, 0),
}


@dataclass
class LogConfig:
    """Settings of one partition's log. Field comments give the Kafka topic config key."""

    segment_bytes: int = 1 << 30  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1 = unlimited)
    retention_bytes: int = -1  # retention.bytes (-1 = unlimited)
    cleanup_policy: str = "delete"  # cleanup.policy
    max_message_bytes: int = 1048588  # max.message.bytes
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    compression_type: str = "producer"  # compression.type (applied by the broker's Produce)
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = (1 << 63) - 1  # max.compaction.lag.ms (Long.MAX_VALUE)
    delete_retention_ms: int = 86400000  # delete.retention.ms (tombstones kept after a clean)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @classmethod
    def from_properties(cls, props: dict[str, str], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka key names over ``base`` (defaults if None).

        Unknown keys are ignored (topic configs carry many keys the log does not use); a bad
        value raises ValueError naming the key.
        """
        # field name -> parsed value, of the type _PROPERTIES's parser gives that field
        changes: dict[str, Any] = {}
        if props.get(INTERNAL_SEGMENT_BYTES) is not None:  # Kafka's test override wins over segment.bytes
            props = {**props, "segment.bytes": props[INTERNAL_SEGMENT_BYTES]}
        for key, raw in props.items():
            spec = _PROPERTIES.get(key)
            if spec is None:
                continue
            field, parse, minimum = spec
            try:
                value = parse(raw)
            except ValueError as exc:
                raise ValueError(f"invalid value {raw!r} for {key}: {exc}") from None
            if minimum is not None and isinstance(value, int) and value < minimum:
                raise ValueError(f"invalid value {raw!r} for {key}: must be at least {minimum}")
            changes[field] = value
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """The inverse of :meth:`from_properties` (Kafka key names, string values)."""
        return {key: str(getattr(self, field)) for key, (field, _, _) in _PROPERTIES.items()}

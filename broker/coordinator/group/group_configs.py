"""Per-group configs (KIP-848/KIP-932 group configs, Kafka's ``GroupConfig``): what a GROUP config
resource holds in DescribeConfigs and IncrementalAlterConfigs.

Each key has a broker-level default (its synonym, e.g. ``group.share.record.lock.duration.ms`` for
``share.record.lock.duration.ms``) and, where Kafka has them, broker-level bounds that a group's
value must keep (``group.share.min.record.lock.duration.ms``...). A group's values are kept
with the metadata (the metadata file, or /config/groups in ZooKeeper; Kafka keeps them in its
metadata log; see docs/share-groups.md), written by the admin manager.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("strom.broker")

# ISO-8601 durations as Java's Duration.parse reads them: PnDTnHnMn.nS (days, then a time part)
_DURATION = re.compile(
    r"^[-+]?P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?$", re.IGNORECASE
)


def parse_duration_ms(text: str) -> int | None:
    """Milliseconds of an ISO-8601 duration (``PT1H``, ``P2DT3H4M``), None when not one."""
    match = _DURATION.match(text.strip())
    if match is None or text.strip().upper().endswith("T") or text.strip().upper() in ("P", "-P", "+P"):
        return None
    days, hours, minutes, seconds, fraction = match.groups()
    if all(g is None for g in (days, hours, minutes, seconds)):
        return None
    total = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)) * 1000
    if fraction:
        total += int(fraction.ljust(3, "0")[:3])
    return -total if text.strip().startswith("-") else total


def _auto_offset_reset(value: str) -> str | None:
    if value in ("earliest", "latest"):
        return None
    if value.startswith("by_duration:"):
        ms = parse_duration_ms(value[len("by_duration:") :])
        if ms is not None and ms >= 0:
            return None
    return (
        f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
        "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
    )


def _isolation_level(value: str) -> str | None:
    if value in ("read_committed", "read_uncommitted"):
        return None
    return "String must be one of: read_committed, read_uncommitted"


@dataclass(frozen=True)
class GroupConfigDef:
    """One group config: its type, its broker synonym (default) and its bounds."""

    name: str
    type: str  # int, string, bool
    broker_key: str | None  # the broker config giving the default
    default: Any  # used when there is no broker key
    minimum: int | None = None  # a fixed lower bound (Kafka's ConfigDef range)
    min_key: str | None = None  # the broker config bounding it from below
    max_key: str | None = None  # ... and from above
    doc: str = ""


_G = GroupConfigDef
GROUP_CONFIGS: dict[str, GroupConfigDef] = {
    d.name: d
    for d in [
        _G("consumer.session.timeout.ms", "int", "group.consumer.session.timeout.ms", 45000, 1),
        _G("consumer.heartbeat.interval.ms", "int", "group.consumer.heartbeat.interval.ms", 5000, 1),
        _G("consumer.assignment.interval.ms", "int", None, 1000, 0),
        _G("share.session.timeout.ms", "int", "group.share.session.timeout.ms", 45000, 1,
           "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
        _G("share.heartbeat.interval.ms", "int", "group.share.heartbeat.interval.ms", 5000, 1,
           "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
        _G("share.assignment.interval.ms", "int", "group.share.assignment.interval.ms", 1000, 0,
           "group.share.min.assignment.interval.ms", "group.share.max.assignment.interval.ms"),
        _G("share.record.lock.duration.ms", "int", "group.share.record.lock.duration.ms", 30000, 1000,
           "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
        _G("share.delivery.count.limit", "int", "group.share.delivery.count.limit", 5, 2,
           "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
        _G("share.partition.max.record.locks", "int", "group.share.partition.max.record.locks", 2000, 100,
           "group.share.min.partition.max.record.locks", "group.share.max.partition.max.record.locks"),
        _G("share.auto.offset.reset", "string", None, "latest"),
        _G("share.isolation.level", "string", None, "read_uncommitted"),
        _G("share.renew.acknowledge.enable", "bool", None, True),
        _G("streams.session.timeout.ms", "int", None, 45000, 1),
        _G("streams.heartbeat.interval.ms", "int", None, 5000, 1),
        _G("streams.assignment.interval.ms", "int", None, 1000, 0),
        _G("streams.initial.rebalance.delay.ms", "int", None, 3000, 0),
        _G("streams.num.standby.replicas", "int", None, 0, 0),
    ]
}  # fmt: skip

_VALIDATORS = {"share.auto.offset.reset": _auto_offset_reset, "share.isolation.level": _isolation_level}


class GroupConfigError(ValueError):
    """A group config change Kafka refuses (INVALID_CONFIG with this message)."""


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class GroupConfigs:
    """The group configs of every group: broker defaults from ``broker`` and per-group values from
    ``stored`` (group id -> {key: value as given}: the metadata's, so every broker of a cluster
    sees what any one of them was told, and they survive restarts; none when not given)."""

    def __init__(
        self,
        broker: Mapping[str, Any] | None = None,
        stored: Callable[[], Mapping[str, Mapping[str, str]]] | None = None,
    ) -> None:
        self._broker = broker
        self._stored = stored if stored is not None else dict
        # group id -> (the stored values read, their parsed form): parsed again only when replaced
        self._parsed: dict[str, tuple[Mapping[str, str], dict[str, Any]]] = {}

    def _broker_value(self, key: str | None) -> Any:
        if key is None or self._broker is None:
            return None
        try:
            return self._broker[key]
        except KeyError:
            return None

    def default(self, name: str) -> Any:
        definition = GROUP_CONFIGS[name]
        value = self._broker_value(definition.broker_key)
        return definition.default if value is None else value

    def overrides(self, group_id: str) -> dict[str, Any]:
        """The group's own values, parsed (one the broker's bounds now refuse is left out: the
        default applies)."""
        raw = self._stored().get(group_id)
        if not raw:
            self._parsed.pop(group_id, None)
            return {}
        cached = self._parsed.get(group_id)
        if cached is not None and cached[0] is raw:
            return dict(cached[1])
        parsed: dict[str, Any] = {}
        for name, text in raw.items():
            try:
                parsed[name] = self.parse(name, text)
            except GroupConfigError as exc:
                log.warning("group %r: stored config ignored, the default applies: %s", group_id, exc)
        self._parsed[group_id] = (raw, parsed)
        return dict(parsed)

    def get(self, group_id: str, name: str) -> Any:
        """The value ``group_id`` follows for ``name`` (its own, else the broker's default)."""
        own = self.overrides(group_id)
        return own[name] if name in own else self.default(name)

    def describe(self, group_id: str, keys: Iterable[str] | None = None) -> list[tuple[str, str, bool, str]]:
        """(name, value, is the group's own, type) of each config (of ``keys``, when given)."""
        wanted = set(keys) if keys is not None else None
        own = self.overrides(group_id)
        return [
            (name, _format(own[name] if name in own else self.default(name)), name in own, d.type)
            for name, d in sorted(GROUP_CONFIGS.items())
            if wanted is None or name in wanted
        ]

    def parse(self, name: str, raw: str | None) -> Any:
        """``raw`` checked as Kafka checks a group config value; raises GroupConfigError."""
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            raise GroupConfigError(f"Unknown group config name: {name}")
        if raw is None:
            raise GroupConfigError(f"Invalid value null for configuration {name}: value cannot be null")
        if definition.type == "int":
            try:
                value: Any = int(raw.strip())
            except ValueError:
                raise GroupConfigError(
                    f"Invalid value {raw} for configuration {name}: Not a number of type INT"
                ) from None
            if definition.minimum is not None and value < definition.minimum:
                raise GroupConfigError(
                    f"Invalid value {raw} for configuration {name}: Value must be at least {definition.minimum}"
                )
            low = self._broker_value(definition.min_key)
            if low is not None and value < low:
                raise GroupConfigError(f"{name} must be greater than or equal to {definition.min_key}")
            high = self._broker_value(definition.max_key)
            if high is not None and value > high:
                raise GroupConfigError(f"{name} must be less than or equal to {definition.max_key}")
            return value
        if definition.type == "bool":
            lowered = raw.strip().lower()
            if lowered not in ("true", "false"):
                raise GroupConfigError(
                    f"Invalid value {raw} for configuration {name}: Expected value to be either true or false"
                )
            return lowered == "true"
        problem = _VALIDATORS[name](raw) if name in _VALIDATORS else None
        if problem is not None:
            raise GroupConfigError(f"Invalid value {raw} for configuration {name}: {problem}")
        return raw

    def altered(self, group_id: str, changes: Iterable[tuple[str, str | None, bool]]) -> dict[str, str]:
        """The group's configs to store after (name, raw value, delete) changes, checked as a
        whole (raises GroupConfigError); the caller stores them (the admin manager)."""
        updated = {k: v for k, v in (self._stored().get(group_id) or {}).items() if k in GROUP_CONFIGS}
        for name, raw, delete in changes:
            if name not in GROUP_CONFIGS:
                raise GroupConfigError(f"Unknown group config name: {name}")
            if delete:
                updated.pop(name, None)
            else:
                self.parse(name, raw)
                updated[name] = str(raw).strip()
        return updated

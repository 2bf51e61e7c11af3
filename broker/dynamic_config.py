"""Dynamic broker configs: the keys Kafka lets an operator change on a running broker
(`kafka-configs.sh --alter --entity-type brokers --entity-name N | --entity-default`, or
AlterConfigs/IncrementalAlterConfigs on a broker resource) that Strom honours.

A value set for one broker (resource name = its node id) wins over the cluster-wide default
(resource name ""), which wins over server.properties, which wins over the built-in default, as
in Kafka. Standalone, the values live in the broker's metadata file; in a ZooKeeper cluster under
`/config/brokers/<id>` and `/config/brokers/<default>`, as ZooKeeper-era Kafka keeps them, and
every broker re-reads them on the change notification.

- `leader.replication.throttled.rate` / `follower.replication.throttled.rate`: bytes per second
  of replication traffic of throttled replicas (the topics' `*.replication.throttled.replicas`),
  see `strom.broker.replication_quota`. Only settable dynamically, as in Kafka.
- `replica.alter.log.dirs.io.max.bytes.per.second`: kept and shown (Strom does not move replicas
  between log dirs of one broker, so there is nothing for it to limit).
- `max.connection.creation.rate`: new connections per second the broker accepts from all IPs
  together (also a static config), and `listener.name.<listener>.max.connection.creation.rate`
  for one listener (also in server.properties), see `strom.broker.connection_quota`.
"""
from __future__ import annotations

import re

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
DEFAULT = ""  # the resource name of the cluster-wide default

# key: (Kafka's type name, default)
DYNAMIC: dict[str, tuple[str, int]] = {
    "leader.replication.throttled.rate": ("LONG", LONG_MAX),
    "follower.replication.throttled.rate": ("LONG", LONG_MAX),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("LONG", LONG_MAX),
    "max.connection.creation.rate": ("INT", INT_MAX),
}
# Kafka's DescribeConfigs type codes and sources
CONFIG_TYPE = {"INT": 3, "LONG": 5}
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3


# a listener's own limit: listener.name.<listener>.max.connection.creation.rate
LISTENER_RATE = re.compile(r"listener\.name\.[^.]+\.max\.connection\.creation\.rate")


def listener_rate_key(listener: str) -> str:
    return f"listener.name.{listener.lower()}.max.connection.creation.rate"


def definition(key: str) -> tuple[str, int] | None:
    """(Kafka's type name, default) of a dynamic key, or None."""
    if key in DYNAMIC:
        return DYNAMIC[key]
    if LISTENER_RATE.fullmatch(key):
        return DYNAMIC["max.connection.creation.rate"]
    return None


def check_value(key: str, value: str | None) -> str | None:
    """Kafka's complaint about a value of a dynamic key, or None."""
    found = definition(key)
    if found is None or value is None:
        return None
    typ = found[0]
    if LISTENER_RATE.fullmatch(key):
        key = "max.connection.creation.rate"  # Kafka names the key without its listener prefix
    try:
        number = int(value.strip())
    except ValueError:
        return f"Invalid value {value} for configuration {key}: Not a number of type {typ}"
    if number < 0:
        return f"Invalid value {value} for configuration {key}: Value must be at least 0"
    if number > (LONG_MAX if typ == "LONG" else INT_MAX):
        return f"Invalid value {value} for configuration {key}: Not a number of type {typ}"
    return None


def not_dynamic(keys, static_keys) -> list[str]:
    """Keys of server.properties that cannot change while the broker runs."""
    return sorted(k for k in keys if k in static_keys and k not in DYNAMIC)


def stored_name(name: str) -> str:
    """The ZooKeeper node name of a broker resource name."""
    return "<default>" if name == DEFAULT else name


class DynamicConfigs:
    """The effective value of each dynamic key on this broker."""

    def __init__(self, broker):
        self.broker = broker

    def stored(self) -> dict[str, dict[str, str]]:
        topics = self.broker.topics
        return (getattr(topics, "broker_configs", None) or {}) if topics is not None else {}

    def overrides(self, name: str) -> dict[str, str]:
        return dict(self.stored().get(name, {}))

    def lookup(self, key: str) -> tuple[str | None, int | None]:
        """(raw value, source) of a dynamic setting, or (None, None) when none is set."""
        stored = self.stored()
        own = stored.get(str(self.broker.node_id), {})
        if key in own:
            return own[key], DYNAMIC_BROKER_CONFIG
        default = stored.get(DEFAULT, {})
        if key in default:
            return default[key], DYNAMIC_DEFAULT_BROKER_CONFIG
        return None, None

    def value(self, key: str) -> int:
        """The effective value: this broker's, the cluster default, server.properties, built-in."""
        raw, _ = self.lookup(key)
        if raw is not None and check_value(key, raw) is None:
            return int(raw.strip())
        config = self.broker.config
        static = getattr(config, "originals", {}).get(key)
        if static is not None and check_value(key, static) is None:
            return int(static.strip())
        if key in _static_keys():
            try:
                return int(config[key])
            except (KeyError, TypeError, ValueError):
                pass
        return definition(key)[1]

    def listener_keys(self, default_only: bool = False) -> list[str]:
        """The listener-level keys set dynamically (this broker's or the default)."""
        stored = self.stored()
        names = set(stored.get(DEFAULT, {}))
        if not default_only:
            names |= set(stored.get(str(self.broker.node_id), {}))
        return sorted(k for k in names if LISTENER_RATE.fullmatch(k))


def _static_keys():
    from .config import BROKER_CONFIGS
    return BROKER_CONFIGS

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
- `max.connections` (and `listener.name.<listener>.max.connections`), `max.connections.per.ip`
  and `max.connections.per.ip.overrides`: limits on open connections (also static configs), see
  `strom.broker.connection_quota`. As in Kafka, a dynamic `max.connections` or
  `max.connection.creation.rate` must be above 0, and a per-IP limit of 0 needs overrides.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import BrokerConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
DEFAULT = ""  # the resource name of the cluster-wide default

# key: (Kafka's type name, default)
DYNAMIC: dict[str, tuple[str, int]] = {
    "leader.replication.throttled.rate": ("LONG", LONG_MAX),
    "follower.replication.throttled.rate": ("LONG", LONG_MAX),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("LONG", LONG_MAX),
    "max.connection.creation.rate": ("INT", INT_MAX),
    "max.connections": ("INT", INT_MAX),
    "max.connections.per.ip": ("INT", INT_MAX),
    "max.connections.per.ip.overrides": ("STRING", ""),
}
# Kafka's DescribeConfigs type codes and sources
CONFIG_TYPE = {"STRING": 2, "INT": 3, "LONG": 5}
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3
# The dynamic broker configs stored now: resource name (a node id, DEFAULT) -> {key: value}.
StoredConfigs = Mapping[str, Mapping[str, str]]


# a listener's own limit: listener.name.<listener>.max.connection.creation.rate
LISTENER_RATE = re.compile(r"listener\.name\.[^.]+\.max\.connection\.creation\.rate")
# every listener-level dynamic key: the rate and listener.name.<listener>.max.connections
LISTENER_KEY = re.compile(r"listener\.name\.[^.]+\.(max\.connection\.creation\.rate|max\.connections)")
# keys whose dynamic value must be above 0 (Kafka's DynamicConnectionQuota and listener quotas)
POSITIVE_WHEN_DYNAMIC = ("max.connections", "max.connection.creation.rate")


def listener_rate_key(listener: str) -> str:
    return f"listener.name.{listener.lower()}.max.connection.creation.rate"


def listener_max_key(listener: str) -> str:
    return f"listener.name.{listener.lower()}.max.connections"


def base_key(key: str) -> str:
    """The broker-wide key a listener-level key refines (the key itself otherwise)."""
    found = LISTENER_KEY.fullmatch(key)
    return found.group(1) if found else key


def definition(key: str) -> tuple[str, int | str] | None:
    """(Kafka's type name, default) of a dynamic key, or None."""
    if key in DYNAMIC:
        return DYNAMIC[key]
    if LISTENER_KEY.fullmatch(key):
        return DYNAMIC[base_key(key)]
    return None


def check_value(key: str, value: str | None) -> str | None:
    """Kafka's complaint about a value of a dynamic key, or None."""
    found = definition(key)
    if found is None or value is None:
        return None
    typ = found[0]
    key = base_key(key)  # Kafka names the key without its listener prefix
    if key == "max.connections.per.ip.overrides":
        from .config import parse_ip_overrides

        try:
            parse_ip_overrides(value)
        except ValueError as exc:
            return str(exc)
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return f"Invalid value {value} for configuration {key}: Not a number of type {typ}"
    if number < 0:
        return f"Invalid value {value} for configuration {key}: Value must be at least 0"
    if number > (LONG_MAX if typ == "LONG" else INT_MAX):
        return f"Invalid value {value} for configuration {key}: Not a number of type {typ}"
    return None


def check_positive(key: str, value: str | None) -> str | None:
    """Kafka's complaint about a dynamic connection limit or rate of 0 (checked after the types)."""
    if value is None or base_key(key) not in POSITIVE_WHEN_DYNAMIC or check_value(key, value) is not None:
        return None
    if int(value.strip()) <= 0:
        return (
            f"Invalid value org.apache.kafka.common.config.ConfigException: Invalid {base_key(key)} "
            f"{int(value.strip())} for configuration Invalid dynamic configuration"
        )
    return None


def check_per_ip(dynamic: DynamicConfigs, name: str, new_configs: dict[str, str | None]) -> str | None:
    """Kafka's requirement on the configs broker `name` would have after the change: a per-IP
    limit of 0 only with overrides."""

    def effective(key: str) -> str:  # `new_configs` replaces the whole dynamic set of `name`
        if new_configs.get(key) is not None:
            return new_configs[key]
        default = dynamic.overrides(DEFAULT).get(key) if name != DEFAULT else None
        return default if default is not None else dynamic.static_raw(key)

    per_ip = effective("max.connections.per.ip").strip()
    overrides = effective("max.connections.per.ip.overrides")
    if per_ip == "0" and not overrides.strip():
        return (
            "requirement failed: max.connections.per.ip can be set to zero only if "
            "max.connections.per.ip.overrides property is set."
        )
    return None


def not_dynamic(keys, static_keys) -> list[str]:
    """Keys of server.properties that cannot change while the broker runs."""
    return sorted(k for k in keys if k in static_keys and k not in DYNAMIC)


def stored_name(name: str) -> str:
    """The ZooKeeper node name of a broker resource name."""
    return "<default>" if name == DEFAULT else name


class DynamicConfigs:
    """The effective value of each dynamic key on broker ``node_id``: ``stored`` gives the dynamic
    configs as stored now (the metadata file's or ZooKeeper's), ``config`` is server.properties."""

    def __init__(self, config: BrokerConfig, node_id: int, stored: Callable[[], StoredConfigs]) -> None:
        self.config = config
        self.node_id = node_id
        self._stored = stored

    def stored(self) -> StoredConfigs:
        return self._stored()

    def overrides(self, name: str) -> dict[str, str]:
        return dict(self.stored().get(name, {}))

    def lookup(self, key: str) -> tuple[str | None, int | None]:
        """(raw value, source) of a dynamic setting, or (None, None) when none is set."""
        stored = self.stored()
        own = stored.get(str(self.node_id), {})
        if key in own:
            return own[key], DYNAMIC_BROKER_CONFIG
        default = stored.get(DEFAULT, {})
        if key in default:
            return default[key], DYNAMIC_DEFAULT_BROKER_CONFIG
        return None, None

    def value(self, key: str) -> int:
        """The effective value: this broker's, the cluster default, server.properties, built-in."""
        return int(self.text(key).strip())

    def text(self, key: str) -> str:
        """The effective value as written (the only form of a STRING key)."""
        raw, _ = self.lookup(key)
        if raw is not None and check_value(key, raw) is None:
            return raw
        return self.static_raw(key)

    def static_raw(self, key: str) -> str:
        """The value of server.properties (valid ones only), else the built-in default, as text."""
        config = self.config
        static = getattr(config, "originals", {}).get(key)
        if static is not None and check_value(key, static) is None:
            return static
        if key in _static_keys():
            try:
                value = config[key]
                if value is not None:
                    return str(value)
            except (KeyError, TypeError):
                pass
        return str(definition(key)[1])

    def listener_keys(self, default_only: bool = False) -> list[str]:
        """The listener-level keys set dynamically (this broker's or the default)."""
        stored = self.stored()
        names = set(stored.get(DEFAULT, {}))
        if not default_only:
            names |= set(stored.get(str(self.node_id), {}))
        return sorted(k for k in names if LISTENER_KEY.fullmatch(k))


def _static_keys():
    from .config import BROKER_CONFIGS

    return BROKER_CONFIGS

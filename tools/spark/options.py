"""The Spark kafka source and sink options, parsed into plain values (pure code).

What a query reads is given by exactly one of ``subscribe`` (comma-separated topics),
``subscribePattern`` (a regular expression matched against whole topic names; internal topics,
whose names start with ``__``, are left out as the Kafka consumer does) or ``assign`` (JSON
``{"topic": [0, 1]}``). Options starting with ``kafka.`` are client settings, passed on without
the prefix (Java-only settings librdkafka does not know are dropped, see :data:`JAVA_ONLY`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.tools.spark.offsets import OffsetOptionError, TopicPartition

KAFKA_PREFIX = "kafka."
DEFAULT_POLL_TIMEOUT_MS = 120_000

JAVA_ONLY = frozenset(
    {
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "sasl.jaas.config",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.type",
        "ssl.keystore.type",
        "interceptor.classes",
        "max.poll.records",
        "default.api.timeout.ms",
    }
)
"""Java client settings with no librdkafka equivalent; they are ignored rather than fatal."""

BASE_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"


class SourceOptionError(OffsetOptionError):
    """A Spark kafka option is missing, contradictory or malformed."""


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def client_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix; ``kafka.bootstrap.servers`` is required."""
    out = {
        k[len(KAFKA_PREFIX) :]: str(v)
        for k, v in options.items()
        if k.lower().startswith(KAFKA_PREFIX) and k[len(KAFKA_PREFIX) :] not in JAVA_ONLY
    }
    if not out.get("bootstrap.servers"):
        raise SourceOptionError("option 'kafka.bootstrap.servers' is required")
    return out


def schema_ddl(options: Mapping[str, str]) -> str:
    """The schema of Spark's kafka source; ``headers`` only with ``includeHeaders=true``."""
    return f"{BASE_SCHEMA}, {HEADERS_FIELD}" if flag(options, "includeHeaders", False) else BASE_SCHEMA


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = lowered(options).get(name.lower())
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise SourceOptionError(f"option {name!r} must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = lowered(options).get(name.lower())
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise SourceOptionError(f"option {name!r} must be a positive integer, not {value!r}") from None
    if number <= 0:
        raise SourceOptionError(f"option {name!r} must be a positive integer, not {number}")
    return number


@dataclass(frozen=True)
class Subscription:
    """Which topics or partitions a query reads: ``kind`` is subscribe, subscribePattern or assign."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def partitions(self, cluster: Mapping[str, int]) -> list[TopicPartition]:
        """The partitions to read, given ``{topic: partition count}`` from cluster metadata."""
        if self.kind == "assign":
            return sorted(self.assigned)
        names = self.topics if self.kind == "subscribe" else self._matching(cluster)
        return sorted((t, p) for t in names for p in range(cluster.get(t, 0)))

    def _matching(self, cluster: Iterable[str]) -> list[str]:
        regex = re.compile(self.pattern)
        return [t for t in cluster if not t.startswith("__") and regex.fullmatch(t)]


SUBSCRIPTION_KINDS = ("assign", "subscribe", "subscribePattern")


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    low = lowered(options)
    given = [kind for kind in SUBSCRIPTION_KINDS if kind.lower() in low]
    if len(given) != 1:
        raise SourceOptionError(
            f"exactly one of 'assign', 'subscribe' or 'subscribePattern' is required (got {given or 'none'})"
        )
    kind = given[0]
    value = low[kind.lower()].strip()
    return _SUBSCRIPTION_PARSERS[kind](value)


def _subscribe(value: str) -> Subscription:
    topics = tuple(t.strip() for t in value.split(",") if t.strip())
    if not topics:
        raise SourceOptionError("option 'subscribe' names no topic")
    return Subscription("subscribe", topics=topics)


def _pattern(value: str) -> Subscription:
    if not value:
        raise SourceOptionError("option 'subscribePattern' is empty")
    try:
        re.compile(value)
    except re.error as exc:
        raise SourceOptionError(f"option 'subscribePattern': {exc}") from None
    return Subscription("subscribePattern", pattern=value)


def _assign(value: str) -> Subscription:
    try:
        doc = json.loads(value)
    except ValueError:
        raise SourceOptionError(f"option 'assign' is not JSON: {value!r}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, list) for v in doc.values()):
        raise SourceOptionError(f"option 'assign' must look like {{\"topic\": [0, 1]}}, not {value!r}")
    pairs = []
    for topic, parts in doc.items():
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise SourceOptionError(f"option 'assign': partition {p!r} of {topic!r} is not valid")
            pairs.append((topic, p))
    if not pairs:
        raise SourceOptionError("option 'assign' names no partition")
    return Subscription("assign", assigned=tuple(sorted(set(pairs))))


_SUBSCRIPTION_PARSERS = {"subscribe": _subscribe, "subscribePattern": _pattern, "assign": _assign}


def sink_topic(options: Mapping[str, str]) -> str | None:
    """The ``topic`` option of the sink: when set it overrides the rows' ``topic`` column."""
    value = lowered(options).get("topic")
    return value.strip() if value and value.strip() else None

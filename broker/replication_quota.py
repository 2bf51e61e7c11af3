"""Replication throttles, as Kafka's ReplicationQuotaManager applies them (KIP-73).

Two quotas per broker, each a rate in bytes per second taken from the dynamic broker configs
(`strom.broker.dynamic_config`):

- leader (`leader.replication.throttled.rate`): a leader answers a follower's Fetch for a
  throttled partition with no records while the follower is not in the ISR and the leader's
  measured rate is over the quota. The bytes it sends for throttled partitions (in sync or not)
  are recorded, so all throttled replication traffic counts toward the rate.
- follower (`follower.replication.throttled.rate`): a follower leaves a throttled partition out
  of its Fetch while it has not caught up with the leader and its measured rate is over the
  quota, and records the bytes it receives for throttled partitions.

Which partitions are throttled comes from the topic configs `leader.replication.throttled.replicas`
and `follower.replication.throttled.replicas`: `*` (every replica of the topic) or a list of
`partition:broker` pairs, of which each broker takes the pairs naming itself (for the leader
list: the brokers leading or able to lead the partition; for the follower list: the brokers
receiving it). `kafka-reassign-partitions.sh --execute --throttle N` sets both rates on the
brokers involved and both lists on the moving partitions; `--verify` removes them all once the
move is done.

The rate is Kafka's SimpleRate: the bytes of the last `replication.quota.window.num` samples of
`replication.quota.window.size.seconds` each, over the time they span (at least one sample), so
a throttled replica starts at the quota rather than bursting ahead of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .config import THROTTLED_REPLICAS_KEYS, _parse_list
from .dynamic_config import DYNAMIC, DynamicConfigs
from .quotas import Sensor

LEADER, FOLLOWER = "leader", "follower"
ALL = "*"


def throttled_partitions(value: str | None, node_id: int) -> frozenset[int] | str:
    """The partitions a throttle list names for broker `node_id` ("*" for all of them)."""
    items = _parse_list(value or "")
    if "".join(items) == ALL:
        return ALL
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        try:
            if int(broker) == node_id:
                out.add(int(partition))
        except ValueError:
            continue
    return frozenset(out)


class ReplicationQuota:
    """One direction (leader or follower) of a broker's replication throttle."""

    """``dynamic``: the broker's dynamic configs (the throttle rates); ``topic_configs``: a topic's
    config overrides (its throttled replica lists), None for a topic not known here."""

    def __init__(
        self,
        kind: str,
        node_id: int,
        dynamic: DynamicConfigs,
        topic_configs: Callable[[str], Mapping[str, str] | None],
        samples: int = 11,
        window_s: float = 1.0,
    ) -> None:
        self.kind, self.node_id = kind, node_id
        self.dynamic = dynamic
        self.topic_configs = topic_configs
        self.rate_key = f"{kind}.replication.throttled.rate"
        self.list_key = THROTTLED_REPLICAS_KEYS[0 if kind == LEADER else 1]
        self.sensor = Sensor(samples, window_s, min_windows=1)
        self._parsed: dict[str, frozenset[int] | str] = {}

    def limit(self) -> float:
        """Bytes per second (infinite when no throttle rate is set)."""
        value = self.dynamic.value(self.rate_key)
        return float("inf") if value >= DYNAMIC[self.rate_key][1] else float(value)

    def active(self) -> bool:
        """Whether a rate is set at all (without one nothing is held back; the bytes of throttled
        replicas are measured all the same, as Kafka's byte-rate metric)."""
        return self.limit() != float("inf")

    def is_throttled(self, topic: str, partition: int) -> bool:
        configs = self.topic_configs(topic)
        value = configs.get(self.list_key) if configs is not None else None
        if not value:
            return False
        names = self._parsed.get(value)
        if names is None:
            if len(self._parsed) > 1024:
                self._parsed.clear()
            names = self._parsed[value] = throttled_partitions(value, self.node_id)
        return names == ALL or partition in names

    def exceeded(self, now: float) -> bool:
        limit = self.limit()
        return limit != float("inf") and self.sensor.rate(now) > limit

    def record(self, size: int, now: float) -> None:
        if size > 0:
            self.sensor.record(size, now)

    def delay(self, now: float) -> float:
        """Seconds until the measured rate falls back to the quota (0 if it is there now)."""
        limit = self.limit()
        if limit == float("inf"):
            return 0.0
        total = self.sensor.total(now)
        window = self.sensor.window(now)
        if limit <= 0:
            return self.sensor.window_s
        return max(0.0, total / limit - window)

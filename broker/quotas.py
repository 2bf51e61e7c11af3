"""Client quotas: configs per user and client id (DescribeClientQuotas/AlterClientQuotas) and
their enforcement, as Kafka's ClientQuotaManager does it.

Entities are (user, client-id) pairs where either part may be absent, a name, or the default
(None). A request's quota comes from the most specific entity that sets the key, in Kafka's
order: user+client, user+default client, user, default user+client, default user+default
client, default user, client, default client. Each matched entity has its own rate sensor: the
sum of what was recorded in the last `quota.window.num` samples of `quota.window.size.seconds`
each, divided by the time they span (at least all but one sample).

- `producer_byte_rate`: Produce request bytes; `consumer_byte_rate`: Fetch response bytes
  (consumers only; a throttled fetch answers no records); `request_percentage`: time spent
  handling the client's requests, as a percentage of one thread.
- Over the quota, the answer carries `throttle_time_ms` = (rate - quota) / quota x window, and
  the connection is muted that long after the answer is sent (Kafka's KIP-219 behaviour: newer
  clients also hold back themselves).

Standalone, the configs live in the broker's metadata file; in a ZooKeeper cluster under
/config/users and /config/clients (`strom.broker.zk.quotas_zk`), re-read on every change.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping

from strom.protocol.schema import ApiKey

log = logging.getLogger("strom.quotas")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
KEYS = {
    USER: (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE),
    CLIENT_ID: (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE),
    IP: (CONNECTION_CREATION_RATE,),
}
MAX_THROTTLE_MS = 2**31 - 1

# An entity: ((entity type, name or None for the default), ...) sorted by type.
Entity = tuple[tuple[str, str | None], ...]
# The client quota configs as this broker knows them now: {entity: {key: value}}.
QuotaConfigs = Mapping[Entity, Mapping[str, float]]


def entity_key(pairs) -> Entity:
    return tuple(sorted(pairs))


class Sensor:
    """A windowed rate: samples of `window_s` seconds, `samples` of them kept. The rate is taken
    over at least `min_windows` windows (Kafka's Rate: all but one sample; its SimpleRate, which
    replication quotas use: one)."""

    def __init__(self, samples: int, window_s: float, min_windows: int | None = None):
        self.samples_max, self.window_s = samples, window_s
        self.min_windows = samples - 1 if min_windows is None else min_windows
        self.samples: deque[list] = deque()  # [start, value]

    def record(self, value: float, now: float) -> None:
        if not self.samples or now >= self.samples[-1][0] + self.window_s:
            self.samples.append([now, 0.0])
        self.samples[-1][1] += value
        while len(self.samples) > self.samples_max or (
            self.samples and now - self.samples[0][0] > self.samples_max * self.window_s
        ):
            self.samples.popleft()

    def window(self, now: float) -> float:
        """Seconds the rate is taken over: the samples' span, at least (samples - 1) windows."""
        self._purge(now)
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        return max(elapsed, self.min_windows * self.window_s, self.window_s)

    def _purge(self, now: float) -> None:
        while self.samples and now - self.samples[0][0] > self.samples_max * self.window_s:
            self.samples.popleft()

    def total(self, now: float) -> float:
        self._purge(now)
        return sum(v for _, v in self.samples)

    def rate(self, now: float) -> float:
        return self.total(now) / self.window(now)


class TokenBucket:
    """Kafka's TokenBucket stat (KIP-599): credits refill at `rate` per second up to a burst of
    rate x samples x window; a mutation takes as many credits as it creates or deletes
    partitions, and the quota is exhausted while the credits are below zero."""

    def __init__(self) -> None:
        self.rate, self.burst = 0.0, 0.0
        self.tokens: float | None = None  # full at first
        self.last = 0.0

    def configure(self, rate: float, span_s: float) -> None:
        self.rate, self.burst = rate, rate * span_s

    def level(self, now: float) -> float:
        if self.tokens is None:
            self.tokens = self.burst
        else:
            self.tokens = min(self.burst, self.tokens + self.rate * max(now - self.last, 0.0))
        self.last = now
        return self.tokens

    def take(self, permits: float, now: float) -> None:
        self.tokens = min(self.burst, self.level(now) - permits)

    def throttle_ms(self, now: float) -> int:
        """How long until the credits are back at zero."""
        tokens = self.level(now)
        if tokens >= 0 or self.rate <= 0:
            return 0
        return int(min(round(-tokens / self.rate * 1000), MAX_THROTTLE_MS))


class MutationQuota:
    """One request's view of its client's controller mutation quota."""

    def __init__(self, bucket: TokenBucket, strict: bool) -> None:
        self.bucket, self.strict = bucket, strict
        self.violation_ms = 0

    def record(self, permits: int, now: float) -> int:
        """Take `permits` credits. Strict: if the quota is already exhausted, take nothing and
        return the throttle time (the topic is answered THROTTLING_QUOTA_EXCEEDED); else 0."""
        if self.strict:
            wait = self.bucket.throttle_ms(now)
            if wait > 0:
                self.violation_ms = wait
                return wait
        self.bucket.take(permits, now)
        return 0

    def throttle_ms(self, now: float) -> int:
        """The answer's throttle_time_ms (and how long the connection is muted): strict, the
        throttle of a refused topic; permissive, how long the credits take to recover."""
        return self.violation_ms if self.strict else self.bucket.throttle_ms(now)


class QuotaManager:
    """``configs``: the quota configs now (standalone: the metadata file's, in a cluster ZooKeeper's)."""

    def __init__(self, configs: Callable[[], QuotaConfigs], samples: int = 11, window_s: float = 1.0):
        self.configs = configs
        self.samples, self.window_s = samples, window_s
        self.sensors: dict[tuple[str, Entity], Sensor] = {}
        self.buckets: dict[Entity, TokenBucket] = {}  # controller mutation quotas

    @property
    def entries(self) -> QuotaConfigs:
        return self.configs()

    # ------------------------------------------------------------------ lookup
    def quota(self, key: str, user: str, client_id: str) -> tuple[float, Entity] | None:
        """(quota, the entity that sets it) for a request of `user` (principal name) and `client_id`."""
        entries = self.entries
        for entity in (
            (("client-id", client_id), ("user", user)),
            (("client-id", None), ("user", user)),
            (("user", user),),
            (("client-id", client_id), ("user", None)),
            (("client-id", None), ("user", None)),
            (("user", None),),
            (("client-id", client_id),),
            (("client-id", None),),
        ):
            values = entries.get(entity)
            if values is not None and key in values:
                return values[key], entity
        return None

    def record(self, key: str, user: str, client_id: str, value: float, now: float) -> int:
        """Record `value` against the quota `key` of this client; the throttle time in ms (0: none)."""
        found = self.quota(key, user, client_id)
        if found is None:
            return 0
        quota, entity = found
        sensor_entity = self._sensor_entity(entity, user, client_id)
        sensor = self.sensors.get((key, sensor_entity))
        if sensor is None:
            sensor = self.sensors[(key, sensor_entity)] = Sensor(self.samples, self.window_s)
        sensor.record(value, now)
        rate = sensor.rate(now)
        if quota <= 0 or math.isinf(quota) or rate <= quota:
            return 0
        throttle = (rate - quota) / quota * sensor.window(now) * 1000
        return int(min(throttle, self.samples * self.window_s * 1000, MAX_THROTTLE_MS))

    def _sensor_entity(self, entity: Entity, user: str, client_id: str) -> Entity:
        # a default entity's sensor is per client: each one gets the default, not a share of it
        return tuple((t, n if n is not None else (user if t == USER else client_id)) for t, n in entity)

    # ------------------------------------------------------------------ controller mutations
    def mutation_quota(self, request, principal: str, strict_since: int) -> MutationQuota | None:
        """The controller mutation quota (KIP-599) of a CreateTopics/CreatePartitions/DeleteTopics
        request's client, or None when none applies. From `strict_since` on, a request over the
        quota is answered THROTTLING_QUOTA_EXCEEDED per topic; older versions are only throttled."""
        if not self.entries:
            return None
        user = principal.split(":", 1)[1] if ":" in principal else principal
        client_id = request.header.client_id or ""
        found = self.quota(CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None or found[0] <= 0 or math.isinf(found[0]):
            return None
        rate, entity = found
        key = self._sensor_entity(entity, user, client_id)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket()
        bucket.configure(rate, self.samples * self.window_s)
        return MutationQuota(bucket, request.header.api_version >= strict_since)

    # ------------------------------------------------------------------ per request
    def throttle(self, request, body: dict, elapsed_s: float, principal: str, now: float) -> int:
        """After a request was handled: record it, set throttle_time_ms; the mute time in ms."""
        if not self.entries:
            return 0
        header = request.header
        user = principal.split(":", 1)[1] if ":" in principal else principal
        client_id = header.client_id or ""
        throttle = 0
        if header.api_key == ApiKey.PRODUCE:
            throttle = self.record(PRODUCER_BYTE_RATE, user, client_id, request.size, now)
        elif header.api_key == ApiKey.FETCH and _replica(request) < 0:
            size = sum(_size(p.get("records")) for t in body.get("responses") or () for p in t.get("partitions") or ())
            throttle = self.record(CONSUMER_BYTE_RATE, user, client_id, size, now)
            if throttle:
                for t in body.get("responses") or ():
                    for p in t.get("partitions") or ():
                        p["records"] = b""  # Kafka answers a throttled fetch without data
        request_throttle = self.record(REQUEST_PERCENTAGE, user, client_id, elapsed_s * 100, now)
        throttle = max(throttle, request_throttle)
        if throttle and "throttle_time_ms" in body:
            body["throttle_time_ms"] = max(body.get("throttle_time_ms") or 0, throttle)
        return throttle


def _replica(request) -> int:
    body = request.body
    if request.header.api_version >= 15:
        return body.replica_state.replica_id
    return body.replica_id


def _size(records) -> int:
    if not records:
        return 0
    size = getattr(records, "size", None)
    return size if size is not None else len(records)

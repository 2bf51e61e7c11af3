"""Connection creation quotas (KIP-612), as Kafka's ConnectionQuotas applies them.

- Per IP: the `connection_creation_rate` client quota of the `ip` entity (an address, a host
  name resolved when the quotas change, or the default for every address;
  `kafka-configs.sh --alter --entity-type ips ...`). A new connection
  from an IP over its rate is not served: it is closed after the throttle time, as Kafka closes
  it, and it does not count toward the rate.
- Broker-wide: `max.connection.creation.rate` (server.properties or a dynamic broker config),
  new connections per second on all listeners but the inter-broker one (exempt only where there
  are other listeners, as in Kafka); `listener.name.<listener>.max.connection.creation.rate` for
  one listener (the inter-broker one too). Over either, new connections wait their turn, one at a
  time per listener, as Kafka's acceptor waits before taking the next one.

Both rates are measured as client quotas are (`quota.window.num` samples of
`quota.window.size.seconds`), and the time to wait is Kafka's: how long the measured rate needs
to fall back to the quota.
"""
from __future__ import annotations

import ipaddress
import logging
import math

import trio

from .dynamic_config import INT_MAX, listener_rate_key
from .quotas import CONNECTION_CREATION_RATE, IP, MAX_THROTTLE_MS, Sensor

log = logging.getLogger("strom.connections")

RESOLVE_TIMEOUT_S = 2.0
MAX_IP_SENSORS = 10_000  # a flood of source addresses cannot grow this without bound


class ConnectionQuotas:
    def __init__(self, broker):
        self.broker = broker
        config = broker.config
        self.samples, self.window_s = config["quota.window.num"], config["quota.window.size.seconds"]
        self.broker_sensor = Sensor(self.samples, self.window_s)
        self.ip_sensors: dict[str, Sensor] = {}
        self.listener_sensors: dict[str, Sensor] = {}
        self._accepting: dict[str, trio.Lock] = {}
        self.throttled_ips = 0  # connections closed for an IP quota
        self.delayed = 0  # connections that waited for max.connection.creation.rate
        self._by_name: dict[str, float] = {}  # addresses of IP entities named by a host name
        self._resolved_from: dict | None = None  # the quota entries they were resolved from

    def ip_quota(self, ip: str) -> float | None:
        """The connection_creation_rate of `ip`: its own entity, one named by a host name that
        resolves to it (resolved when the quotas change, as Kafka does), or the default."""
        entries = self.broker.quotas.entries
        values = entries.get(((IP, ip),))
        if values and CONNECTION_CREATION_RATE in values:
            return float(values[CONNECTION_CREATION_RATE])
        by_name = self._by_name.get(ip)
        if by_name is not None and self._resolved_from is entries:
            return by_name
        values = entries.get(((IP, None),))
        if values and CONNECTION_CREATION_RATE in values:
            return float(values[CONNECTION_CREATION_RATE])
        return None

    async def resolve_names(self) -> None:
        """Resolve the IP entities given as host names (`localhost`) once per change of the quotas."""
        entries = self.broker.quotas.entries
        if entries is self._resolved_from:
            return
        by_name: dict[str, float] = {}
        for entity, values in list(entries.items()):
            if len(entity) != 1 or entity[0][0] != IP or entity[0][1] is None or CONNECTION_CREATION_RATE not in values:
                continue
            name = entity[0][1]
            try:
                ipaddress.ip_address(name)
                continue  # an address: matched as it is
            except ValueError:
                pass
            infos = []
            with trio.move_on_after(RESOLVE_TIMEOUT_S):
                try:
                    infos = await trio.socket.getaddrinfo(name, None)
                except (OSError, UnicodeError) as exc:
                    log.warning("IP quota for %s: the name does not resolve (%s); it applies to no address", name, exc)
            for info in infos:
                by_name.setdefault(info[4][0], float(values[CONNECTION_CREATION_RATE]))
        self._by_name, self._resolved_from = by_name, entries

    def _throttle_ms(self, sensor: Sensor, quota: float, now: float) -> int:
        rate = sensor.rate(now)
        if quota <= 0 or math.isinf(quota) or rate <= quota:
            return 0
        return int(min((rate - quota) / quota * sensor.window(now) * 1000, self.samples * self.window_s * 1000,
                       MAX_THROTTLE_MS))

    def ip_throttle_ms(self, ip: str, now: float) -> int:
        """Record a new connection from `ip`; the time to wait before closing it when that is
        over the IP's quota (then it is not counted), else 0."""
        quota = self.ip_quota(ip)
        if quota is None:
            return 0
        sensor = self.ip_sensors.get(ip)
        if sensor is None:
            if len(self.ip_sensors) >= MAX_IP_SENSORS:
                self.ip_sensors.clear()
            sensor = self.ip_sensors[ip] = Sensor(self.samples, self.window_s)
        sensor.record(1, now)
        throttle = self._throttle_ms(sensor, quota, now)
        if throttle:
            sensor.record(-1, now)  # a refused connection does not count
        return throttle

    def broker_limit(self) -> float:
        return float(self.broker.dynamic_configs.value("max.connection.creation.rate"))

    async def admit(self, listener_name: str, ip: str | None) -> int:
        """Before serving a new connection: 0 to serve it (after any wait the broker-wide rate
        asks for), or the milliseconds to wait before closing it (over its IP's quota)."""
        if ip is not None and self.broker.quotas.entries:
            await self.resolve_names()
            throttle = self.ip_throttle_ms(ip, trio.current_time())
            if throttle:
                self.throttled_ips += 1
                log.debug("closing a connection from %s in %d ms: over its connection_creation_rate", ip, throttle)
                return throttle
        config = self.broker.config
        # the inter-broker listener is exempt from the broker-wide limit when there are others
        # (Kafka's "protected" listener); its own listener limit still applies
        protected = listener_name == config.inter_broker_listener and len(config.listeners) > 1
        limit = INT_MAX if protected else self.broker_limit()
        own = float(self.broker.dynamic_configs.value(listener_rate_key(listener_name)))
        if limit >= INT_MAX and own >= INT_MAX:
            return 0
        lock = self._accepting.setdefault(listener_name, trio.Lock())
        async with lock:  # one at a time per listener, as Kafka's acceptor
            now = trio.current_time()
            wait_ms = 0
            if own < INT_MAX:
                sensor = self.listener_sensors.setdefault(listener_name, Sensor(self.samples, self.window_s))
                sensor.record(1, now)
                wait_ms = self._throttle_ms(sensor, own, now)
            if limit < INT_MAX:
                self.broker_sensor.record(1, now)
                wait_ms = max(wait_ms, self._throttle_ms(self.broker_sensor, limit, now))
            if wait_ms:
                self.delayed += 1
                await trio.sleep(wait_ms / 1000)
        return 0

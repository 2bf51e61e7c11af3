"""Connection quotas as Kafka's ConnectionQuotas applies them: creation rates (KIP-612) and limits
on open connections (KIP-402), checked for each connection a listener accepts before it accepts
the next (`strom.broker.server.connection.serve_listener`).

Creation rates:

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

Connection limits (KIP-402 and Kafka's ConnectionQuotas), on connections accepted from sockets:

- `max.connections.per.ip` and `max.connections.per.ip.overrides` (`host:count,...`; host names
  resolved when the value changes, to all their addresses): a connection from an IP that already
  has its limit open (on any listener) is closed right after accept, logged and counted.
- `max.connections`: open connections on all listeners together; at the limit a listener stops
  accepting until a connection closes (the kernel keeps the newcomers in its backlog, so a client
  waits, then connects). The inter-broker listener is exempt when there are other listeners, and
  when its connections take the total over the limit, the least recently used connection on the
  other listeners is closed to make room (KIP-402); so is one when a dynamic change lowers the
  limit below what is open. `listener.name.<listener>.max.connections`: open connections on one
  listener (the inter-broker one too), at the limit that listener stops accepting.

All of them change at run time (`strom.broker.dynamic_config`): a waiting listener re-checks at
once on a local change and within a second on one made through another broker.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import trio

from .dynamic_config import INT_MAX, DynamicConfigs, listener_max_key, listener_rate_key
from .quotas import CONNECTION_CREATION_RATE, IP, MAX_THROTTLE_MS, QuotaManager, Sensor

if TYPE_CHECKING:
    from .config import BrokerConfig

log = logging.getLogger("strom.connections")

RESOLVE_TIMEOUT_S = 2.0
MAX_IP_SENSORS = 10_000  # a flood of source addresses cannot grow this without bound
RECHECK_S = 1.0  # a listener waiting for a slot re-reads the limits this often (changes via ZooKeeper)
REFUSAL_LOG_INTERVAL_S = 10.0  # per-IP refusals are logged once per address in this time


class Limits(NamedTuple):
    """The limits one listener works with, read from the dynamic and static configs."""

    max_connections: int
    listener_max: int
    broker_rate: int
    listener_rate: int
    per_ip: int
    overrides: str


class Admission:
    """One connection counted against the limits, from accept until its handler closes it."""

    __slots__ = ("listener", "ip", "scope", "stats", "admitted", "closing", "released")

    def __init__(self, listener: str, ip: str | None):
        self.listener, self.ip = listener, ip
        self.scope = trio.CancelScope()  # cancelled to close the connection (max.connections)
        self.stats = None  # the handler's ConnectionStats: when it was last active
        self.admitted = time.monotonic()
        self.closing = self.released = False

    def last_active(self) -> float:
        return self.stats.last_active if self.stats is not None else self.admitted


class ListenerState:
    """A listener's open connections and what /metrics shows of its acceptor."""

    def __init__(self, samples: int, window_s: float):
        self.lock = trio.Lock()  # one connection at a time, as Kafka's acceptor
        self.count = 0
        self.open: set[Admission] = set()
        self.accepted = Sensor(samples, window_s)  # Kafka's connection-accept-rate (and its quota)
        self.throttle_ms = Sensor(samples, window_s)  # waits for a creation rate, summed ...
        self.throttled = Sensor(samples, window_s)  # ... and counted: connection-accept-throttle-time
        self.ip_throttle_ms = Sensor(samples, window_s)  # ip-connection-accept-throttle-time
        self.ip_throttled = Sensor(samples, window_s)
        self.blocked = Sensor(samples, window_s)  # seconds the acceptor waited: AcceptorBlockedPercent
        self.blocked_since: float | None = None
        self.refused_per_ip = 0  # closed at once: the IP had max.connections.per.ip open
        self.closed_ip_rate = 0  # closed after a wait: over the IP's connection_creation_rate
        self.closed_excess = 0  # closed as least recently used to keep max.connections


def _average(total: Sensor, count: Sensor, now: float) -> float:
    n = count.total(now)
    return total.total(now) / n if n else 0.0


class ConnectionQuotas:
    """``config``: server.properties (listeners, static limits); ``dynamic``: the dynamic broker
    configs (limits changed at run time); ``quotas``: the client quotas (connection_creation_rate)."""

    def __init__(self, config: BrokerConfig, dynamic: DynamicConfigs, quotas: QuotaManager) -> None:
        self.config = config
        self.dynamic = dynamic
        self.quotas = quotas
        self.samples, self.window_s = config["quota.window.num"], config["quota.window.size.seconds"]
        self.broker_sensor = Sensor(self.samples, self.window_s)
        self.ip_sensors: dict[str, Sensor] = {}
        self.listeners: dict[str, ListenerState] = {}
        self.throttled_ips = 0  # connections closed for an IP quota
        self.delayed = 0  # connections that waited for max.connection.creation.rate
        self.blocked = 0  # connections that waited for max.connections or a listener's max.connections
        self.refused_per_ip = 0  # connections closed for max.connections.per.ip
        self.closed_excess = 0  # least recently used connections closed for max.connections
        self._by_name: dict[str, float] = {}  # addresses of IP entities named by a host name
        self._resolved_from: dict | None = None  # the quota entries they were resolved from
        self.total = 0  # open connections counted (accepted from sockets)
        # called when a connection is counted or released (tests' waits for connections)
        self.watchers: list[Callable[[], None]] = []
        self.ip_counts: dict[str, int] = {}
        self._changed: trio.Event | None = None  # set when a connection closes or a limit changes
        self._overrides_raw: str | None = None  # max.connections.per.ip.overrides, as resolved
        self._overrides: dict[str, int] = {}  # address -> limit
        self._refusals_logged: dict[str, list] = {}  # ip -> [time logged, refusals since]
        self._static_limits: dict[str, Limits] = {}  # per listener, while no dynamic config is set

    def ip_quota(self, ip: str) -> float | None:
        """The connection_creation_rate of `ip`: its own entity, one named by a host name that
        resolves to it (resolved when the quotas change, as Kafka does), or the default."""
        entries = self.quotas.entries
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
        entries = self.quotas.entries
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
        return int(
            min(
                (rate - quota) / quota * sensor.window(now) * 1000, self.samples * self.window_s * 1000, MAX_THROTTLE_MS
            )
        )

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
        return float(self.limits(self.config.listeners[0].name).broker_rate)

    def limits(self, listener: str) -> Limits:
        """The limits of `listener` now: read once and kept while no dynamic broker config is set
        (the common case: server.properties only), else read afresh."""
        dynamic = self.dynamic
        fixed = not dynamic.stored()
        if fixed:
            found = self._static_limits.get(listener)
            if found is not None:
                return found
        value = dynamic.value
        found = Limits(
            value("max.connections"),
            value(listener_max_key(listener)),
            value("max.connection.creation.rate"),
            value(listener_rate_key(listener)),
            value("max.connections.per.ip"),
            dynamic.text("max.connections.per.ip.overrides"),
        )
        if fixed:
            self._static_limits[listener] = found
        return found

    # ------------------------------------------------------------------ limits
    def state(self, listener: str) -> ListenerState:
        found = self.listeners.get(listener)
        if found is None:
            found = self.listeners[listener] = ListenerState(self.samples, self.window_s)
        return found

    def protected(self, listener: str) -> bool:
        """Kafka's protected listener: the inter-broker one, when there are others."""
        config = self.config
        return listener == config.inter_broker_listener and len(config.listeners) > 1

    def max_connections(self) -> int:
        return self.limits(self.config.listeners[0].name).max_connections

    def listener_max(self, listener: str) -> int:
        return self.limits(listener).listener_max

    def per_ip_limit(self, ip: str) -> int:
        found = None
        if self._overrides:
            try:
                found = self._overrides.get(_normal(ip))
            except ValueError:
                pass
        return found if found is not None else self.limits(self.config.listeners[0].name).per_ip

    def slot_available(self, listener: str) -> bool:
        limits = self.limits(listener)
        if self.state(listener).count >= limits.listener_max:
            return False
        return self.protected(listener) or self.total < limits.max_connections

    async def resolve_overrides(self) -> None:
        """Resolve max.connections.per.ip.overrides once per change of its value: addresses as
        they are, host names to every address they have (one that does not resolve is logged)."""
        from .config import parse_ip_overrides

        raw = self.limits(self.config.listeners[0].name).overrides
        if raw == self._overrides_raw:
            return
        try:
            entries = parse_ip_overrides(raw)
        except ValueError as exc:  # refused when set; kept from an older value only
            log.warning("max.connections.per.ip.overrides=%r is not valid (%s); no overrides apply", raw, exc)
            entries = {}
        resolved: dict[str, int] = {}
        for host, count in entries.items():
            try:
                resolved[_normal(host)] = count
                continue
            except ValueError:
                pass
            infos = []
            with trio.move_on_after(RESOLVE_TIMEOUT_S):
                try:
                    infos = await trio.socket.getaddrinfo(host or "localhost", None)
                except (OSError, UnicodeError) as exc:
                    log.warning(
                        "max.connections.per.ip.overrides: %s does not resolve (%s); its limit applies to no address",
                        host,
                        exc,
                    )
            for info in infos:
                resolved.setdefault(_normal(info[4][0]), count)
        self._overrides_raw, self._overrides = raw, resolved

    def _changed_event(self) -> trio.Event:
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def configs_changed(self) -> None:
        """A dynamic broker config changed: waiting listeners look again, excess connections close."""
        self._notify()
        self._close_excess()

    # ------------------------------------------------------------------ accepting
    async def accept(self, listener: str, ip: str | None) -> Admission | int | None:
        """Called for each connection accepted on `listener`, before the next one is accepted.
        Waits while the listener is at a connection limit or a creation rate asks for it; then
        the connection's Admission (it counts until `release`), or the milliseconds to wait before
        closing it (over its IP's connection_creation_rate), or None to close it now (its IP has
        max.connections.per.ip open)."""
        state = self.state(listener)
        try:  # one at a time per listener; no trip through the scheduler when none waits
            state.lock.acquire_nowait()
        except trio.WouldBlock:
            await state.lock.acquire()
        try:
            return await self._accept(listener, ip, state)
        finally:
            state.lock.release()

    async def _accept(self, listener: str, ip: str | None, state: ListenerState) -> Admission | int | None:
        await self._wait_for_slot(listener, state)
        now = trio.current_time()
        if ip is not None and self.quotas.entries:
            await self.resolve_names()
            throttle = self.ip_throttle_ms(ip, now)
            if throttle:
                self.throttled_ips += 1
                state.closed_ip_rate += 1
                state.ip_throttle_ms.record(throttle, now)
                state.ip_throttled.record(1, now)
                state.accepted.record(-1, now)  # not accepted: the rates do not count it
                if not self.protected(listener):
                    self.broker_sensor.record(-1, now)
                log.debug("closing a connection from %s in %d ms: over its connection_creation_rate", ip, throttle)
                return throttle
        if ip is not None:
            await self.resolve_overrides()
            limit = self.per_ip_limit(ip)
            if self.ip_counts.get(ip, 0) >= limit:
                self.refused_per_ip += 1
                state.refused_per_ip += 1
                self._log_refusal(ip, limit)
                return None
            self.ip_counts[ip] = self.ip_counts.get(ip, 0) + 1
        admission = Admission(listener, ip)
        state.count += 1
        state.open.add(admission)
        self.total += 1
        if self.protected(listener):
            self._close_excess()
        for watcher in self.watchers:
            watcher()
        return admission

    async def _wait_for_slot(self, listener: str, state: ListenerState) -> None:
        """Record the new connection in the creation rates and wait, as Kafka's acceptor, until
        the rates allow it and the listener and the broker have a slot for it."""
        now = trio.current_time()
        wait_ms = self._rate_wait_ms(listener, state, now)
        if not wait_ms and self.slot_available(listener):
            return
        if wait_ms:
            self.delayed += 1
        end = now + wait_ms / 1000
        state.blocked_since = now
        said = False
        try:
            while True:
                remaining = end - trio.current_time()
                if remaining <= 0:
                    if self.slot_available(listener):
                        return
                    if not said:
                        said = True
                        self.blocked += 1
                        log.info(
                            "listener %s stops accepting until a connection closes: %s",
                            listener,
                            self._limit_reached(listener),
                        )
                with trio.move_on_after(remaining if remaining > 0 else RECHECK_S):
                    await self._changed_event().wait()
        finally:
            done = trio.current_time()
            state.blocked.record(done - state.blocked_since, done)
            state.blocked_since = None

    def _limit_reached(self, listener: str) -> str:
        own = self.listener_max(listener)
        if self.state(listener).count >= own:
            return f"listener.name.{listener.lower()}.max.connections={own} reached"
        return f"max.connections={self.max_connections()} reached"

    def _rate_wait_ms(self, listener: str, state: ListenerState, now: float) -> int:
        """Record a new connection in the broker-wide (unless the listener is protected) and the
        listener's creation rate; how long they ask it to wait."""
        # the inter-broker listener is exempt from the broker-wide rate when there are others
        # (Kafka's "protected" listener); its own listener rate still applies
        wait_ms = 0
        limits = self.limits(listener)
        if not self.protected(listener):
            self.broker_sensor.record(1, now)
            if limits.broker_rate < INT_MAX:
                wait_ms = self._throttle_ms(self.broker_sensor, float(limits.broker_rate), now)
        state.accepted.record(1, now)
        own = float(limits.listener_rate)
        if own < INT_MAX:
            wait_ms = max(wait_ms, self._throttle_ms(state.accepted, own, now))
        if wait_ms:
            state.throttle_ms.record(wait_ms, now)
            state.throttled.record(1, now)
        return wait_ms

    def release(self, admission: Admission) -> None:
        """The connection closed: its slot is free again."""
        if admission.released:
            return
        admission.released = True
        state = self.state(admission.listener)
        state.count -= 1
        state.open.discard(admission)
        self.total -= 1
        ip = admission.ip
        if ip is not None:
            left = self.ip_counts.get(ip, 1) - 1
            if left > 0:
                self.ip_counts[ip] = left
            else:
                self.ip_counts.pop(ip, None)
        self._notify()
        for watcher in self.watchers:
            watcher()

    def _close_excess(self) -> None:
        """Over max.connections (the inter-broker listener took a connection, or the limit was
        lowered): close the least recently used connections of the other listeners, as Kafka's
        processors do, until the count is back at the limit."""
        limit = self.max_connections()
        closing = sum(1 for st in self.listeners.values() for a in st.open if a.closing)
        excess = self.total - closing - limit
        if excess <= 0:
            return
        candidates = sorted(
            (a for name, st in self.listeners.items() if not self.protected(name) for a in st.open if not a.closing),
            key=Admission.last_active,
        )
        for victim in candidates[:excess]:
            victim.closing = True
            victim.scope.cancel()
            self.closed_excess += 1
            self.state(victim.listener).closed_excess += 1
            log.info(
                "closing the least recently used connection from %s on listener %s: %d connections open, "
                "max.connections=%d",
                victim.ip,
                victim.listener,
                self.total,
                limit,
            )

    def _log_refusal(self, ip: str, limit: int) -> None:
        now = time.monotonic()
        seen = self._refusals_logged.get(ip)
        if seen is not None and now - seen[0] < REFUSAL_LOG_INTERVAL_S:
            seen[1] += 1
            return
        more = f" ({seen[1]} more refused since the last such line)" if seen is not None and seen[1] else ""
        if len(self._refusals_logged) >= MAX_IP_SENSORS:
            self._refusals_logged.clear()
        self._refusals_logged[ip] = [now, 0]
        log.info(
            "Rejected connection from %s, address already has the configured maximum of %d connections "
            "(max.connections.per.ip or its override)%s",
            ip,
            limit,
            more,
        )

    # ------------------------------------------------------------------ metrics
    def listener_metrics(self) -> dict[str, dict[str, float]]:
        """Per configured listener, plain numbers for /metrics."""
        now = trio.current_time()
        out = {}
        for listener in self.config.listeners:
            st = self.state(listener.name)
            blocked = st.blocked.total(now) + (now - st.blocked_since if st.blocked_since is not None else 0.0)
            out[listener.name] = {
                "accept_rate": st.accepted.rate(now),
                "accept_throttle_time_ms": _average(st.throttle_ms, st.throttled, now),
                "ip_accept_throttle_time_ms": _average(st.ip_throttle_ms, st.ip_throttled, now),
                "blocked_fraction": min(1.0, blocked / st.blocked.window(now)),
                "refused_per_ip": st.refused_per_ip,
                "closed_ip_rate": st.closed_ip_rate,
                "closed_excess": st.closed_excess,
            }
        return out


def _normal(address: str) -> str:
    """An IP address in one spelling (ValueError for a host name)."""
    return str(ipaddress.ip_address(address))

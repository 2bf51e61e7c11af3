"""Waits on a running broker's state, so tests never sleep: a group's state and members, a group's
lag, a partition's offset, the number of client connections.

Each wait runs on the broker's trio loop and is woken by the broker itself, never by a timer:

- groups: the group coordinator's store calls its ``watchers`` after every group operation, timer
  expiry (a session that ran out) and record it appends (a commit, a rebalance's end);
- offsets and lag: the replica manager's data waiters (``wait_for_data``, what long-polling
  fetches park on) wake on every append and high-watermark move of the partitions waited on;
- connections: the connection quotas' ``watchers``, on every connection counted or released.

A woken wait looks again at what it waits for. As a safety net for a change none of those see
(a group loaded when this broker becomes the coordinator of its partition), a wait also looks
again every ``RECHECK_S``. Every wait is bounded: :class:`~strom.testing.faults.WaitTimeout` says
what was waited for and what was seen last.

Share groups (KIP-932): ``group_view`` is the one place that reads a group; when the broker gets
a share coordinator, its groups are read there too (``share`` type).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from weakref import WeakKeyDictionary

import trio

from .control import WaitTimeout
from .faults import _bounded

if TYPE_CHECKING:
    from strom.broker.connection_quota import ConnectionQuotas
    from strom.broker.coordinator.group.coordinator import GroupCoordinator
    from strom.broker.metadata.cache import MetadataCache
    from strom.broker.replica.manager import ReplicaManager

log = logging.getLogger("strom.testing.waits")

RECHECK_S = 1.0
# Kafka's group state names, per group type (any case is accepted)
GROUP_STATES = {
    "classic": ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"),
    "consumer": ("Empty", "Assigning", "Reconciling", "Stable", "Dead"),
    "share": ("Empty", "Stable", "Dead"),
}

T = TypeVar("T")


class WatchedBroker(Protocol):
    """What the waits read of a running broker."""

    groups: GroupCoordinator | None
    replicas: ReplicaManager
    metadata: MetadataCache | None
    connection_quotas: ConnectionQuotas


class Watcher:
    """The waits of one broker (made on first use, see :func:`watcher`)."""

    def __init__(self, broker: WatchedBroker) -> None:
        self._broker = weakref.ref(broker)  # the registry below is keyed weakly by the broker
        self._changed = trio.Event()
        self._hooked_groups: Any = None
        broker.connection_quotas.watchers.append(self._pulse)

    @property
    def broker(self) -> WatchedBroker:
        found = self._broker()
        if found is None:
            raise ReferenceError("the broker of this watcher is gone")
        return found

    def _pulse(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _hook_groups(self) -> None:
        """Watch the group store the broker has now (it may be made after start, or anew)."""
        groups = self.broker.groups
        store = groups.store if groups is not None else None
        if store is not None and store is not self._hooked_groups:
            store.watchers.append(self._pulse)
            self._hooked_groups = store

    async def until(
        self,
        check: Callable[[], tuple[bool, T]],
        timeout: float,  # noqa: ASYNC109
        what: str,
        seen: Callable[[T], str],
        partitions: Collection[tuple[str, int]] | None = None,
        data: bool = False,
    ) -> T:
        """Until ``check()`` says done; its value. ``data``: also woken by appends and high
        watermark moves (of ``partitions``, or of any partition)."""
        timeout = _bounded(timeout)
        done, value = check()
        with trio.move_on_after(timeout):
            while not done:
                self._hook_groups()
                changed = self._changed
                async with trio.open_nursery() as nursery:

                    async def data_moved() -> None:
                        # look again first: data may have moved before this task ran; from here to
                        # the waiter's registration nothing else runs (no checkpoint between)
                        if not check()[0]:
                            await self.broker.replicas.wait_for_data(partitions)
                        nursery.cancel_scope.cancel()

                    async def other(changed: trio.Event) -> None:
                        with trio.move_on_after(RECHECK_S):
                            await changed.wait()
                        nursery.cancel_scope.cancel()

                    if data:
                        nursery.start_soon(data_moved)
                    nursery.start_soon(other, changed)
                done, value = check()
            return value
        raise WaitTimeout(f"waited {timeout:g} s for {what}; {seen(value)}")

    # ------------------------------------------------------------------ groups
    async def group(
        self,
        group_id: str,
        state: str | None = "Stable",
        members: int | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109
    ) -> dict[str, Any]:
        want_state = state.lower() if state else None
        known = {name.lower() for names in GROUP_STATES.values() for name in names}
        if want_state is not None and want_state not in known:
            names = sorted({name for names in GROUP_STATES.values() for name in names})
            raise ValueError(f"state={state!r}: not a group state; Kafka's are {', '.join(names)} (None: any)")
        members = None if members is None else int(members)

        def check() -> tuple[bool, dict[str, Any]]:
            view = group_view(self.broker.groups, group_id)
            ok = (want_state is None or view["state"].lower() == want_state) and (
                members is None or view["members"] == members
            )
            return ok and (view["state"] != "Dead" or want_state == "dead"), view

        what = f"group {group_id!r} to be {state or 'in any state'}" + (
            f" with {members} members" if members is not None else ""
        )
        return await self.until(check, timeout, what, _seen_group)

    async def lag(self, group_id: str, topic: str | None = None, lag: int = 0, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        lag = int(lag)

        def check() -> tuple[bool, dict[str, Any]]:
            view = group_lag(self.broker, group_id, topic)
            return view["lag"] is not None and view["lag"] <= lag, view

        what = f"group {group_id!r} to have a lag of at most {lag}" + (f" on {topic!r}" if topic else "")
        return await self.until(check, timeout, what, _seen_lag, data=True)

    async def offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        timeout: float = 10.0,  # noqa: ASYNC109
        kind: str = "high_watermark",
    ) -> dict[str, Any]:
        if kind not in ("high_watermark", "log_end_offset"):
            raise ValueError(f"kind={kind!r}: high_watermark (what consumers can read) or log_end_offset")
        partition, offset = int(partition), int(offset)

        def check() -> tuple[bool, dict[str, Any]]:
            view = partition_offsets(self.broker, topic, partition)
            return view[kind] is not None and view[kind] >= offset, view

        what = f"{topic}-{partition} to reach {kind} {offset}"
        return await self.until(
            check, timeout, what, lambda v: f"seen: {v}", partitions=[(topic, int(partition))], data=True
        )

    async def connections(self, count: int, at_least: bool = True, timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        count, at_least = int(count), bool(at_least)

        def check() -> tuple[bool, dict[str, Any]]:
            n = self.broker.connection_quotas.total
            return (n >= count if at_least else n == count), {"connections": n}

        what = f"{'at least ' if at_least else 'exactly '}{count} client connections"
        return await self.until(check, timeout, what, lambda v: f"seen {v['connections']}")


_watchers: WeakKeyDictionary[Any, Watcher] = WeakKeyDictionary()


def watcher(broker: WatchedBroker) -> Watcher:
    """The waits of ``broker`` (one per broker)."""
    found = _watchers.get(broker)
    if found is None:
        found = _watchers[broker] = Watcher(broker)
    return found


# ----------------------------------------------------------------------------- reading state
def group_view(groups: GroupCoordinator | None, group_id: str) -> dict[str, Any]:
    """A group as Kafka's ListGroups/Describe show it: type, state, member count ("Dead": none)."""
    if groups is None:
        return {"group_id": group_id, "type": None, "state": "Dead", "members": 0}
    consumer = groups.consumer.groups.get(group_id)
    if consumer is not None:
        return {"group_id": group_id, "type": "consumer", "state": consumer.state, "members": len(consumer.members)}
    classic = groups.get(group_id)
    if classic is not None:
        return {"group_id": group_id, "type": "classic", "state": classic.state.value, "members": len(classic.members)}
    share = getattr(groups, "share", None)  # KIP-932 share groups, once the broker has them
    found = share.groups.get(group_id) if share is not None else None
    if found is not None:
        return {"group_id": group_id, "type": "share", "state": str(found.state), "members": len(found.members)}
    return {"group_id": group_id, "type": None, "state": "Dead", "members": 0}


def partition_offsets(broker: WatchedBroker, topic: str, partition: int) -> dict[str, Any]:
    replica = broker.replicas.partition(topic, int(partition))
    if replica is None:
        return {"topic": topic, "partition": partition, "high_watermark": None, "log_end_offset": None}
    return {
        "topic": topic,
        "partition": partition,
        "high_watermark": replica.high_watermark,
        "log_end_offset": replica.log.log_end_offset,
        "log_start_offset": replica.log.log_start_offset,
        "leader": replica.is_leader,
    }


def group_lag(broker: WatchedBroker, group_id: str, topic: str | None) -> dict[str, Any]:
    """The group's lag per partition: high watermark minus committed offset. With ``topic``, every
    partition of it (one without a commit lags by what it holds: high watermark minus log start);
    without, the partitions the group committed offsets for. ``lag`` None: nothing to measure
    (no commit yet, or the topic is unknown here)."""
    groups = broker.groups
    committed = groups.fetch_offsets(group_id, None) if groups is not None and not groups.loading else {}
    if topic is not None:
        info = broker.metadata.topic(topic) if broker.metadata is not None else None
        keys = [(topic, i) for i in range(info.partitions)] if info is not None else []
    else:
        keys = sorted(committed)
    parts = {}
    for key in keys:
        offsets = partition_offsets(broker, *key)
        hw = offsets["high_watermark"]
        done = committed.get(key)
        start = offsets.get("log_start_offset")
        base = done.offset if done is not None else start
        parts[f"{key[0]}-{key[1]}"] = None if hw is None or base is None else max(hw - base, 0)
    known = [v for v in parts.values() if v is not None]
    total = sum(known) if keys and len(known) == len(keys) else None
    return {"group_id": group_id, "topic": topic, "lag": total, "partitions": parts}


def _seen_group(view: dict[str, Any]) -> str:
    if view["type"] is None:
        return "the group does not exist (no member joined yet, or it was deleted)"
    return f"last seen: {view['type']} group, {view['state']}, {view['members']} members"


def _seen_lag(view: dict[str, Any]) -> str:
    if view["lag"] is None:
        return f"last seen: no lag to measure (per partition: {view['partitions'] or 'none'})"
    return f"last seen: lag {view['lag']} (per partition: {view['partitions']})"

"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) over the group store.

The state machine itself is `state.Group`; this is what runs it on the coordinator: a request that
must wait (a join until the rebalance completes, a sync until the leader's assignment arrives)
waits, bounded, for its member's answer; a group whose persisted state changed writes its group
metadata record (only when Stable or Empty, as Kafka does); the timer loop sleeps until the
earliest group deadline (session expiry, pending member expiry, initial delay, rebalance timeout)
or until a request changes one, then expires with trio's clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import trio

from strom.broker.coordinator.group.records import (
    GroupKey,
    OffsetKey,
    decode_group_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
)
from strom.broker.coordinator.group.state import Group, GroupState, JoinRequest, JoinResult, SyncResult
from strom.broker.coordinator.group.store import GroupStore
from strom.broker.coordinator.runtime import NotEnoughReplicas
from strom.protocol.errors import ErrorCode
from strom.storage.errors import StorageError

log = logging.getLogger("strom.group")

WAIT_MARGIN_S = 5.0

R = TypeVar("R", JoinResult, SyncResult)


class ClassicGroups:
    """The classic groups of a group store: their requests, records and timers."""

    def __init__(self, store: GroupStore) -> None:
        self.store = store

    def session_error(self, session_timeout_ms: int) -> ErrorCode | None:
        s = self.store.config.classic
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return None

    # ------------------------------------------------------------------ requests
    async def join(self, group_id: str, req: JoinRequest) -> JoinResult:
        if req.member_id and self.store.classic_group(group_id) is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=req.member_id)
        group = self.store.classic_group_or_new(group_id)
        bound = (
            max(req.rebalance_timeout_ms, req.session_timeout_ms) + self.store.config.classic.initial_rebalance_delay_ms
        ) / 1000 + WAIT_MARGIN_S
        return await self._wait(
            group,
            lambda w: group.join(req, trio.current_time(), w),
            bound,
            "join_waiter",
            JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=req.member_id),
        )

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        group = self.store.classic_group(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        member = group.members.get(member_id)
        bound = (member.rebalance_timeout_ms if member else 0) / 1000 + WAIT_MARGIN_S
        return await self._wait(
            group,
            lambda w: group.sync(
                member_id, instance_id, generation, protocol_type, protocol_name, assignments, trio.current_time(), w
            ),
            bound,
            "sync_waiter",
            SyncResult(ErrorCode.REBALANCE_IN_PROGRESS),
        )

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        group = self.store.classic_group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        before = group.changes
        result = group.heartbeat(member_id, instance_id, generation, trio.current_time())
        self.written(group, before)
        return result

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        group = self.store.classic_group(group_id)
        if group is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        before = group.changes
        results = [group.leave(member_id, instance_id, trio.current_time()) for member_id, instance_id in members]
        self.written(group, before)
        return results

    async def _wait(
        self,
        group: Group,
        start: Callable[[Callable[[R], None]], R | None],
        bound_s: float,
        attr: str,
        timeout_result: R,
    ) -> R:
        """Run `start(waiter)`; if it answered later, wait (bounded) for the waiter's result."""
        box: list[R] = []
        done = trio.Event()

        def waiter(result: R) -> None:
            box.append(result)
            done.set()

        before = group.changes
        result = start(waiter)
        self.written(group, before)
        if result is not None:
            return result
        with trio.move_on_after(bound_s):
            await done.wait()
        if box:
            return box[0]
        for member in group.members.values():
            if getattr(member, attr) is waiter:
                setattr(member, attr, None)
        self.store.wake_timers()
        return timeout_result

    @staticmethod
    def answer_not_coordinator(group: Group) -> None:
        """Answer the group's waiting joins and syncs NOT_COORDINATOR (unloaded, or shut down)."""
        for member in list(group.members.values()):
            member.answer_join(JoinResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id))
            member.answer_sync(SyncResult(ErrorCode.NOT_COORDINATOR))

    # ------------------------------------------------------------------ records
    def written(self, group: Group, before: int) -> None:
        """After a group operation: persist its metadata if it changed, wake the timer loop."""
        if group.changes != before:
            self.store_group(group)
        self.store.wake_timers()

    def store_group(self, group: Group) -> None:
        """Write the group's metadata record, as Kafka does only when it is Stable or Empty."""
        if group.protocol_type is None or group.state not in (GroupState.STABLE, GroupState.EMPTY):
            return
        try:
            self.store.append(
                group.group_id, [(encode_group_key(GroupKey(group.group_id)), encode_group_value(group.to_record()))]
            )
        except (StorageError, OSError) as exc:
            # too few in-sync replicas is the cluster's state (a warning), anything else this write's failure
            (log.warning if isinstance(exc, NotEnoughReplicas) else log.error)(
                "could not persist group=%s generation=%d: %s", group.group_id, group.generation, exc
            )

    def remove(self, group: Group) -> None:
        """Tombstones for every offset and the group itself; the group is Dead."""
        keys = [encode_offset_key(OffsetKey(group.group_id, t, p)) for t, p in group.offsets]
        keys.append(encode_group_key(GroupKey(group.group_id)))
        self.store.append(group.group_id, [(k, None) for k in keys])
        group.state = GroupState.DEAD
        group.offsets.clear()
        self.store.classic.pop(group.group_id, None)

    def replay(self, group_id: str, value: bytes | None) -> None:
        """Loading `__consumer_offsets`: a group metadata record (None: the group's tombstone, which
        leaves the offsets committed after it); raises `GroupRecordError` if unreadable."""
        if value is None:
            gone = self.store.classic.pop(group_id, None)
            if gone is not None and gone.offsets:
                self.store.classic_group_or_new(group_id).offsets.update(gone.offsets)
        else:
            self.store.classic_group_or_new(group_id).load_record(decode_group_value(value))

    # ------------------------------------------------------------------ timers
    async def run(self) -> None:
        while True:
            self.store.timers_changed = trio.Event()
            deadline = min((g.next_deadline() for g in self.store.classic.values()), default=float("inf"))
            with trio.move_on_at(deadline):
                await self.store.timers_changed.wait()
            self.tick(trio.current_time())

    def tick(self, now: float) -> None:
        for group in list(self.store.classic.values()):
            before = group.changes
            try:
                group.expire(now)
            except Exception:
                log.exception("expiring timers of group=%s failed", group.group_id)
            if group.changes != before:
                self.store_group(group)
                self.store.changed()

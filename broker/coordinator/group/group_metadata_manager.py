"""The groups themselves (Kafka's GroupMetadataManager): which protocol serves a request, the
conversions between a classic and a consumer group, deletion, and the group records of
`__consumer_offsets`.

A group id is either a classic group (JoinGroup/SyncGroup) or a KIP-848 consumer group
(ConsumerGroupHeartbeat), as in Kafka. Classic requests to a consumer group that has members are
served by the consumer group (its classic members); a JoinGroup to an empty consumer group turns
it into a classic one (its offsets stay), as Kafka 4.0 does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.broker.coordinator.group.classic_groups import ClassicGroups
from strom.broker.coordinator.group.consumer_groups import ConsumerGroups
from strom.broker.coordinator.group.records import ConsumerGroupKey, GroupKey
from strom.broker.coordinator.group.state import GroupState, JoinRequest, JoinResult, SyncResult
from strom.broker.coordinator.group.store import GroupStore
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.group")


class GroupMetadataManager:
    """Every group of a store, classic or consumer, as the requests see them."""

    def __init__(self, store: GroupStore, classic: ClassicGroups, consumer: ConsumerGroups) -> None:
        self.store = store
        self.classic = classic
        self.consumer = consumer

    # ------------------------------------------------------------------ the classic protocol's requests
    async def join_group(self, group_id: str, req: JoinRequest) -> JoinResult:
        error = self.store.group_error(group_id) or self.classic.session_error(req.session_timeout_ms)
        if error is not None:
            return JoinResult(error, member_id=req.member_id)
        if self.store.kind_of(group_id) in ("streams", "share"):
            # a KIP-1071 streams group or a KIP-932 share group takes no classic members (as Kafka)
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id="")
        if self.consumer.has_members(group_id):
            # a classic member joins a consumer group (a rolling downgrade, or mixed clients)
            return self.consumer.classic_join(group_id, req)
        if self.consumer.get(group_id) is not None:
            # an empty consumer group becomes a classic group (its offsets stay), as Kafka 4.0 converts it
            self.consumer.delete(group_id)
            log.info("empty consumer group %s converted to a classic group", group_id)
        return await self.classic.join(group_id, req)

    async def sync_group(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        error = self.store.group_error(group_id)
        if error is not None:
            return SyncResult(error)
        if self.consumer.get(group_id) is not None:
            return self.consumer.classic_sync(
                group_id, member_id, instance_id, generation, protocol_type, protocol_name
            )
        return await self.classic.sync(
            group_id, member_id, instance_id, generation, protocol_type, protocol_name, assignments
        )

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        error = self.store.group_error(group_id)
        if error is not None:
            return error
        if self.consumer.get(group_id) is not None:
            return self.consumer.classic_heartbeat(group_id, member_id, instance_id, generation)
        return self.classic.heartbeat(group_id, member_id, instance_id, generation)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        error = self.store.group_error(group_id)
        if error is not None:
            return error, []
        if self.consumer.get(group_id) is not None:
            return ErrorCode.NONE, self.consumer.classic_leave(group_id, members)
        return ErrorCode.NONE, self.classic.leave(group_id, members)

    # ------------------------------------------------------------------ DeleteGroups
    def delete_group(self, group_id: str) -> ErrorCode:
        error = self.store.group_error(group_id)
        if error is not None:
            return error
        consumer = self.consumer.delete(group_id)
        if consumer is ErrorCode.NON_EMPTY_GROUP:
            return consumer
        group = self.store.classic_group(group_id)
        if group is None and consumer is ErrorCode.NONE:
            log.info("deleted consumer group=%s", group_id)
            return ErrorCode.NONE
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        self.classic.remove(group)
        log.info("deleted group=%s", group_id)
        return ErrorCode.NONE

    # ------------------------------------------------------------------ loading and unloading
    def replay(self, key: GroupKey | ConsumerGroupKey, value: bytes | None) -> None:
        """Loading `__consumer_offsets`: a classic or consumer group record (None: a tombstone)."""
        if isinstance(key, ConsumerGroupKey):
            self.consumer.replay(key, value)
        else:
            self.classic.replay(key.group, value)

    def loaded(self) -> None:
        """After loading: classic groups with nothing left (no members, offsets or protocol) go."""
        classic = self.store.classic
        for group in classic.values():
            if not group.members and not group.offsets and group.protocol_type is None:
                group.state = GroupState.DEAD
        for group_id in [g for g, group in classic.items() if group.state is GroupState.DEAD]:
            del classic[group_id]

    def unload(self, is_coordinated: Callable[[str], bool]) -> None:
        """Drop the groups this broker no longer coordinates; their waiting members are answered
        NOT_COORDINATOR and find the new coordinator, which has loaded the same records."""
        for group_id in [g for g in self.store.classic if not is_coordinated(g)]:
            ClassicGroups.answer_not_coordinator(self.store.classic.pop(group_id))
        self.consumer.drop_unled(is_coordinated)

    def shutdown(self) -> None:
        for group in self.store.classic.values():
            ClassicGroups.answer_not_coordinator(group)

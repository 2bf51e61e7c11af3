"""What the three share admin APIs share: the group coordinator's share groups as
`coordinator.share.admin.ShareGroupDirectory`, the `ShareGroupOffsetsAdmin` over them and the
persister, and the group coordinator's own checks (is the group coordinated here, loaded)."""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator.group.share_groups import ShareGroup
from strom.broker.coordinator.share.admin import ShareGroupLike, ShareGroupOffsetsAdmin
from strom.protocol.errors import ErrorCode

from ..auth import ResourceType, allowed
from ..request_context import RequestContext

COORDINATOR_MESSAGES = {
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
}


class GroupDirectory:
    """The group coordinator's share groups (``groups.share``, KIP-932) and its other groups."""

    def __init__(self, ctx: RequestContext) -> None:
        self.groups = ctx.groups
        self.share = ctx.groups.share  # the share groups (KIP-932)

    def get(self, group_id: str) -> ShareGroupLike | None:
        return self.share.get(group_id)

    def create(self, group_id: str) -> ShareGroupLike:
        return self.share.groups.setdefault(group_id, ShareGroup(group_id))

    def other_kind(self, group_id: str) -> bool:
        return self.groups.store.kind_of(group_id) not in (None, "share")


def end_offset(ctx: RequestContext, topic: str, index: int) -> int | None:
    partition = ctx.replica_manager.partition(topic, index)
    return None if partition is None else partition.high_watermark


def admin(ctx: RequestContext) -> ShareGroupOffsetsAdmin | None:
    """The admin logic, or None where this broker has no share persister."""
    persister = ctx.share_persister
    if persister is None:
        return None
    return ShareGroupOffsetsAdmin(
        GroupDirectory(ctx),
        persister,
        ctx.groups.runtime.topics,
        lambda topic, index: end_offset(ctx, topic, index),
    )


def coordinator_error(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS where the group coordinator cannot answer."""
    code = ctx.groups.group_error(group_id)
    return None if code in (None, ErrorCode.INVALID_GROUP_ID) else code


def top_level(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message or COORDINATOR_MESSAGES.get(code),
        "responses": [],
    }


def guard(ctx: RequestContext, group_id: str, operation: int) -> ShareGroupOffsetsAdmin | dict[str, Any]:
    """The admin logic for an alter or delete of ``group_id``'s offsets, or the answer refusing it
    (not the group's coordinator, loading, not authorized for ``operation`` on the group)."""
    code = coordinator_error(ctx, group_id)
    if code is not None:
        return top_level(code)
    if not allowed(ctx, operation, ResourceType.GROUP, group_id):
        return top_level(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    logic = admin(ctx)
    return top_level(ErrorCode.COORDINATOR_NOT_AVAILABLE) if logic is None else logic


def reload_share_partitions(ctx: RequestContext, group_id: str, topics: set[str]) -> None:
    """After an empty group's offsets were altered or deleted: its share-partitions of ``topics``
    that this broker leads start again from the persisted state when next fetched (Kafka's
    share-partition leader drops a share group's partitions once the group is empty)."""
    share = ctx.share
    if share is None:
        return
    for key in [k for k in share.partitions if k[0] == group_id and k[1] in topics]:
        del share.partitions[key]

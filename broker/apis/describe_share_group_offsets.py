"""DescribeShareGroupOffsets (KIP-932; v1 adds the lag, KIP-1226): the start offsets of a share
group's share-partitions, as `kafka-share-groups.sh --describe --offsets` and Admin
listShareGroupOffsets show them. See `coordinator.share.admin` for Kafka 4.3's answers."""

from __future__ import annotations

from typing import Any

from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ._error_response import finish
from ._share_group_offsets import COORDINATOR_MESSAGES, admin, coordinator_error

API_KEY = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
VERSIONS = (0, 1)


def _group_error(group_id: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"group_id": group_id, "topics": [], "error_code": code, "error_message": message}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    logic = admin(ctx)
    groups = []
    for group in request.body.groups or []:
        group_id = group.group_id
        code = coordinator_error(ctx, group_id)
        if code is not None:
            groups.append(_group_error(group_id, code, COORDINATOR_MESSAGES.get(code)))
            continue
        if not allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_group_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."))
            continue
        wanted = None
        if group.topics is not None:
            wanted = [(t.topic_name, list(t.partitions or [])) for t in group.topics]
        if logic is None:
            groups.append(_group_error(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, None))
            continue
        entry = await logic.describe(group_id, wanted)
        for topic in entry["topics"]:
            if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic["topic_name"]):
                for partition in topic["partitions"]:
                    partition.update(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Topic authorization failed."
                    )
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    out = {
        "throttle_time_ms": 0,
        "groups": [_group_error(g["group_id"], code, message) for g in request.body.get("groups") or []],
    }
    return finish(API_KEY, request, out, code, message)

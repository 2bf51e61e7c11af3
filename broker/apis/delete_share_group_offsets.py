"""DeleteShareGroupOffsets (KIP-932): forget an empty share group's share-partitions of some
topics (Admin deleteShareGroupOffsets, `kafka-share-groups.sh --delete-offsets`). See
`coordinator.share.admin` for Kafka 4.3's answers."""

from __future__ import annotations

from typing import Any

from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ._error_response import finish
from ._share_group_offsets import guard, reload_share_partitions, top_level

API_KEY = ApiKey.DELETE_SHARE_GROUP_OFFSETS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    logic = guard(ctx, body.group_id, Operation.DELETE)
    if isinstance(logic, dict):
        return logic
    names = [t.topic_name for t in body.topics or []]
    denied = {n for n in names if not allowed(ctx, Operation.READ, ResourceType.TOPIC, n)}
    answer = await logic.delete(body.group_id, [n for n in names if n not in denied])
    if answer["error_code"] == ErrorCode.NONE:
        answer["responses"] += [
            {
                "topic_name": n,
                "topic_id": bytes(16),
                "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "error_message": "Topic authorization failed.",
            }
            for n in sorted(denied)
        ]
    if answer["error_code"] == ErrorCode.NONE:
        reload_share_partitions(ctx, body.group_id, set(names))
    return {"throttle_time_ms": 0, **answer}


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    return finish(API_KEY, request, top_level(code, message), code, message)

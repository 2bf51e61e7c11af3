"""AlterShareGroupOffsets (KIP-932): reset an empty share group's share-partitions to start
offsets (Admin alterShareGroupOffsets, `kafka-share-groups.sh --reset-offsets`). See
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

API_KEY = ApiKey.ALTER_SHARE_GROUP_OFFSETS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    logic = guard(ctx, body.group_id, Operation.READ)
    if isinstance(logic, dict):
        return logic
    denied = [
        t.topic_name for t in body.topics or [] if not allowed(ctx, Operation.READ, ResourceType.TOPIC, t.topic_name)
    ]
    wanted = [
        (t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions or []])
        for t in body.topics or []
        if t.topic_name not in denied
    ]
    answer = await logic.alter(body.group_id, wanted)
    for t in body.topics or []:
        if t.topic_name in denied and answer["error_code"] == ErrorCode.NONE:
            answer["responses"].append(
                {
                    "topic_name": t.topic_name,
                    "topic_id": bytes(16),
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            "error_message": "Topic authorization failed.",
                        }
                        for p in t.partitions or []
                    ],
                }
            )
    if answer["error_code"] == ErrorCode.NONE:
        reload_share_partitions(ctx, body.group_id, {t for t, _ in wanted})
    return {"throttle_time_ms": 0, **answer}


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    return finish(API_KEY, request, top_level(code, message), code, message)

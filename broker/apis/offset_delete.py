"""OffsetDelete: drop committed offsets of partitions a group no longer consumes.

An Empty group may lose any offset; a consumer group with members may not lose offsets of topics
its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC).
"""
from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.OFFSET_DELETE
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request) -> dict:
    body = request.body
    if not allowed(ctx, Operation.DELETE, ResourceType.GROUP, body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []}
    refused = {t.name for t in body.topics if not allowed(ctx, Operation.READ, ResourceType.TOPIC, t.name)}
    asked = [(t.name, p.partition_index) for t in body.topics if t.name not in refused for p in t.partitions]
    error, results = ctx.groups.delete_offsets(body.group_id, asked)
    if error is not ErrorCode.NONE:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    results = {**{(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                  for t in body.topics if t.name in refused for p in t.partitions}, **results}
    topics: dict[str, list] = {}
    for (topic, index), code in results.items():
        topics.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0,
            "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}

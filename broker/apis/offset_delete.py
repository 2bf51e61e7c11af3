"""OffsetDelete: drop committed offsets of partitions a group no longer consumes.

An Empty group may lose any offset; a consumer group with members may not lose offsets of topics
its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.OFFSET_DELETE
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.DELETE, ResourceType.GROUP, body.group_id):
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0, "topics": []}
    refused = {t.name for t in body.topics if not allowed(ctx, Operation.READ, ResourceType.TOPIC, t.name)}
    asked = [(t.name, p.partition_index) for t in body.topics if t.name not in refused for p in t.partitions]
    error, results = ctx.groups.delete_offsets(body.group_id, asked)
    if error is not ErrorCode.NONE:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    results = {
        **{
            (t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
            for t in body.topics
            if t.name in refused
            for p in t.partitions
        },
        **results,
    }
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), code in results.items():
        topics.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {
        "error_code": ErrorCode.NONE,
        "throttle_time_ms": 0,
        "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()],
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout(
    "topics",
    "name",
    "partitions",
    "partition_index",
    "topics",
    "name",
    "partitions",
    "partition_index",
    top_defaults={"error_code": 0},
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition and at the top level."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

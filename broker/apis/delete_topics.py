"""DeleteTopics: by name (v0+) or topic id (v6+); the partitions' logs are removed. The deleted
partitions count against the client's controller_mutation_rate quota."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..errors import TopicError
from ..quotas import MutationQuota
from ..request_context import RequestContext
from ._common import THROTTLED_MESSAGE, ZERO_UUID, mutation_quota, mutation_refused, throttled

API_KEY = ApiKey.DELETE_TOPICS
VERSIONS = (0, 6)
STRICT_SINCE = 5  # controller mutation quota: THROTTLING_QUOTA_EXCEEDED from v5, only throttled before


async def _delete(
    ctx: RequestContext, name: str | None, topic_id: bytes | None, quota: MutationQuota | None
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": name,
        "topic_id": topic_id or ZERO_UUID,
        "error_code": ErrorCode.NONE,
        "error_message": None,
    }
    if name is None:
        info = ctx.metadata.topic_by_id(topic_id) if topic_id is not None else None
        if info is None:
            result.update(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID, error_message="This server does not host this topic ID."
            )
            return result
        name = result["name"] = info.name
    else:
        info = ctx.metadata.topic(name)
        if info is not None:
            result["topic_id"] = info.topic_id
    if not allowed(ctx, Operation.DELETE, ResourceType.TOPIC, name):
        result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
        return result
    if info is not None and mutation_refused(quota, info.partitions):
        result.update(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED_MESSAGE)
        return result
    try:
        await ctx.admin.delete_topic(name)
    except TopicError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
    return result


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if request.header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    quota = mutation_quota(ctx, request, STRICT_SINCE)
    responses = [await _delete(ctx, name, tid, quota) for name, tid in wanted]
    return throttled(quota, {"throttle_time_ms": 0, "responses": responses})


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every topic, named as the version names them."""
    v, req = request.header.api_version, request.body
    names = (
        [{"name": n} for n in req.get("topic_names") or []]
        if v < 6
        else [{"name": t.get("name"), "topic_id": t.get("topic_id")} for t in req.get("topics") or []]
    )
    out = {"throttle_time_ms": 0, "responses": [dict(n, error_code=code) for n in names]}
    return finish(API_KEY, request, out, code, message)

"""ShareGroupHeartbeat (KIP-932): join, heartbeat and leave a share group; the logic is in
`strom.broker.coordinator.group.share_groups`."""

from __future__ import annotations

from typing import Any

from strom.broker import context
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.SHARE_GROUP_HEARTBEAT
VERSIONS = (1, 1)


def _refused(code: int, message: str | None = None) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return _refused(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    # as Kafka 4.3's KafkaApis: a subscription naming a topic the member may not DESCRIBE is refused whole
    names = set(body.subscribed_topic_names or ())
    denied = sorted(n for n in names if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, n))
    if denied:
        return _refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Unauthorized topics: {denied}")
    return ctx.groups.share.heartbeat(body, request.header.client_id or "", context.client_host.get())


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code``: the top-level code."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

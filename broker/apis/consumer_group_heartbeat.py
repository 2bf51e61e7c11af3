"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat, reconcile and leave a consumer group
(`group.protocol=consumer`); the logic is in `strom.broker.coordinator.group.consumer`."""

from __future__ import annotations

import contextlib
from typing import Any

from strom.broker import context
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
VERSIONS = (0, 1)


def _refused(code: int) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": None,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return _refused(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    # As Kafka 4.0's KafkaApis: a subscription naming any topic the member may not DESCRIBE is
    # refused whole (TOPIC_AUTHORIZATION_FAILED, nothing else set), before the coordinator sees it.
    names = set(body.subscribed_topic_names or ())
    if any(not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name) for name in names):
        return _refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if ctx.groups.share.get(body.group_id) is not None:  # a share group's id (KIP-932)
        refused = _refused(ErrorCode.GROUP_ID_NOT_FOUND)
        refused["error_message"] = f"Group {body.group_id} is not a consumer group."
        return refused
    with contextlib.suppress(TopicError):  # offsets are committed to __consumer_offsets later
        await ctx.groups.ensure_topic()
    if ctx.groups.streams.get(body.group_id) is not None:  # a KIP-1071 streams group, as Kafka answers
        return {
            **_refused(ErrorCode.GROUP_ID_NOT_FOUND),
            "error_message": f"Group {body.group_id} is not a consumer group.",
        }
    header = request.header
    return ctx.groups.consumer.heartbeat(header.api_version, body, header.client_id or "", context.client_host.get())


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

"""Heartbeat: keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.HEARTBEAT
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    code = ctx.groups.heartbeat(body.group_id, body.member_id, body.group_instance_id, body.generation_id)
    return {"throttle_time_ms": 0, "error_code": code}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

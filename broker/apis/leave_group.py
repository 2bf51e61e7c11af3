"""LeaveGroup: members leave (v0-2 one member id, v3+ a batch, static members by instance id)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.LEAVE_GROUP
VERSIONS = (0, 5)
BATCH_VERSION = 3


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
    if request.header.api_version < BATCH_VERSION:
        error, results = ctx.groups.leave_group(body.group_id, [(body.member_id, None)])
        return {"throttle_time_ms": 0, "error_code": error if error is not ErrorCode.NONE else results[0]}
    members = [(m.member_id or "", m.group_instance_id) for m in body.members]
    error, results = ctx.groups.leave_group(body.group_id, members)
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "members": [
            {"member_id": m, "group_instance_id": i, "error_code": code}
            for (m, i), code in zip(members, results, strict=False)
        ],
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

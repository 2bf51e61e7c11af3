"""SyncGroup: the leader hands in the assignment; every member gets its own share back."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.SYNC_GROUP
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    assignments = {a.member_id: bytes(a.assignment or b"") for a in body.assignments}
    result = await ctx.groups.sync_group(
        body.group_id,
        body.member_id,
        body.group_instance_id,
        body.generation_id,
        body.protocol_type,
        body.protocol_name,
        assignments,
    )
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish, top_level_error_response  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    at the top level, with an empty assignment."""
    return finish(API_KEY, request, top_level_error_response(API_KEY, code, assignment=b""), code, message)

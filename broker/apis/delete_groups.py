"""DeleteGroups: remove empty groups and all their offsets (tombstones in `__consumer_offsets`)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.DELETE_GROUPS
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "results": [
            {
                "group_id": g,
                "error_code": ctx.groups.delete_group(g)
                if allowed(ctx, Operation.DELETE, ResourceType.GROUP, g)
                else ErrorCode.GROUP_AUTHORIZATION_FAILED,
            }
            for g in request.body.groups_names
        ],
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every group."""
    out = {
        "throttle_time_ms": 0,
        "results": [{"group_id": g, "error_code": code} for g in request.body.get("groups_names") or []],
    }
    return finish(API_KEY, request, out, code, message)

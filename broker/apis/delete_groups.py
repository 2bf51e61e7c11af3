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
    results = []
    for g in request.body.groups_names:
        code: ErrorCode | None = ErrorCode.GROUP_AUTHORIZATION_FAILED
        if allowed(ctx, Operation.DELETE, ResourceType.GROUP, g):
            code = await _delete_share_group(ctx, g)
            if code is None:
                code = ctx.groups.delete_group(g)
        results.append({"group_id": g, "error_code": code})
    return {"throttle_time_ms": 0, "results": results}


async def _delete_share_group(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    """A share group (KIP-932): deleted when empty, with its share partitions' state; None when
    ``group_id`` is no share group."""
    error = ctx.groups.group_error(group_id)
    if error is not None or ctx.groups.share.get(group_id) is None:
        return None
    deleted = ctx.groups.share.delete(group_id)
    if deleted is None:
        return None
    code, partitions = deleted
    if code == ErrorCode.NONE and ctx.share is not None:
        await ctx.share.delete_group_state(group_id, partitions)
    return code


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

"""ShareGroupDescribe (KIP-932): a share group's state, epochs, assignor and members with their
assignments (`kafka-share-groups.sh --describe --members`)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ._common import OPERATIONS_NOT_REQUESTED
from .describe_groups import GROUP_AUTHORIZED_OPERATIONS

API_KEY = ApiKey.SHARE_GROUP_DESCRIBE
VERSIONS = (1, 1)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    operations = GROUP_AUTHORIZED_OPERATIONS if body.include_authorized_operations else OPERATIONS_NOT_REQUESTED
    groups = []
    for g in body.group_ids:
        if allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, g):
            groups.append(ctx.groups.share.describe(g, operations))
        else:
            groups.append(
                {
                    "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    "error_message": None,
                    "group_id": g,
                    "group_state": "",
                    "group_epoch": 0,
                    "assignment_epoch": 0,
                    "assignor_name": "",
                    "members": [],
                    "authorized_operations": OPERATIONS_NOT_REQUESTED,
                }
            )
    return {"throttle_time_ms": 0, "groups": groups}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code``: the code on each group."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

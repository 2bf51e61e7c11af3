"""StreamsGroupDescribe (KIP-1071): a streams group's epochs, topology and members with their
current and target task assignments (`kafka-streams-groups.sh --describe`, Admin
`describeStreamsGroups`)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ._common import OPERATIONS_NOT_REQUESTED

API_KEY = ApiKey.STREAMS_GROUP_DESCRIBE
VERSIONS = (0, 0)
# what Kafka 4.3 answers a streams group's describer may do: READ, DELETE, DESCRIBE,
# DESCRIBE_CONFIGS, ALTER_CONFIGS (AclOperation codes 3, 6, 8, 10, 11)
STREAMS_GROUP_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    operations = STREAMS_GROUP_AUTHORIZED_OPERATIONS if body.include_authorized_operations else OPERATIONS_NOT_REQUESTED
    groups = []
    for g in body.group_ids:
        if allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, g):
            groups.append(ctx.groups.streams.describe(g, operations))
        else:
            groups.append(
                {
                    "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    "error_message": None,
                    "group_id": g,
                    "group_state": "",
                    "group_epoch": 0,
                    "assignment_epoch": 0,
                    "topology": None,
                    "members": [],
                    "authorized_operations": OPERATIONS_NOT_REQUESTED,
                }
            )
    return {"throttle_time_ms": 0, "groups": groups}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

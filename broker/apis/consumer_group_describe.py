"""ConsumerGroupDescribe (KIP-848): a consumer group's epochs, assignor and members with their
current and target assignments (`kafka-consumer-groups.sh --describe` on such a group).

v1 (KIP-1099) adds each member's type: 0 for a classic member (a JoinGroup/SyncGroup client inside a
consumer group, after an online upgrade), 1 for a member of the consumer protocol."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ._common import OPERATIONS_NOT_REQUESTED
from .describe_groups import GROUP_AUTHORIZED_OPERATIONS

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    operations = GROUP_AUTHORIZED_OPERATIONS if body.include_authorized_operations else OPERATIONS_NOT_REQUESTED
    groups = []
    for g in body.group_ids:
        if allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, g):
            described = ctx.groups.consumer.describe(g, operations)
            if ctx.groups.streams.get(g) is not None and ctx.groups.consumer.get(g) is None:
                described = {  # as Kafka: a streams group is no consumer group
                    **described,
                    "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                    "error_message": f"Group {g} is not a consumer group.",
                    "group_state": "",
                    "members": [],
                    "authorized_operations": OPERATIONS_NOT_REQUESTED,
                }
            if described["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND and ctx.groups.share.get(g) is not None:
                described["error_message"] = f"Group {g} is not a consumer group."
            groups.append(described)
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
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

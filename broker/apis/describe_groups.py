"""DescribeGroups: state, protocol and members; members' metadata only once Stable (their last
assignment always, as Kafka shows it).

A group that does not exist, or is a KIP-848 consumer group (ConsumerGroupDescribe describes
those), is described as Dead: with no error up to v5, from v6 (KIP-1043) with GROUP_ID_NOT_FOUND
and a message saying which, as Kafka 4.0 answers.
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator.group.state import GroupState
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ._common import OPERATIONS_NOT_REQUESTED

API_KEY = ApiKey.DESCRIBE_GROUPS
VERSIONS = (0, 6)
NOT_FOUND_VERSION = 6  # the first version that answers GROUP_ID_NOT_FOUND
# READ, DESCRIBE, DELETE: what a client may do to a group without authorization checks.
GROUP_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 6, 8))


def _describe(ctx: RequestContext, group_id: str, with_operations: bool, version: int) -> dict[str, Any]:
    operations = GROUP_AUTHORIZED_OPERATIONS if with_operations else OPERATIONS_NOT_REQUESTED
    if with_operations and ctx.authorizer is not None:
        operations = ctx.authorizer.authorized_operations(ResourceType.GROUP, group_id)
    if not allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
        # as Kafka: no operations are told for a group the principal may not describe
        return {
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "group_id": group_id,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": OPERATIONS_NOT_REQUESTED,
        }
    out = {
        "error_code": ErrorCode.NONE,
        "group_id": group_id,
        "group_state": GroupState.DEAD.value,
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": operations,
    }
    error = (
        ctx.groups.group_error(group_id)
        if group_id
        else (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if ctx.groups.loading else None)
    )
    if error is not None:
        out["error_code"] = error
        return out
    group = ctx.groups.get(group_id)
    # a KIP-848 consumer group, a KIP-1071 streams group or a KIP-932 share group: no classic group
    consumer_group = ctx.groups.consumer.get(group_id) is not None or ctx.groups.streams.get(group_id) is not None
    consumer_group = consumer_group or ctx.groups.share.get(group_id) is not None
    if group is None or consumer_group:  # a KIP-848 consumer group is no classic group
        if version >= NOT_FOUND_VERSION:
            out["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
            out["error_message"] = (
                f"Group {group_id} is not a classic group." if consumer_group else f"Group {group_id} not found."
            )
            out["authorized_operations"] = OPERATIONS_NOT_REQUESTED  # as Kafka: none for a group not found
        return out
    stable = group.state is GroupState.STABLE
    out.update(
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
    )
    out["members"] = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata(group.protocol_name) if stable else b"",
            "member_assignment": m.assignment,
        }
        for m in group.members.values()
    ]
    return out


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    return {
        "throttle_time_ms": 0,
        "groups": [
            _describe(ctx, g, body.include_authorized_operations, request.header.api_version) for g in body.groups
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
        "groups": [
            {
                "group_id": g,
                "error_code": code,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
            for g in request.body.get("groups") or []
        ],
    }
    return finish(API_KEY, request, out, code, message)

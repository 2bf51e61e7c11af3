"""Heartbeat: keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.HEARTBEAT
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request) -> dict:
    body = request.body
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    code = ctx.groups.heartbeat(body.group_id, body.member_id, body.group_instance_id, body.generation_id)
    return {"throttle_time_ms": 0, "error_code": code}

"""DeleteGroups: remove empty groups and all their offsets (tombstones in `__consumer_offsets`)."""
from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.DELETE_GROUPS
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request) -> dict:
    return {"throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": ctx.groups.delete_group(g)
                         if allowed(ctx, Operation.DELETE, ResourceType.GROUP, g)
                         else ErrorCode.GROUP_AUTHORIZATION_FAILED}
                        for g in request.body.groups_names]}

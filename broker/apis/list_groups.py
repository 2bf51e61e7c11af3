"""ListGroups: every group this broker coordinates, classic and KIP-848 consumer groups, filtered
by state (v4+) and type (v5+)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..request_context import RequestContext

API_KEY = ApiKey.LIST_GROUPS
VERSIONS = (0, 5)
GROUP_TYPE = "classic"
CONSUMER_TYPE = "consumer"  # KIP-848 groups
STREAMS_TYPE = "streams"  # KIP-1071 groups
SHARE_TYPE = "share"  # KIP-932 groups


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    coordinator = ctx.groups
    if coordinator.loading:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "groups": []}
    states = {s.lower() for s in body.states_filter or []}
    types = {t.lower() for t in body.types_filter or []}
    everything = allowed_cluster(ctx, Operation.DESCRIBE)  # else only the groups it may describe
    consumer = coordinator.consumer.groups
    streams = coordinator.streams.groups
    groups = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type or "",
            "group_state": g.state.value,
            "group_type": GROUP_TYPE,
        }
        for g in list(coordinator.groups.values())
        if g.group_id not in consumer
        and g.group_id not in streams
        and (everything or allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, g.group_id))
        and (not states or g.state.value.lower() in states)
        and (not types or GROUP_TYPE in types)
    ]
    groups += [
        {"group_id": g.group_id, "protocol_type": CONSUMER_TYPE, "group_state": g.state, "group_type": CONSUMER_TYPE}
        for g in list(consumer.values())
        if (everything or allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, g.group_id))
        and (not states or g.state.lower() in states)
        and (not types or CONSUMER_TYPE in types)
    ]
    groups += [
        {"group_id": group_id, "protocol_type": STREAMS_TYPE, "group_state": state, "group_type": STREAMS_TYPE}
        for group_id, state in coordinator.streams.listed()
        if (everything or allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id))
        and (not states or state.lower() in states)
        and (not types or STREAMS_TYPE in types)
    ]
    groups += [  # share groups (KIP-932)
        {"group_id": g, "protocol_type": SHARE_TYPE, "group_state": state, "group_type": SHARE_TYPE}
        for g, state in coordinator.share.listed()
        if (everything or allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, g))
        and (not states or state.lower() in states)
        and (not types or SHARE_TYPE in types)
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

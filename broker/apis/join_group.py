"""JoinGroup: a member (re)joins; the answer waits until the group's join phase ends.

See `broker.group.state` for the state machine. From v4 on, a member without an id is first
answered MEMBER_ID_REQUIRED with the id it must join with (KIP-394).
"""

from __future__ import annotations

import contextlib
from typing import Any

from strom.broker import context
from strom.broker.coordinator.group.state import JoinRequest
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.JOIN_GROUP
VERSIONS = (0, 9)
NULLABLE_PROTOCOL_VERSION = 7


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    with contextlib.suppress(TopicError):  # a client may commit or join before FindCoordinator
        await ctx.groups.ensure_topic()
    body = request.body
    version = request.header.api_version
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None if version >= NULLABLE_PROTOCOL_VERSION else "",
            "leader": "",
            "skip_assignment": False,
            "member_id": body.member_id or "",
            "members": [],
        }
    req = JoinRequest(
        member_id=body.member_id or "",
        group_instance_id=body.group_instance_id,
        client_id=request.header.client_id or "",
        client_host=context.client_host.get(),
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=body.rebalance_timeout_ms if version >= 1 else body.session_timeout_ms,
        protocol_type=body.protocol_type or "",
        protocols=[(p.name, bytes(p.metadata or b"")) for p in body.protocols],
        require_known_member_id=version >= 4,
    )
    result = await ctx.groups.join_group(body.group_id, req)
    nullable = version >= NULLABLE_PROTOCOL_VERSION
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name if nullable else (result.protocol_name or ""),
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": meta} for m, i, meta in result.members],
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish, top_level_error_response  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    at the top level, with no generation or member."""
    v = request.header.api_version
    out = top_level_error_response(
        API_KEY, code, generation_id=-1, protocol_name=None if v >= 7 else "", leader="", member_id="", members=[]
    )
    return finish(API_KEY, request, out, code, message)

"""ShareAcknowledge (KIP-932): acknowledge (accept, release, reject; v2 also renew) records a
share consumer acquired, outside a fetch. It never opens a share session: epoch 0 is
INVALID_SHARE_SESSION_EPOCH; -1 acknowledges and closes the session, releasing what is left.
Acknowledgements are written through the persister before the answer."""

from __future__ import annotations

from typing import Any

from strom.broker.replica.share_manager import FINAL_EPOCH, ShareSessionError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from .share_fetch import Answer, acknowledge_all

API_KEY = ApiKey.SHARE_ACKNOWLEDGE
VERSIONS = (1, 2)


def _top_level(code: int, message: str | None = None, lock_ms: int = 0, version: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "responses": [],
        "node_endpoints": [],
    }
    if version >= 2:
        out["acquisition_lock_timeout_ms"] = lock_ms
    return out


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    share = ctx.share
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
    if share is None:
        return _top_level(ErrorCode.UNSUPPORTED_VERSION, version=version)
    if not group_id or not member_id:
        return _top_level(ErrorCode.INVALID_REQUEST, "Group id and member id must be set.", version=version)
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, group_id):
        return _top_level(ErrorCode.GROUP_AUTHORIZATION_FAILED, version=version)
    lock_ms = share.settings_for(group_id).record_lock_duration_ms
    try:
        share.acknowledge_session(group_id, member_id, epoch)
    except ShareSessionError as exc:
        return _top_level(exc.code, exc.message, version=version)
    renew = version >= 2 and bool(body.get("is_renew_ack", False))
    answer = Answer()
    for topic in body.topics:  # every named partition is answered, with or without batches
        for p in topic.partitions:
            answer.part(topic.topic_id, p.partition_index)
    await acknowledge_all(ctx, answer, group_id, member_id, body.topics, renew, "error_code")
    if epoch == FINAL_EPOCH:
        await share.close_session(group_id, member_id)
    out = answer.finish(ctx, _top_level(ErrorCode.NONE, lock_ms=lock_ms, version=version))
    for topic in out["responses"]:
        topic["partitions"] = [
            {k: v for k, v in part.items() if k in ("partition_index", "error_code", "error_message", "current_leader")}
            for part in topic["partitions"]
        ]
    return out


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code``: the top-level code."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

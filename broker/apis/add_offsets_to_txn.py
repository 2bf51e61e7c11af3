"""AddOffsetsToTxn: the producer will commit a group's offsets in its transaction.

The group's `__consumer_offsets` partition joins the transaction, so the coordinator's marker
settles the offsets TxnOffsetCommit writes there.
"""

from __future__ import annotations

import contextlib
from typing import Any

from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from .init_producer_id import fenced_code

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if not body.group_id:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_GROUP_ID}
    with contextlib.suppress(TopicError):
        await ctx.groups.ensure_topic()
    partition = ctx.txn.offsets_partition(body.group_id)
    code = await ctx.txn.add_partitions(body.transactional_id, body.producer_id, body.producer_epoch, {partition})
    return {"throttle_time_ms": 0, "error_code": fenced_code(code, 2, request.header.api_version)}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

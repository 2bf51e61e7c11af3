"""AddOffsetsToTxn: the producer will commit a group's offsets in its transaction.

The group's `__consumer_offsets` partition joins the transaction, so the coordinator's marker
settles the offsets TxnOffsetCommit writes there.
"""
from __future__ import annotations

import contextlib

from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed

from .init_producer_id import fenced_code
from ..request_context import RequestContext

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request) -> dict:
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
    code = await ctx.txn.add_partitions(body.transactional_id, body.producer_id, body.producer_epoch,
                                           {partition})
    return {"throttle_time_ms": 0, "error_code": fenced_code(code, 2, request.header.api_version)}

"""EndTxn: commit or abort the producer's transaction.

Answered once PrepareCommit/PrepareAbort is durable; the markers follow (see broker.txn). v5
(transaction version 2, an epoch bump per transaction) is not implemented and not advertised.
"""
from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed

from .init_producer_id import fenced_code

API_KEY = ApiKey.END_TXN
VERSIONS = (0, 4)


async def handle(broker, request) -> dict:
    body = request.body
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    code = await broker.txn.end_txn(body.transactional_id, body.producer_id, body.producer_epoch, body.committed)
    return {"throttle_time_ms": 0, "error_code": fenced_code(code, 2, request.header.api_version),
            "producer_id": -1, "producer_epoch": -1}

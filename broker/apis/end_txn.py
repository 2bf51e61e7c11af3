"""EndTxn: commit or abort the producer's transaction.

Answered once PrepareCommit/PrepareAbort is durable; the markers follow (see broker.txn). v5 is
transaction version 2 (KIP-890 part 2): the coordinator bumps the producer epoch at the end of
every transaction (a new producer id once the epoch is exhausted) and answers with the producer id
and epoch the producer continues with; older versions keep the epoch and answer -1/-1.
"""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from .init_producer_id import fenced_code

API_KEY = ApiKey.END_TXN
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    result = await ctx.txn.end_txn(
        body.transactional_id, body.producer_id, body.producer_epoch, body.committed, tv2=version >= 5
    )
    ok = result.error == ErrorCode.NONE
    return {
        "throttle_time_ms": 0,
        "error_code": fenced_code(result.error, 2, version),
        "producer_id": result.producer_id if ok else -1,
        "producer_epoch": result.producer_epoch if ok else -1,
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

"""DescribeTransactions: the state of transactional ids this broker coordinates
(what `kafka-transactions.sh describe` shows). An id coordinated elsewhere answers
NOT_COORDINATOR, an unknown one TRANSACTIONAL_ID_NOT_FOUND."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "transaction_states": [
            ctx.txn.describe(tid)
            if allowed(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
            else _denied(tid)
            for tid in request.body.transactional_ids
        ],
    }


def _denied(tid: str) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        "transactional_id": tid,
        "transaction_state": "",
        "transaction_timeout_ms": 0,
        "transaction_start_time_ms": -1,
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
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

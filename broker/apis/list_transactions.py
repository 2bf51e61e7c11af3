"""ListTransactions: the transactional ids this broker coordinates, filtered by state names
(Kafka's: Empty, Ongoing, PrepareCommit, ...; unknown names are echoed back), producer ids and
(v1) a minimum running time of Ongoing transactions. What `kafka-transactions.sh list` asks every
broker."""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator.txn.metadata import TxnState
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.LIST_TRANSACTIONS
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    known, unknown = set(), []
    for name in body.state_filters or []:
        state = TxnState.from_display(name)
        if state is None:
            unknown.append(name)
        else:
            known.add(state)
    if body.state_filters and not known:
        states = []  # only unknown states asked for: nothing matches
    else:
        duration = body.duration_filter if request.header.api_version >= 1 else -1
        states = ctx.txn.list(known or None, set(body.producer_id_filters or []) or None, duration)
    if ctx.authorizer is not None:  # only the transactional ids the principal may describe
        states = [
            s for s in states if allowed(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, s["transactional_id"])
        ]
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if ctx.txn.loading else ErrorCode.NONE
    return {"throttle_time_ms": 0, "error_code": error, "unknown_state_filters": unknown, "transaction_states": states}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

"""InitProducerId: producer ids and epochs for idempotent and transactional producers.

Idempotent producers (no transactional.id): ids come from blocks reserved in the broker's metadata
file (ZooKeeper in a cluster), so a restart never hands out an id twice. A producer that sends its
current id and epoch (v3+, KIP-360) gets the epoch bumped.

Transactional producers go to the transaction coordinator (``broker.txn``), which bumps epochs,
fences older instances and checks the transaction timeout. PRODUCER_FENCED exists from v4 on;
older clients get INVALID_PRODUCER_EPOCH instead, as Kafka answers.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..errors import TopicError
from ..request_context import RequestContext

API_KEY = ApiKey.INIT_PRODUCER_ID
VERSIONS = (0, 5)
MAX_EPOCH = 32767
log = logging.getLogger("strom.producer_ids")


def fenced_code(code: ErrorCode, fenced_from: int, version: int) -> ErrorCode:
    """PRODUCER_FENCED as the request version knows it."""
    if code == ErrorCode.PRODUCER_FENCED and version < fenced_from:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    producer_id = body.get("producer_id", -1)
    epoch = body.get("producer_epoch", -1)
    if body.transactional_id is not None:
        if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            return {
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1,
                "producer_epoch": -1,
            }
        result = await ctx.txn.init_producer_id(body.transactional_id, body.transaction_timeout_ms, producer_id, epoch)
        return {
            "error_code": fenced_code(result.error, 4, request.header.api_version),
            "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch,
        }
    if ctx.authorizer is not None and not (
        allowed_cluster(ctx, Operation.IDEMPOTENT_WRITE) or ctx.authorizer.any_topic_allows(Operation.WRITE)
    ):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": epoch + 1}
    try:
        producer_id = await ctx.admin.allocate_producer_id()
    except TopicError as exc:  # the id block could not be reserved on disk (full disk)
        log.warning("cannot allocate a producer id: %s", exc.message)
        # retriable for every client (KAFKA_STORAGE_ERROR is not among this API's errors)
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish, top_level_error_response  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    at the top level, with no producer id."""
    return finish(
        API_KEY, request, top_level_error_response(API_KEY, code, producer_id=-1, producer_epoch=-1), code, message
    )

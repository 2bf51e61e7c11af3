"""AddPartitionsToTxn: a transactional producer names the partitions it is about to write.

v0-3 (clients): one transaction; every partition gets the same answer, except unknown partitions
(UNKNOWN_TOPIC_OR_PARTITION) whose presence makes the others OPERATION_NOT_ATTEMPTED, as Kafka
answers. v4+ (brokers): a batch of transactions, each either ``verify_only`` (is the partition
already in the Ongoing transaction? what a partition leader asks before a transaction version 1
producer's first batch, KIP-890 part 1) or an add on behalf of a transaction version 2 producer
(what a partition leader asks for Produce v12 and a group coordinator for TxnOffsetCommit v5,
KIP-890 part 2; the transaction is then ended the TV2 way). v5 adds TRANSACTION_ABORTABLE only.
"""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..request_context import RequestContext
from ..topics import INTERNAL_TOPICS
from .init_producer_id import fenced_code

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
VERSIONS = (0, 5)


def _unknown(ctx: RequestContext, topic: str, index: int) -> bool:
    info = ctx.metadata.topic(topic)
    return info is None or not 0 <= index < info.partitions


def _results(codes: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), code in codes.items():
        topics.setdefault(topic, []).append({"partition_index": index, "partition_error_code": code})
    return [{"name": t, "results_by_partition": parts} for t, parts in topics.items()]


async def _one(
    ctx: RequestContext, tid: str, pid: int, epoch: int, topics: Any, verify_only: bool, version: int
) -> dict[tuple[str, int], ErrorCode]:
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    # v4+ come from brokers (the partition leader checked the producer's own rights)
    if version < 4 and not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in partitions}
    if version >= 4 and not allowed_cluster(ctx, Operation.CLUSTER_ACTION):
        return {tp: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for tp in partitions}
    # as Kafka: a client may not put an internal topic in its transaction (found by
    # broker/tests/test_fuzz_apis.py: its markers then landed in __transaction_state)
    denied = {
        tp
        for tp in partitions
        if version < 4 and (tp[0] in INTERNAL_TOPICS or not allowed(ctx, Operation.WRITE, ResourceType.TOPIC, tp[0]))
    }
    if denied:  # as Kafka: the others are not attempted
        return {
            tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in partitions
        }
    if verify_only:
        return ctx.txn.verify_partitions(tid, pid, epoch, partitions)
    unknown = {tp for tp in partitions if _unknown(ctx, *tp)}
    if unknown:
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in partitions
        }
    code = await ctx.txn.add_partitions(tid, pid, epoch, set(partitions), tv2=version >= 4)
    code = fenced_code(code, 2, version)
    return {tp: code for tp in partitions}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    if version >= 4:
        results = []
        for txn in body.transactions:
            codes = await _one(
                ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only, version
            )
            results.append({"transactional_id": txn.transactional_id, "topic_results": _results(codes)})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}
    codes = await _one(
        ctx,
        body.v3_and_below_transactional_id,
        body.v3_and_below_producer_id,
        body.v3_and_below_producer_epoch,
        body.v3_and_below_topics,
        False,
        version,
    )
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results(codes)}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    at the top level (v4+, as Kafka) or on every partition (v0-3)."""
    if request.header.api_version >= 4:
        out = {"throttle_time_ms": 0, "error_code": code, "results_by_transaction": []}
    else:
        out = {
            "throttle_time_ms": 0,
            "results_by_topic_v3_and_below": [
                {
                    "name": t["name"],
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": code} for p in t["partitions"] or []
                    ],
                }
                for t in request.body.get("v3_and_below_topics") or []
            ],
        }
    return finish(API_KEY, request, out, code, message)

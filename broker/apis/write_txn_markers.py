"""WriteTxnMarkers: a transaction coordinator asks this broker to write markers to the partitions
it leads (broker to broker; a standalone broker's coordinator appends directly).

Each marker is appended with acks=all semantics: the partition's answer waits (bounded) until the
in-sync replicas have it, so the coordinator completes a transaction only once its markers are
durable. A partition whose leadership this broker loses meanwhile answers NOT_LEADER_OR_FOLLOWER,
never NONE: the marker may have been truncated as a follower since. A marker for a deleted topic
answers UNKNOWN_TOPIC_OR_PARTITION, one for a partition led elsewhere NOT_LEADER_OR_FOLLOWER (the
coordinator retries with the new leader).
"""

from __future__ import annotations

from typing import Any

from strom.broker.coordinator.txn.markers import REPLICATION_TIMEOUT_S, append_marker, await_replicated
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..request_context import RequestContext

API_KEY = ApiKey.WRITE_TXN_MARKERS
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    port = ctx.txn.port
    if not allowed_cluster(ctx, Operation.CLUSTER_ACTION):
        return {
            "markers": [
                {
                    "producer_id": m.producer_id,
                    "topics": [
                        {
                            "name": t.name,
                            "partitions": [
                                {"partition_index": i, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                                for i in t.partition_indexes
                            ],
                        }
                        for t in m.topics
                    ],
                }
                for m in request.body.markers
            ]
        }
    answers = []
    waits = []
    for marker in request.body.markers:
        topics = []
        for topic in marker.topics:
            parts = []
            for index in topic.partition_indexes:
                code, pending = append_marker(
                    port,
                    topic.name,
                    index,
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.transaction_result,
                    marker.coordinator_epoch,
                )
                result = {"partition_index": index, "error_code": code}
                if code == ErrorCode.NONE and pending is not None:  # pending: None unless NONE
                    waits.append((pending, result))
                parts.append(result)
            topics.append({"name": topic.name, "partitions": parts})
        answers.append({"producer_id": marker.producer_id, "topics": topics})
    if waits:
        codes = await await_replicated(port, [pending for pending, _ in waits], REPLICATION_TIMEOUT_S)
        for (_, result), code in zip(waits, codes, strict=False):
            result["error_code"] = code  # NOT_LEADER_OR_FOLLOWER: the coordinator resends to the new leader
    return {"markers": answers}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition of every marker."""
    out = {
        "markers": [
            {
                "producer_id": m["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "error_code": code} for p in t["partition_indexes"] or []
                        ],
                    }
                    for t in m["topics"] or []
                ],
            }
            for m in request.body.get("markers") or []
        ]
    }
    return finish(API_KEY, request, out, code, message)

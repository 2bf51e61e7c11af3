"""DescribeProducers: the active producers of partitions this broker leads, from the log's producer
state: id, epoch, last sequence and timestamp, the coordinator epoch of its last marker and the
first offset of its open transaction (-1 if none). What `kafka-transactions.sh describe-producers`
and `find-hanging` read."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ._common import leader_partition

API_KEY = ApiKey.DESCRIBE_PRODUCERS
VERSIONS = (0, 0)


def _partition(ctx: RequestContext, topic: str, index: int) -> dict[str, Any]:
    if not allowed(ctx, Operation.READ, ResourceType.TOPIC, topic):
        return {
            "partition_index": index,
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "error_message": None,
            "active_producers": [],
        }
    partition, code = leader_partition(ctx, topic, index)
    out: dict[str, Any] = {"partition_index": index, "error_code": code, "error_message": None, "active_producers": []}
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and ctx.metadata.topic(topic) is None:  # as Kafka 4.0
        out["error_message"] = "This server does not host this topic-partition."
    if partition is None or code != ErrorCode.NONE:  # the partition: None only with an error
        return out
    for entry in partition.log.producer_state.producers.values():
        out["active_producers"].append(
            {
                "producer_id": entry.producer_id,
                "producer_epoch": entry.producer_epoch,
                "last_sequence": entry.last_seq,
                "last_timestamp": entry.last_timestamp,
                "coordinator_epoch": entry.coordinator_epoch,
                "current_txn_start_offset": entry.current_txn_first_offset,
            }
        )
    return out


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    topics = []
    for topic in request.body.topics:
        topics.append(
            {"name": topic.name, "partitions": [_partition(ctx, topic.name, i) for i in topic.partition_indexes]}
        )
    return {"throttle_time_ms": 0, "topics": topics}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition."""
    out = {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p, "error_code": code, "error_message": None, "active_producers": []}
                    for p in t["partition_indexes"] or []
                ],
            }
            for t in request.body.get("topics") or []
        ],
    }
    return finish(API_KEY, request, out, code, message)

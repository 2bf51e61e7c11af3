"""OffsetForLeaderEpoch: where a leader epoch ended, so a client or replica can detect truncation."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..request_context import RequestContext
from ._common import leader_partition

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
VERSIONS = (0, 4)


def _answer(ctx: RequestContext, topic: str, req: Any, version: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "partition": req.partition,
        "error_code": ErrorCode.NONE,
        "leader_epoch": -1,
        "end_offset": -1,
    }
    if ctx.authorizer is not None and not (
        allowed_cluster(ctx, Operation.CLUSTER_ACTION) or allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic)
    ):
        out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return out
    partition, code = leader_partition(ctx, topic, req.partition, req.current_leader_epoch if version >= 2 else -1)
    if partition is None or code != ErrorCode.NONE:  # the partition: None only with an error
        out["error_code"] = code
        return out
    epoch, end_offset = partition.log.end_offset_for_epoch(req.leader_epoch)
    if epoch < 0 <= req.leader_epoch == partition.leader_epoch:
        # The leader's current epoch ends at its log end offset even before anything was appended
        # in it (Kafka records the epoch's start when it becomes leader: an empty partition
        # answers epoch 0 ending at offset 0).
        epoch, end_offset = partition.leader_epoch, partition.log.log_end_offset
    out.update(leader_epoch=epoch, end_offset=end_offset)
    return out


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    version = request.header.api_version
    topics = []
    for topic in request.body.topics:
        topics.append(
            {"topic": topic.topic, "partitions": [_answer(ctx, topic.topic, p, version) for p in topic.partitions]}
        )
    return {"throttle_time_ms": 0, "topics": topics}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout(
    "topics",
    "topic",
    "partitions",
    "partition",
    "topics",
    "topic",
    "partitions",
    "partition",
    {"leader_epoch": -1, "end_offset": -1},
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

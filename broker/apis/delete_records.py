"""DeleteRecords: move a partition's log start offset (its low watermark) forward, as
`kafka-delete-records.sh` and Kafka Streams (repartition topics) ask.

Offset -1 means the high watermark. An offset past the high watermark gets OFFSET_OUT_OF_RANGE;
a topic whose cleanup.policy lacks "delete" (compact only) gets POLICY_VIOLATION, as in Kafka;
a partition this broker does not lead gets NOT_LEADER_OR_FOLLOWER (clients send to the leader,
as for Produce). Records before the new log start offset are no longer readable at once; whole
segments below it are deleted by the next retention pass. In a cluster the leader answers once
every in-sync follower has moved its own log start offset as far (followers learn it from fetch
responses and report theirs in their fetch requests), or with REQUEST_TIMED_OUT after
`timeout_ms`, as Kafka's delayed DeleteRecords does.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..replica.partition import Partition
from ..request_context import RequestContext
from ..topics import INTERNAL_TOPICS
from ._common import leader_partition

API_KEY = ApiKey.DELETE_RECORDS
VERSIONS = (0, 2)
HIGH_WATERMARK = -1
POLL_S = 0.05
log = logging.getLogger("strom.delete_records")


def _delete(ctx: RequestContext, topic: str, req: Any) -> tuple[dict[str, Any], Partition | None]:
    if not allowed(ctx, Operation.DELETE, ResourceType.TOPIC, topic):
        return {
            "partition_index": req.partition_index,
            "low_watermark": -1,
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        }, None
    partition, code = leader_partition(ctx, topic, req.partition_index)
    result: dict[str, Any] = {"partition_index": req.partition_index, "low_watermark": -1, "error_code": code}
    if partition is None or code != ErrorCode.NONE:  # the partition: None only with an error
        return result, None
    if topic in INTERNAL_TOPICS:  # as Kafka (ReplicaManager): checked before the cleanup policy
        result["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
        log.info("DeleteRecords refused on %s-%d: an internal topic", topic, req.partition_index)
        return result, None
    plog = partition.log
    if not plog.config.delete_enabled:  # as Kafka: a compacted topic's records go only by compaction
        result["error_code"] = ErrorCode.POLICY_VIOLATION
        log.info(
            "DeleteRecords refused on %s-%d: cleanup.policy=%s has no delete",
            topic,
            req.partition_index,
            plog.config.cleanup_policy,
        )
        return result, None
    hw = partition.high_watermark
    offset = hw if req.offset == HIGH_WATERMARK else req.offset
    if offset < 0 or offset > hw:
        result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        return result, None
    if offset > plog.log_start_offset:
        plog.maybe_increment_log_start_offset(offset)
        log.info("log start offset of %s-%d moved to %d by DeleteRecords", topic, req.partition_index, offset)
    result["low_watermark"] = plog.log_start_offset
    return result, partition


def low_watermark(partition: Partition) -> int:
    """The smallest log start offset among the leader and its in-sync followers."""
    low = partition.log.log_start_offset
    for replica in partition.isr:
        if replica != partition.local_id:
            follower = partition.followers.get(replica)
            low = min(low, follower.log_start_offset if follower is not None else -1)
    return low


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    topics: list[dict[str, Any]] = []
    waiting: list[tuple[dict[str, Any], Partition, int]] = []  # (result, partition, wanted low watermark)
    wanted: dict[str, dict[int, Any]] = {}
    for topic in body.topics:  # a partition named twice: the last offset counts, as in Kafka
        for req in topic.partitions:
            wanted.setdefault(topic.name, {})[req.partition_index] = req
    for name, reqs in wanted.items():
        parts: list[dict[str, Any]] = []
        for req in reqs.values():
            result, partition = _delete(ctx, name, req)
            parts.append(result)
            if partition is not None and len(partition.isr) > 1:
                waiting.append((result, partition, result["low_watermark"]))
        topics.append({"name": name, "partitions": parts})
    if waiting:
        ctx.replica_manager.notify_data()  # wake followers' long polls so they learn the new start offset
        deadline = trio.current_time() + max(body.timeout_ms, 0) / 1000
        while True:
            pending = [w for w in waiting if low_watermark(w[1]) < w[2]]
            if not pending or trio.current_time() >= deadline:
                break
            with trio.move_on_at(min(deadline, trio.current_time() + POLL_S)):
                await ctx.replica_manager.wait_for_data()
        for result, partition, wanted_low in waiting:
            low = low_watermark(partition)
            result["low_watermark"] = low
            if low < wanted_low:
                result["error_code"] = ErrorCode.REQUEST_TIMED_OUT
    return {"throttle_time_ms": 0, "topics": topics}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout(
    "topics",
    "name",
    "partitions",
    "partition_index",
    "topics",
    "name",
    "partitions",
    "partition_index",
    {"low_watermark": -1},
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

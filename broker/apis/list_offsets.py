"""ListOffsets: earliest, latest, max-timestamp and by-timestamp offsets of partitions.

With isolation_level=1 (read_committed, v2+) latest is the last stable offset and lookups by
timestamp stop there, as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..replica.partition import Partition
from ..request_context import RequestContext
from ._common import leader_partition

API_KEY = ApiKey.LIST_OFFSETS
VERSIONS = (0, 11)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5  # v9+ (KIP-1005)
EARLIEST_PENDING_UPLOAD = -6  # v11+ (KIP-1023)


class OffsetNotAvailable(Exception):
    """A new leader's high watermark is still below the start of its epoch."""


def _offset(
    partition: Partition, timestamp: int, read_committed: bool = False, client: bool = True
) -> tuple[int, int, int]:
    """(timestamp, offset, leader_epoch) for one query, consumers' view (below the high watermark;
    below the last stable offset for read_committed).

    As Kafka: for a consumer (`client`), while a newly elected leader's high watermark is below
    the offset its epoch started at, the latest offset, and a lookup that finds nothing below the
    high watermark, raise OffsetNotAvailable (OFFSET_NOT_AVAILABLE, retried by clients): the old
    high watermark may be stale, and an answer from it could send a consumer back in time."""
    plog = partition.log
    hw = plog.last_stable_offset if read_committed else partition.high_watermark
    start = partition.leader_epoch_start_offset
    lagging = client and start is not None and start > partition.high_watermark
    if timestamp == LATEST:
        if lagging:
            raise OffsetNotAvailable
        return -1, hw, partition.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset, partition.leader_epoch
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1  # as Kafka without tiered storage: nothing is (or waits to be) uploaded
    if timestamp == MAX_TIMESTAMP:
        found = plog.offset_for_max_timestamp()
    else:
        found = plog.fetch_offset_by_timestamp(timestamp)
    if found is None or found.offset >= hw:
        if lagging:
            raise OffsetNotAvailable
        return -1, -1, -1
    return found.timestamp, found.offset, found.leader_epoch


def _answer(
    ctx: RequestContext, name: str, req: Any, version: int, read_committed: bool = False, client: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "partition_index": req.partition_index,
        "error_code": ErrorCode.NONE,
        "old_style_offsets": [],
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    partition, code = leader_partition(ctx, name, req.partition_index, req.current_leader_epoch if version >= 4 else -1)
    if partition is None or code != ErrorCode.NONE:  # the partition: None only with an error
        out["error_code"] = code
        return out
    if (
        req.timestamp == MAX_TIMESTAMP
        and version < 7
        or req.timestamp == EARLIEST_PENDING_UPLOAD
        and version < 11
        or req.timestamp < EARLIEST_PENDING_UPLOAD
    ):
        out["error_code"] = ErrorCode.UNSUPPORTED_VERSION
        return out
    try:
        timestamp, offset, leader_epoch = _offset(partition, req.timestamp, read_committed, client)
    except OffsetNotAvailable:
        out["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE
        return out
    if version == 0:
        out["old_style_offsets"] = [offset] if offset >= 0 and req.max_num_offsets > 0 else []
    out.update(timestamp=timestamp, offset=offset, leader_epoch=leader_epoch)
    return out


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    version = request.header.api_version
    read_committed = version >= 2 and request.body.isolation_level == 1
    client = request.body.replica_id == -1  # a consumer, not a follower or the debugging replica
    topics = []
    for topic in request.body.topics:
        if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
            parts = [
                {
                    "partition_index": p.partition_index,
                    "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "timestamp": -1,
                    "offset": -1,
                }
                for p in topic.partitions
            ]
        elif ctx.metadata.topic(topic.name) is None:
            parts = [
                {
                    "partition_index": p.partition_index,
                    "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "timestamp": -1,
                    "offset": -1,
                }
                for p in topic.partitions
            ]
        else:
            parts = [_answer(ctx, topic.name, p, version, read_committed, client) for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": parts})
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
    {"timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []},
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

"""Fetch: requests parsed, authorized and answered; the reads are `ReplicaManager.fetch_messages`.

This handler resolves topics (by name, or by id from v13), authorizes them (READ, or
CLUSTER_ACTION for a follower), keeps the incremental fetch session and counts a follower's
throttled bytes against the leader's replication quota. What each partition answers, and the long
poll, are the replica manager's (`strom.broker.replica.manager`), as follows.

Each partition's data is a FileRegion the connection sends with `os.sendfile`. The request waits
up to `max_wait_ms` until `min_bytes` are available, woken by changes to its own partitions. Fetch v0-v3 clients
read message sets of magic 0/1, so their data is read and down-converted.

isolation_level=1 (read_committed, v4+) reads only below the last stable offset (no open
transaction's data) and lists the aborted transactions overlapping the data returned (producer id,
first offset) from the logs' `.txnindex`, so the consumer drops their batches; read_uncommitted
answers a null list, as Kafka does. Every v4+ answer carries the partition's LSO.

Fetch from follower (KIP-392): a consumer's Fetch v11+ (and the debugging consumer's, replica id
-2) may be served by any replica, a follower reading up to its own high watermark (the one its
leader last sent it) or, read_committed, its own last stable offset; offsets past its log end
are OFFSET_OUT_OF_RANGE, those between its high watermark and log end get no records (as on a
leader). With `replica.selector.class` set, a leader answers a consumer's v11+ fetch with
`preferred_read_replica` (no records, at once) when the selector picks another replica for the
consumer's rack (`strom.broker.replica.selector`). Fetch v0-v10 and ListOffsets stay leader-only.

A follower's fetch of a throttled partition obeys the leader's replication throttle
(`strom.broker.replication_quota`).

Incremental fetch sessions (KIP-227) live in `strom.broker.fetch_session`: it says which
partitions a request reads (the request's own, or its session's) and which of them the answer
carries; this module reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..replica.manager import FetchParams, fetch_partition_error
from ._common import ZERO_UUID

if TYPE_CHECKING:
    from strom.broker.request_context import RequestContext

API_KEY = ApiKey.FETCH
VERSIONS = (0, 18)


def _resolve(ctx: RequestContext, topic: Any, version: int) -> tuple[str | None, bytes, ErrorCode]:
    """(name, topic_id, error) of a requested topic."""
    if version >= 13:
        name = ctx.metadata.topic_name_by_id(topic.topic_id)
        info = ctx.metadata.topic(name) if name is not None else None
        if info is None:
            return None, topic.topic_id, ErrorCode.UNKNOWN_TOPIC_ID
        return info.name, info.topic_id, ErrorCode.NONE
    info = ctx.metadata.topic(topic.topic)
    if info is None:
        return topic.topic, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return info.name, info.topic_id, ErrorCode.NONE


def _record_throttled(ctx: RequestContext, topics: list[dict[str, Any]]) -> None:
    """Count the bytes sent to a follower for throttled partitions (in sync or not) against the
    leader's replication quota, as Kafka does, so all throttled traffic stays within it."""
    quota = ctx.leader_quota
    size = 0
    for topic in topics:
        for part in topic["partitions"]:
            records = part.get("records")
            if records and quota.is_throttled(topic["topic"], part["partition_index"]):
                size += getattr(records, "size", None) or len(records)
    quota.record(size, trio.current_time())


def _replica_id(body: Any, version: int) -> int:
    replica_id: int = body.replica_state.replica_id if version >= 15 else body.replica_id
    return replica_id


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    replica = _replica_id(body, version)
    context = ctx.fetch_sessions.new_context(version, body, replica >= 0)
    if context.error != ErrorCode.NONE:
        return {"throttle_time_ms": 0, "error_code": context.error, "session_id": 0, "responses": []}
    topics: list[dict[str, Any]] = []
    fetch_infos: list[tuple[str, Any]] = []
    # a topic's partitions are all read or all refused (authorization and names are per topic): the
    # read ones' answers are one run of the results, (the topic's list, where its run starts, length)
    runs: list[tuple[list[dict[str, Any]], int, int]] = []
    refused = False
    for topic in context.topics:
        name, topic_id, code = _resolve(ctx, topic, version)
        if (
            code == ErrorCode.NONE
            and name is not None
            and ctx.authorizer is not None
            and not (
                allowed_cluster(ctx, Operation.CLUSTER_ACTION)
                if replica >= 0
                else allowed(ctx, Operation.READ, ResourceType.TOPIC, name)
            )
        ):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        parts: list[dict[str, Any]] = []
        if code != ErrorCode.NONE or name is None:  # refused before any log is asked
            parts.extend(fetch_partition_error(req.partition, code, aborted=[]) for req in topic.partitions)
            refused = refused or bool(parts)
        else:
            runs.append((parts, len(fetch_infos), len(topic.partitions)))
            fetch_infos.extend((name, req) for req in topic.partitions)
        topics.append({"topic": name if name is not None else "", "topic_id": topic_id, "partitions": parts})
    params = FetchParams(
        version=version,
        replica_id=replica,
        # a refused partition is answered at once, with what the others have now
        max_wait_ms=0 if refused else body.max_wait_ms,
        min_bytes=body.min_bytes,
        max_bytes=body.max_bytes if version >= 3 else 2**31 - 1,
        isolation_level=body.isolation_level if version >= 4 else 0,
        client_rack=body.rack_id if version >= 11 else None,
    )
    results = await ctx.replica_manager.fetch_messages(params, fetch_infos, ctx.leader_quota)
    for (name, req), result in zip(fetch_infos, results, strict=True):
        if result["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            view = ctx.metadata.partition_view(name, req.partition)
            if view is not None:
                result["current_leader"] = {"leader_id": view[0], "leader_epoch": view[1]}
    for parts, start, count in runs:
        parts.extend(results[start : start + count])
    if replica >= 0:  # throttled replicas' bytes are measured whether a rate is set or not, as Kafka
        _record_throttled(ctx, topics)
    session_id, topics = context.finish(topics)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": session_id, "responses": topics}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout(
    "topics",
    "topic",
    "partitions",
    "partition",
    "responses",
    "topic",
    "partitions",
    "partition_index",
    {
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "preferred_read_replica": -1,
        "aborted_transactions": None,
        "records": None,
    },
    top_defaults={"error_code": 0, "session_id": 0},
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition and at the top level; v13+: the top-level code alone, as Kafka answers."""
    out = finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)
    if out is not None and request.header.api_version >= 13:
        out["responses"] = []
    return out

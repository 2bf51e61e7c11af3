"""OffsetCommit: store a group's consumed positions (with metadata) in `__consumer_offsets`.

Members commit with their generation; simple consumers (generation -1, no member id) may commit
to a group nobody has joined, as Spark and kcat do. v2-4 may ask for an explicit retention.
"""

from __future__ import annotations

import contextlib
from typing import Any

from strom.broker.coordinator.group.records import CommittedOffset
from strom.broker.errors import TopicError
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.OFFSET_COMMIT
VERSIONS = (0, 10)
TOPIC_IDS = 10  # the first version that names topics by id (KIP-848)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    with contextlib.suppress(TopicError):  # a client may commit or join before FindCoordinator
        await ctx.groups.ensure_topic()
    body = request.body
    version = request.header.api_version
    if version >= TOPIC_IDS:  # by id: the name this cluster knows it by ("" for an unknown id)
        for t in body.topics:
            t.name = ctx.metadata.topic_name_by_id(t.topic_id) or ""
    ids = {t.name: t.topic_id for t in body.topics}
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        return _all_failed(body.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    unknown = [t for t in body.topics if version >= TOPIC_IDS and not t.name]
    refused = [
        t for t in body.topics if t not in unknown and not allowed(ctx, Operation.READ, ResourceType.TOPIC, t.name)
    ]
    offsets = [
        (
            t.name,
            p.partition_index,
            CommittedOffset(p.committed_offset, p.committed_leader_epoch, p.committed_metadata or ""),
        )
        for t in body.topics
        if t not in refused and t not in unknown
        for p in t.partitions
    ]
    generation = body.generation_id_or_member_epoch if version >= 1 else -1
    results = ctx.groups.commit_offsets(
        body.group_id,
        body.member_id or "",
        body.group_instance_id,
        generation,
        body.retention_time_ms,
        offsets,
        version,
    )
    code = await ctx.groups.replicated(body.group_id)
    if code != ErrorCode.NONE:
        for r in results:
            if r.error == ErrorCode.NONE:
                r.error = code
    failed = _all_failed(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED)["topics"]
    failed += _all_failed(unknown, ErrorCode.UNKNOWN_TOPIC_ID)["topics"]
    topics: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        topics.setdefault(r.topic, []).append({"partition_index": r.partition, "error_code": r.error})
    answered = [{"name": n, "topic_id": ids.get(n, bytes(16)), "partitions": parts} for n, parts in topics.items()]
    return {"throttle_time_ms": 0, "topics": failed + answered}


def _all_failed(topics: Any, code: ErrorCode) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t.name,
                "topic_id": t.topic_id,
                "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in t.partitions],
            }
            for t in topics
        ],
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout(
    "topics", "name", "partitions", "partition_index", "topics", "name", "partitions", "partition_index"
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

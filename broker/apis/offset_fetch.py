"""OffsetFetch: a group's committed offsets (v0-7 one group, v8+ a batch of groups).

A partition without a commit answers offset -1 and no error; topics null (v2+) asks for
everything the group committed. With require_stable (v7+), a partition whose offset is part of an
open transaction (TxnOffsetCommit not yet committed or aborted) answers UNSTABLE_OFFSET_COMMIT
and the client retries; without it, the last committed offset is returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

if TYPE_CHECKING:
    from ..coordinator.group.records import CommittedOffset

API_KEY = ApiKey.OFFSET_FETCH
VERSIONS = (0, 10)
BATCH_VERSION = 8
TOPIC_IDS = 10  # the first version that names topics by id (KIP-848)
NO_TOPIC_ID = bytes(16)


def _group(
    ctx: RequestContext,
    group_id: str,
    topics: Any,
    require_stable: bool = False,
    member: tuple[str | None, int] | None = None,
    by_id: bool = False,
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    if not allowed(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    unknown: list[dict[str, Any]] = []
    if by_id and topics is not None:  # v10: topics by id; an id this cluster does not know fails its partitions
        known = []
        for t in topics:
            name = ctx.metadata.topic_name_by_id(t.topic_id)
            if name is None:
                unknown.append(
                    {
                        "name": "",
                        "topic_id": t.topic_id,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": -1,
                                "committed_leader_epoch": -1,
                                "metadata": "",
                                "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                            }
                            for p in t.partition_indexes
                        ],
                    }
                )
            else:
                t.name = name
                known.append(t)
        topics = known
    error = ctx.groups.group_error(group_id)
    if error is None and member is not None:  # v9: a KIP-848 member fetches with its epoch
        error = ctx.groups.consumer.fetch_error(group_id, member[0], member[1])
    asked = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
    found: dict[tuple[str, int], CommittedOffset | None]
    if error is not None:
        found = {} if asked is None else {(t, p): None for t, parts in asked for p in parts}
    else:
        found = ctx.groups.fetch_offsets(group_id, asked)
    part_error = error if error is not None else ErrorCode.NONE
    out: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), committed in found.items():
        code = part_error
        if ctx.authorizer is not None and not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic):
            if asked is None:
                continue  # all of the group's offsets: the topics the principal may not describe are left out
            code, committed = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        if require_stable and code == ErrorCode.NONE and ctx.groups.has_pending_txn_offset(group_id, topic, index):
            code, committed = ErrorCode.UNSTABLE_OFFSET_COMMIT, None
        out.setdefault(topic, []).append(
            {
                "partition_index": index,
                "committed_offset": committed.offset if committed else -1,
                "committed_leader_epoch": committed.leader_epoch if committed else -1,
                "metadata": committed.metadata if committed else "",
                "error_code": code,
            }
        )
    if not by_id:
        return part_error, [{"name": t, "partitions": parts} for t, parts in out.items()]
    answered = []
    for t, parts in out.items():
        info = ctx.metadata.topic(t)
        if info is None or info.topic_id == NO_TOPIC_ID:
            continue  # a topic gone since: no id to name it by
        answered.append({"name": t, "topic_id": info.topic_id, "partitions": parts})
    return part_error, unknown + answered


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if request.header.api_version >= BATCH_VERSION:
        groups = []
        for g in body.groups:
            member = (g.member_id, g.member_epoch) if request.header.api_version >= 9 else None
            by_id = request.header.api_version >= TOPIC_IDS
            error, topics = _group(ctx, g.group_id, g.topics, body.require_stable, member, by_id)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    error, topics = _group(ctx, body.group_id, body.topics, request.header.api_version >= 7 and body.require_stable)
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish, top_level_error_response  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every group (v8+), every partition (v0-1) or at the top level (v2-7)."""
    v, req = request.header.api_version, request.body
    if v >= 8:
        out = {
            "throttle_time_ms": 0,
            "groups": [{"group_id": g["group_id"], "topics": [], "error_code": code} for g in req.get("groups") or []],
        }
    elif v < 2:
        out = {
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                        for p in t["partition_indexes"]
                    ],
                }
                for t in req.get("topics") or []
            ]
        }
    else:
        out = top_level_error_response(API_KEY, code)
    return finish(API_KEY, request, out, code, message)

"""ShareFetch (KIP-932): a share consumer acquires records of the partitions its share session
holds, acknowledging earlier deliveries on the way (piggybacked acknowledgements).

The session (`strom.broker.replica.share_manager`): epoch 0 opens one (the member's records still
acquired are released first), later epochs follow it, -1 closes it after its acknowledgements.
Acknowledgements are applied and written through before the answer; then, unless the request is
the final one or only renews locks (v2's IsRenewAck), every partition of the session is read and
its available records acquired, up to MaxRecords, waiting up to MaxWaitMs when none are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import trio

from strom.broker.replica.share_manager import INITIAL_EPOCH, PartitionRead, ShareSessionError
from strom.broker.replica.share_partition import AckBatch
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.SHARE_FETCH
VERSIONS = (1, 2)
DEFAULT_MAX_RECORDS = 500


def partition_result(index: int, code: int = ErrorCode.NONE, message: str | None = None) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "error_message": message,
        "acknowledge_error_code": ErrorCode.NONE,
        "acknowledge_error_message": None,
        "current_leader": {"leader_id": -1, "leader_epoch": -1},
        "records": b"",
        "acquired_records": [],
    }


def ack_batches(raw: Iterable[Any]) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in raw]


def leader_hint(ctx: RequestContext, topic: str, index: int, leaders: set[int]) -> dict[str, int]:
    view = ctx.metadata.partition_view(topic, index)
    if view is None or view[0] < 0:
        return {"leader_id": -1, "leader_epoch": -1}
    leaders.add(view[0])
    return {"leader_id": view[0], "leader_epoch": view[1]}


def node_endpoints(ctx: RequestContext, ids: set[int]) -> list[dict[str, Any]]:
    return [
        {"node_id": node, "host": host, "port": port, "rack": rack}
        for node, host, port, rack in ctx.metadata.live_brokers()
        if node in ids
    ]


def top_level(code: int, message: str | None = None, lock_ms: int = 0) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout_ms": lock_ms,
        "responses": [],
        "node_endpoints": [],
    }


class Answer:
    """The per-partition answers of a share request, in the order partitions were first named."""

    def __init__(self) -> None:
        self.parts: dict[tuple[bytes, int], dict[str, Any]] = {}
        self.names: dict[bytes, str] = {}

    def part(self, topic_id: bytes, index: int) -> dict[str, Any]:
        key = (topic_id, index)
        if key not in self.parts:
            self.parts[key] = partition_result(index)
        return self.parts[key]

    def finish(self, ctx: RequestContext, response: dict[str, Any]) -> dict[str, Any]:
        leaders: set[int] = set()
        by_topic: dict[bytes, list[dict[str, Any]]] = {}
        for (topic_id, index), part in self.parts.items():
            if part["error_code"] in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                name = self.names.get(topic_id)
                if name is not None:
                    part["current_leader"] = leader_hint(ctx, name, index, leaders)
            by_topic.setdefault(topic_id, []).append(part)
        response["responses"] = [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()]
        response["node_endpoints"] = node_endpoints(ctx, leaders)
        return response


def resolve(ctx: RequestContext, topic_id: bytes) -> tuple[str | None, ErrorCode]:
    """A requested topic's name and error: UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED or NONE."""
    name = ctx.metadata.topic_name_by_id(topic_id)
    if name is None:
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    if not allowed(ctx, Operation.READ, ResourceType.TOPIC, name):
        return name, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return name, ErrorCode.NONE


async def acknowledge_all(
    ctx: RequestContext, answer: Answer, group_id: str, member_id: str, topics: Iterable[Any], renew: bool, field: str
) -> None:
    """Apply each partition's acknowledgement batches; the outcome goes in ``field`` of its answer."""
    share = ctx.share
    assert share is not None
    for topic in topics:
        name, code = resolve(ctx, topic.topic_id)
        if name is not None:
            answer.names[topic.topic_id] = name
        for p in topic.partitions:
            if not p.acknowledgement_batches:
                continue
            part = answer.part(topic.topic_id, p.partition_index)
            if code == ErrorCode.NONE and name is not None:
                code_p = await share.acknowledge(
                    group_id,
                    member_id,
                    name,
                    topic.topic_id,
                    p.partition_index,
                    ack_batches(p.acknowledgement_batches),
                    renew,
                )
            else:
                code_p = code
            part[field] = code_p


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    share = ctx.share
    group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
    if share is None:
        return top_level(ErrorCode.UNSUPPORTED_VERSION)
    if not group_id or not member_id:
        return top_level(ErrorCode.INVALID_REQUEST, "Group id and member id must be set.")
    if not allowed(ctx, Operation.READ, ResourceType.GROUP, group_id):
        return top_level(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    settings = share.settings_for(group_id)
    lock_ms = settings.record_lock_duration_ms
    renew = version >= 2 and bool(body.get("is_renew_ack", False))
    has_acks = any(p.acknowledgement_batches for t in body.topics for p in t.partitions)
    if epoch == INITIAL_EPOCH and has_acks:
        return top_level(ErrorCode.INVALID_REQUEST, "Acknowledge data present in Initial Fetch Request.")
    answer = Answer()
    fetchable: list[tuple[bytes, int]] = []
    for topic in body.topics:
        name, code = resolve(ctx, topic.topic_id)
        if name is not None:
            answer.names[topic.topic_id] = name
        for p in topic.partitions:
            if code != ErrorCode.NONE:
                answer.part(topic.topic_id, p.partition_index)["error_code"] = code
            else:
                fetchable.append((topic.topic_id, p.partition_index))
    forgotten = [(t.topic_id, p) for t in body.forgotten_topics_data for p in t.partitions]
    try:
        session = share.open_session(group_id, member_id, epoch, fetchable, forgotten)
    except ShareSessionError as exc:
        return top_level(exc.code, exc.message)
    if epoch == INITIAL_EPOCH:
        await share.release_member(group_id, member_id)
    await acknowledge_all(ctx, answer, group_id, member_id, body.topics, renew, "acknowledge_error_code")
    if session is None:  # the final epoch: acknowledgements only, then the session ends
        await share.close_session(group_id, member_id)
        return answer.finish(ctx, top_level(ErrorCode.NONE, lock_ms=lock_ms))
    if not renew:
        max_records = body.get("max_records", DEFAULT_MAX_RECORDS) if version >= 1 else DEFAULT_MAX_RECORDS
        await fetch_session(ctx, answer, group_id, member_id, list(session.partitions), body, max_records)
    if epoch != INITIAL_EPOCH:  # an incremental answer: only partitions with something to say
        answer.parts = {
            k: v
            for k, v in answer.parts.items()
            if v["acquired_records"] or v["error_code"] != ErrorCode.NONE or k in _acknowledged(body)
        }
    return answer.finish(ctx, top_level(ErrorCode.NONE, lock_ms=lock_ms))


def _acknowledged(body: Any) -> set[tuple[bytes, int]]:
    return {(t.topic_id, p.partition_index) for t in body.topics for p in t.partitions if p.acknowledgement_batches}


async def fetch_session(
    ctx: RequestContext,
    answer: Answer,
    group_id: str,
    member_id: str,
    partitions: list[tuple[bytes, int]],
    body: Any,
    max_records: int,
) -> None:
    """Acquire records of ``partitions``; wait up to MaxWaitMs for some when there are none."""
    share = ctx.share
    assert share is not None
    deadline = trio.current_time() + max(body.max_wait_ms, 0) / 1000
    min_bytes = max(body.min_bytes, 1)
    while True:
        found = 0
        answer_now = False
        records_left = max(max_records, 1)
        bytes_left = body.max_bytes if body.max_bytes > 0 else 2**31 - 1
        waited_on: list[tuple[str, int]] = []
        for topic_id, index in partitions:
            name = ctx.metadata.topic_name_by_id(topic_id)
            part = answer.part(topic_id, index)
            if name is None:
                part["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
                answer_now = True
                continue
            answer.names[topic_id] = name
            sp, code = await share.share_partition(group_id, name, topic_id, index)
            if sp is None:
                part["error_code"] = code
                answer_now = True
                continue
            waited_on.append((name, index))
            if records_left <= 0 or bytes_left <= 0:
                continue
            read: PartitionRead = share.read(group_id, member_id, name, sp, records_left, bytes_left)
            if read.error != ErrorCode.NONE:
                part["error_code"] = read.error
                answer_now = True
                continue
            if read.acquired:
                part["records"] = read.records
                part["acquired_records"] = [
                    {"first_offset": r.first_offset, "last_offset": r.last_offset, "delivery_count": r.delivery_count}
                    for r in read.acquired
                ]
                records_left -= sum(r.last_offset - r.first_offset + 1 for r in read.acquired)
                bytes_left -= len(read.records)
                found += len(read.records)
        if answer_now or found >= min_bytes or trio.current_time() >= deadline:
            return
        with trio.move_on_at(deadline):
            await ctx.replica_manager.wait_for_data(waited_on)


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code``: the top-level code."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

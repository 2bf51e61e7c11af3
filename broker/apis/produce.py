"""Produce: requests parsed, authorized and answered; the records go to the ReplicaManager.

This handler checks what belongs to the request: the transactional id's and each topic's WRITE
permission, a topic this broker knows (as in Kafka 4, only Metadata creates a missing topic:
clients ask Metadata before they produce), internal topics (written by their coordinators
only). `ReplicaManager.append_records` does the rest (`strom.broker.replica.manager`): the
`LogValidator` checks (`strom.storage.log_validator`), transaction verification
(`strom.broker.replica.txn_verification`), the append as leader and the acks=all wait
(`DelayedProduce`). A partition refused NOT_LEADER_OR_FOLLOWER is answered with where its leader
is now (v10+, KIP-951), so clients need no metadata round trip.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from strom.protocol.errors import ErrorCode
from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    MAGIC_OFFSET,
    TRANSACTIONAL_MASK,
)
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..replica.manager import VALID_ACKS, ProduceResult
from ..topics import ADMIN_CLIENT_ID, INTERNAL_TOPICS

if TYPE_CHECKING:
    from strom.broker.request_context import RequestContext

API_KEY = ApiKey.PRODUCE
VERSIONS = (0, 13)
TOPIC_IDS = 13  # the first version that names topics by id (KIP-516)
log = logging.getLogger("strom.produce")


def _result(
    index: int,
    code: ErrorCode = ErrorCode.NONE,
    base_offset: int = -1,
    append_time: int = -1,
    start: int = -1,
    message: str | None = None,
) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time_ms": append_time,
        "log_start_offset": start,
        "record_errors": [],
        "error_message": message,
    }


def _answer(index: int, result: ProduceResult) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": result.error_code,
        "base_offset": result.base_offset,
        "log_append_time_ms": result.log_append_time_ms,
        "log_start_offset": result.log_start_offset,
        "record_errors": result.record_errors,
        "error_message": result.error_message,
    }


def _has_transactional_records(body: Any) -> bool:
    """Kafka's ProduceRequest.hasTransactionalRecords: a partition's first batch (magic 2) has
    the transactional attribute bit."""
    for topic in body.topic_data:
        for p in topic.partition_data:
            records = p.records
            if (
                records is not None
                and len(records) > _ATTRIBUTES_LOW
                and records[MAGIC_OFFSET] == 2
                and records[_ATTRIBUTES_LOW] & TRANSACTIONAL_MASK
            ):
                return True
    return False


_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the low byte of a v2 batch's big-endian int16 attributes


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any] | None:
    body = request.body
    version = request.header.api_version
    acks = body.acks
    transactional_id = body.transactional_id if version >= 3 else None
    if (transactional_id is None and _has_transactional_records(body)) or (
        transactional_id is not None
        and not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    ):
        # as Kafka: transactional batches without a transactional id fail the whole request so
        # (found by broker/tests/test_fuzz_apis.py; was INVALID_RECORD per partition)
        if acks == 0:
            return None
        return {
            "responses": [
                {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "partition_responses": [
                        _result(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for p in t.partition_data
                    ],
                }
                for t in body.topic_data
            ],
            "throttle_time_ms": 0,
            "node_endpoints": [],
        }
    responses: list[dict[str, Any]] = []
    entries: list[tuple[str, int, Any]] = []
    slots: list[tuple[list[dict[str, Any]], int, int]] = []  # where each entry's answer goes: (parts, position, index)
    for topic in body.topic_data:
        name = topic.name if version < TOPIC_IDS else ctx.metadata.topic_name_by_id(topic.topic_id)
        parts: list[dict[str, Any]] = []
        if name is None:  # as Kafka: an id this cluster does not know
            parts = [_result(p.index, ErrorCode.UNKNOWN_TOPIC_ID) for p in topic.partition_data]
            name = ""
        elif not allowed(ctx, Operation.WRITE, ResourceType.TOPIC, name):
            parts = [_result(p.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in topic.partition_data]
        elif ctx.metadata.topic(name) is None:
            # As Kafka 4: only Metadata creates a missing topic (clients ask it before producing).
            parts = [_result(p.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in topic.partition_data]
        elif acks in VALID_ACKS and name in INTERNAL_TOPICS and request.header.client_id != ADMIN_CLIENT_ID:
            # as Kafka: the coordinators' own records are not a client's to write (found by
            # broker/tests/test_fuzz_apis.py: any client could append to __consumer_offsets);
            # invalid acks are answered INVALID_REQUIRED_ACKS first, by the replica manager
            log.info("produce refused topic=%s: internal topics are written by their coordinators only", name)
            parts = [_result(p.index, ErrorCode.INVALID_TOPIC_EXCEPTION) for p in topic.partition_data]
        else:
            for p in topic.partition_data:
                slots.append((parts, len(parts), p.index))
                parts.append({})
                entries.append((name, p.index, p.records))
        responses.append({"name": name, "topic_id": topic.topic_id, "partition_responses": parts})
    if entries:
        results = await ctx.replica_manager.append_records(
            entries,
            version=version,
            acks=acks,
            timeout_ms=body.timeout_ms,
            transactional_id=transactional_id,
            txn=ctx.txn,
        )
        for (parts, position, index), result in zip(slots, results, strict=False):
            parts[position] = _answer(index, result)
    if acks == 0:
        return None
    leaders: set[int] = set()
    for topic_response in responses:
        for part in topic_response["partition_responses"]:
            if part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                part["current_leader"] = _leader_hint(ctx, topic_response["name"], part["index"], leaders)
    return {"responses": responses, "throttle_time_ms": 0, "node_endpoints": node_endpoints(ctx, leaders)}


def _leader_hint(ctx: RequestContext, topic: str, index: int, leaders: set[int]) -> dict[str, Any]:
    """Where the partition's leader is now (v10+, KIP-951), so clients need no metadata round trip."""
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


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout(
    "topic_data",
    "name",
    "partition_data",
    "index",
    "responses",
    "name",
    "partition_responses",
    "index",
    {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1},
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition; None for acks=0 (no response carries it: the connection closes)."""
    if request.body.get("acks") == 0:
        return None
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

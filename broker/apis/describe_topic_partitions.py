"""DescribeTopicPartitions (KIP-966): topics' partitions a page at a time, as Kafka 3.8+ admin
tools (`kafka-topics.sh --describe`) ask for them.

Topics are answered in name order. A page holds at most `response_partition_limit` partitions
(capped by `max.request.partition.size.limit`, at least 1); when more remain, `next_cursor` names
the topic and partition the next request starts from (its `cursor`). As Kafka does:
- an empty topic list means every topic, and topics that do not exist are then simply absent;
- a named topic that does not exist is answered with UNKNOWN_TOPIC_OR_PARTITION (or
  INVALID_TOPIC_EXCEPTION for an illegal name) and no partitions;
- a cursor must name one of the requested topics and a partition >= 0, else every requested
  topic gets INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext
from ..topics import topic_name_error
from ._common import OPERATIONS_NOT_REQUESTED, TOPIC_AUTHORIZED_OPERATIONS, ZERO_UUID

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS
VERSIONS = (0, 0)
log = logging.getLogger("strom.describe_topic_partitions")


def _partition(ctx: RequestContext, name: str, index: int) -> dict[str, Any]:
    view = ctx.metadata.partition_view(name, index)
    if view is None:
        return {
            "error_code": ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": index,
            "leader_id": -1,
            "leader_epoch": -1,
            "replica_nodes": [],
            "isr_nodes": [],
            "eligible_leader_replicas": [],
            "last_known_elr": [],
            "offline_replicas": [],
        }
    leader, epoch, replicas, isr, offline = view
    return {
        "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": epoch,
        "replica_nodes": replicas,
        "isr_nodes": isr,
        "eligible_leader_replicas": [],
        "last_known_elr": [],
        "offline_replicas": offline,
    }


def _invalid(requested: list[str], message: str) -> dict[str, Any]:
    log.debug("DescribeTopicPartitions refused: %s", message)
    return {
        "throttle_time_ms": 0,
        "next_cursor": None,
        "topics": [
            {
                "error_code": ErrorCode.INVALID_REQUEST,
                "name": name,
                "topic_id": ZERO_UUID,
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": OPERATIONS_NOT_REQUESTED,
            }
            for name in requested
        ],
    }


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    requested = [t.name for t in body.topics]
    every_topic = not requested
    cursor = body.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    if cursor is not None:
        if cursor.partition_index < 0:
            return _invalid(requested, "the partition index in the cursor is negative")
        if not every_topic and cursor_topic not in requested:
            return _invalid(requested, f"the topic list does not contain the cursor topic {cursor_topic}")
    names = sorted(set(ctx.metadata.topic_names()) if every_topic else set(requested))
    names = [n for n in names if n >= cursor_topic]
    limit = max(min(ctx.config["max.request.partition.size.limit"], body.response_partition_limit), 1)
    remaining = limit
    topics = []
    next_cursor = None
    for name in names:
        if remaining <= 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        info = ctx.metadata.topic(name)
        if info is not None and info.partitions and not ctx.metadata.listed_partitions(info):
            info = None  # being created: unknown until the controller wrote its state (as Metadata)
        if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
            if not every_topic:
                topics.append(
                    {
                        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        "name": name,
                        "topic_id": ZERO_UUID,
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": OPERATIONS_NOT_REQUESTED,
                    }
                )
            continue
        if info is None:
            if not every_topic:
                code = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                    if topic_name_error(name)
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                topics.append(
                    {
                        "error_code": code,
                        "name": name,
                        "topic_id": ZERO_UUID,
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS,
                    }
                )
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        listed = ctx.metadata.listed_partitions(info)
        end = min(listed, start + remaining)
        topics.append(
            {
                "error_code": ErrorCode.NONE,
                "name": name,
                "topic_id": info.topic_id,
                "is_internal": info.internal,
                "partitions": [_partition(ctx, name, i) for i in range(start, end)],
                "topic_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS,
            }
        )
        if end < listed:
            next_cursor = {"topic_name": name, "partition_index": end}
            break
        remaining -= max(end - start, 0)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

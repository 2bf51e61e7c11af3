"""What the five share-group state APIs have in common (InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary):
broker-to-broker requests from a share-partition leader (or the group coordinator) to the share
coordinator of ``group:topicId:partition``, answered per partition by `ShareCoordinator`.

As Kafka 4.3 answers: CLUSTER_ACTION on the cluster is required (else CLUSTER_AUTHORIZATION_FAILED
on every partition); a request with an empty group id gets an empty result list; a partition whose
share coordinator is not this broker (or is loading, or could not write) gets the coordinator's
error with "Unable to <operation>: " before Kafka's message, other errors Kafka's message alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from strom.broker.coordinator.share.coordinator import KAFKA_MESSAGES, ShareCoordinator, StateResult
from strom.broker.coordinator.share.persister import SharePartitionKey
from strom.protocol.connection import Request
from strom.protocol.errors import ErrorCode

from ..auth import Operation, allowed_cluster
from ..request_context import RequestContext

RUNTIME_ERRORS = (
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
)

Call = Callable[[ShareCoordinator, SharePartitionKey, Any], Awaitable[StateResult]]
Render = Callable[[int, StateResult], dict[str, Any]]


def _message(operation: str, result: StateResult) -> str | None:
    if result.error == ErrorCode.NONE:
        return None
    if result.error in RUNTIME_ERRORS:
        return f"Unable to {operation}: {result.message or KAFKA_MESSAGES.get(result.error, result.error.name)}"
    return result.message


def each_partition(body: dict[str, Any] | Any, render: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """``render(partition)`` for every partition of every topic the request names."""
    get = body.get if isinstance(body, dict) else lambda name: getattr(body, name)
    return [
        {"topic_id": topic["topic_id"], "partitions": [render(p["partition"]) for p in topic["partitions"] or []]}
        for topic in get("topics") or []
    ]


async def answer(ctx: RequestContext, request: Request, operation: str, call: Call, render: Render) -> dict[str, Any]:
    body = request.body
    if not body.group_id:
        return {"results": []}
    if not allowed_cluster(ctx, Operation.CLUSTER_ACTION):
        denied = StateResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", start_offset=0)
        return {"results": each_partition(body, lambda index: render(index, denied))}
    coordinator = ctx.share_coordinator
    results = []
    for topic in body.topics or []:
        partitions = []
        for data in topic.partitions or []:
            key = SharePartitionKey(body.group_id, bytes(topic.topic_id), data.partition)
            if coordinator is None:
                result = StateResult(ErrorCode.NOT_COORDINATOR, start_offset=0)
            else:
                result = await call(coordinator, key, data)
            entry = render(data.partition, result)
            entry["error_message"] = _message(operation, result)
            partitions.append(entry)
        results.append({"topic_id": topic.topic_id, "partitions": partitions})
    return {"results": results}


def error_answer(request: Request, code: ErrorCode, message: str | None, render: Render) -> dict[str, Any]:
    failed = StateResult(code, message, start_offset=0)
    return {"results": each_partition(request.body, lambda index: render(index, failed))}

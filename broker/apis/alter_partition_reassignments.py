"""AlterPartitionReassignments: move partitions to other replicas (`kafka-reassign-partitions.sh
--execute`), or cancel a move (replicas null).

In a ZooKeeper cluster the controller records the target in the topic's znode (adding/removing
replicas, as Kafka does); the new replicas are created and catch up, leadership moves to a target
replica, then the old replicas leave the ISR and the assignment and delete their logs. Another
broker answers NOT_CONTROLLER (the admin client then asks the controller). A standalone broker is
the only replica there is: a target of just itself changes nothing, any other is
INVALID_REPLICA_ASSIGNMENT."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..metadata.admin import NotControllerError
from ..request_context import RequestContext

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed_cluster(ctx, Operation.ALTER):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "responses": [],
        }
    wanted = [
        (t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
        for t in body.topics
        for p in t.partitions
    ]
    try:
        results = await ctx.admin.alter_partition_reassignments(wanted)
    except NotControllerError as exc:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NOT_CONTROLLER,
            "error_message": str(exc),
            "responses": [],
        }
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, index, code, message in results:
        topics.setdefault(topic, []).append({"partition_index": index, "error_code": code, "error_message": message})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": [{"name": t, "partitions": parts} for t, parts in topics.items()],
    }


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

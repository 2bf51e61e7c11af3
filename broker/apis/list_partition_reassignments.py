"""ListPartitionReassignments: the partitions being moved, with their replicas and the replicas
being added and removed (`kafka-reassign-partitions.sh --verify`, `--list`)."""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..metadata.admin import NotControllerError
from ..request_context import RequestContext

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not allowed_cluster(ctx, Operation.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "topics": [],
        }
    try:
        assignments = await ctx.admin.list_partition_reassignments()
    except NotControllerError as exc:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER, "error_message": str(exc), "topics": []}
    asked = None if body.topics is None else {(t.name, p) for t in body.topics for p in t.partition_indexes}
    topics = []
    for name, assignment in sorted(assignments.items()):
        parts = []
        for p in sorted(set(assignment.adding_replicas) | set(assignment.removing_replicas)):
            if asked is not None and (name, p) not in asked:
                continue
            parts.append(
                {
                    "partition_index": p,
                    "replicas": list(assignment.partitions.get(p, ())),
                    "adding_replicas": list(assignment.adding_replicas.get(p, ())),
                    "removing_replicas": list(assignment.removing_replicas.get(p, ())),
                }
            )
        if parts:
            topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": topics}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

"""ElectLeaders: move leadership to the preferred replica, or (unclean) to any live replica of a
partition that has no live leader, as `kafka-leader-election.sh` asks.

In a ZooKeeper cluster the controller elects and writes the partition states (brokers follow
them as for any leadership change); another broker answers NOT_CONTROLLER, which sends the admin
client to the controller. A standalone broker is the only replica of every partition, so each
existing partition already has its preferred leader: ELECTION_NOT_NEEDED, as a single Kafka
broker answers. With no partitions named (null), every partition is considered and only those
where an election happened or failed are answered.
"""

from __future__ import annotations

from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..metadata.admin import ElectionResults, NotControllerError
from ..request_context import RequestContext

API_KEY = ApiKey.ELECT_LEADERS
VERSIONS = (0, 2)
PREFERRED, UNCLEAN = 0, 1


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    election = body.election_type if version >= 1 else PREFERRED
    wanted = None
    if body.topic_partitions is not None:
        wanted = list(dict.fromkeys((t.topic, p) for t in body.topic_partitions for p in t.partitions))
    if not allowed_cluster(ctx, Operation.ALTER):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "replica_election_results": _grouped(
                {k: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for k in wanted or ()}, []
            ),
        }
    if election not in (PREFERRED, UNCLEAN):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.INVALID_REQUEST,
            "replica_election_results": _grouped(
                {k: (ErrorCode.INVALID_REQUEST, f"Unknown election type {election}") for k in wanted or ()}, []
            ),
        }
    try:
        results = await ctx.admin.elect_leaders(wanted, election == UNCLEAN)
    except NotControllerError:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER, "replica_election_results": []}
    # With every partition asked for, Kafka lists every topic, with only the elections that happened or failed.
    every = ctx.metadata.topic_names() if wanted is None else []
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "replica_election_results": _grouped(results, every)}


def _grouped(results: ElectionResults, topics: list[str]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {t: [] for t in topics}
    for (topic, index), (code, message) in results.items():
        if code != ErrorCode.NONE and message is None:
            message = _default_message(code)
        by_topic.setdefault(topic, []).append({"partition_id": index, "error_code": code, "error_message": message})
    return [{"topic": t, "partition_result": parts} for t, parts in by_topic.items()]


def _default_message(code: ErrorCode) -> str | None:
    return {ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition."}.get(code)


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on each named partition and at the top level (v1+)."""
    named = request.body.get("topic_partitions")
    out = {
        "throttle_time_ms": 0,
        "error_code": code if named is None else 0,
        "replica_election_results": [
            {
                "topic": t["topic"],
                "partition_result": [
                    {"partition_id": p, "error_code": code, "error_message": None} for p in t["partitions"]
                ],
            }
            for t in named or []
        ],
    }
    return finish(API_KEY, request, out, code, message)

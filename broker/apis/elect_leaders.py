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

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..metadata.admin import NotControllerError
from ..request_context import RequestContext

API_KEY = ApiKey.ELECT_LEADERS
VERSIONS = (0, 2)
PREFERRED, UNCLEAN = 0, 1


async def handle(ctx: RequestContext, request) -> dict:
    body = request.body
    version = request.header.api_version
    election = body.election_type if version >= 1 else PREFERRED
    wanted = None
    if body.topic_partitions is not None:
        wanted = list(dict.fromkeys((t.topic, p) for t in body.topic_partitions for p in t.partitions))
    if not allowed_cluster(ctx, Operation.ALTER):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "replica_election_results": _grouped(
                    {k: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for k in wanted or ()}, [])}
    if election not in (PREFERRED, UNCLEAN):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                "replica_election_results": _grouped(
                    {k: (ErrorCode.INVALID_REQUEST, f"Unknown election type {election}") for k in wanted or ()}, [])}
    try:
        results = await ctx.admin.elect_leaders(wanted, election == UNCLEAN)
    except NotControllerError:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER, "replica_election_results": []}
    # With every partition asked for, Kafka lists every topic, with only the elections that happened or failed.
    every = ctx.metadata.topic_names() if wanted is None else []
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "replica_election_results": _grouped(results, every)}


def _grouped(results, topics: list[str]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {t: [] for t in topics}
    for (topic, index), (code, message) in results.items():
        if code != ErrorCode.NONE and message is None:
            message = _default_message(code)
        by_topic.setdefault(topic, []).append({"partition_id": index, "error_code": code, "error_message": message})
    return [{"topic": t, "partition_result": parts} for t, parts in by_topic.items()]


def _default_message(code: ErrorCode) -> str | None:
    return {ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition."}.get(code)

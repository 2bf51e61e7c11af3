"""OffsetCommit: store a group's consumed positions (with metadata) in `__consumer_offsets`.

Members commit with their generation; simple consumers (generation -1, no member id) may commit
to a group nobody has joined, as Spark and kcat do. v2-4 may ask for an explicit retention.
"""
from __future__ import annotations

import contextlib

from strom.broker.errors import TopicError
from strom.broker.coordinator.group.coordinator import OFFSETS_TOPIC
from strom.broker.coordinator.group.records import CommittedOffset
from strom.broker.replica.manager import PendingAppend, await_appends
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed

API_KEY = ApiKey.OFFSET_COMMIT
VERSIONS = (0, 9)


async def handle(broker, request) -> dict:
    with contextlib.suppress(TopicError):  # a client may commit or join before FindCoordinator
        await broker.groups.ensure_topic()
    body = request.body
    if not allowed(broker, Operation.READ, ResourceType.GROUP, body.group_id):
        return _all_failed(body.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = [t for t in body.topics if not allowed(broker, Operation.READ, ResourceType.TOPIC, t.name)]
    offsets = [(t.name, p.partition_index,
                CommittedOffset(p.committed_offset, p.committed_leader_epoch, p.committed_metadata or ""))
               for t in body.topics if t not in refused for p in t.partitions]
    version = request.header.api_version
    generation = body.generation_id_or_member_epoch if version >= 1 else -1
    results = broker.groups.commit_offsets(body.group_id, body.member_id or "", body.group_instance_id,
                                           generation, body.retention_time_ms, offsets, version)
    code = await replicated(broker, body.group_id)
    if code != ErrorCode.NONE:
        for r in results:
            if r.error == ErrorCode.NONE:
                r.error = code
    topics: dict[str, list] = {t["name"]: t["partitions"] for t in
                               _all_failed(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED)["topics"]}
    for r in results:
        topics.setdefault(r.topic, []).append({"partition_index": r.partition, "error_code": r.error})
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()]}


def _all_failed(topics, code) -> dict:
    return {"throttle_time_ms": 0, "topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]} for t in topics]}


async def replicated(broker, group_id: str) -> ErrorCode:
    """As Kafka: a commit counts once every in-sync replica of the offsets partition has it, while
    this broker still leads that partition in the epoch it was written in. NONE;
    COORDINATOR_NOT_AVAILABLE when the replicas did not have it in time; NOT_COORDINATOR when the
    leadership was lost meanwhile (the commit may have been truncated as a follower since)."""
    partition = broker.partition(OFFSETS_TOPIC, broker.groups.partition_of(group_id))
    if partition is None:
        return ErrorCode.NONE
    if not partition.is_leader:
        return ErrorCode.NOT_COORDINATOR  # nothing can have been written here
    pending = PendingAppend.of(partition, partition.log.log_end_offset)
    code, = await await_appends([pending], broker.config["offsets.commit.timeout.ms"] / 1000,
                                broker.replicas.wait_for_data)
    # as Kafka 4.0's group coordinator turns an append's error into a commit's: retried by clients
    return {ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
            ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE}.get(code, code)


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402


ERROR_LAYOUT = PartitionLayout("topics", "name", "partitions", "partition_index", "topics", "name", "partitions",
                               "partition_index")


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

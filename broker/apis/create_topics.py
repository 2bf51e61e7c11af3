"""CreateTopics: new topics with a partition count (or a manual assignment) and config overrides.
Each new topic's partitions count against the client's controller_mutation_rate quota.

A manual assignment (``kafka-topics.sh --replica-assignment``, confluent-kafka's
``NewTopic(replica_assignment=...)``) names each partition's replicas, the preferred leader first;
it is checked as Kafka 4.0's controller checks it (counts -1, partitions 0..n-1 once each, brokers
registered in the cluster and distinct, one replication factor) and written as given."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from ..errors import TopicError
from ..request_context import RequestContext
from ..topics import TopicInfo
from ._common import THROTTLED_MESSAGE, mutation_quota, mutation_refused, throttled
from .describe_configs import topic_entries

API_KEY = ApiKey.CREATE_TOPICS
VERSIONS = (0, 7)
STRICT_SINCE = 6  # controller mutation quota: THROTTLING_QUOTA_EXCEEDED from v6, only throttled before


async def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> dict[str, Any]:
    partitions, replication = topic.num_partitions, topic.replication_factor
    assignment = [(a.partition_index, list(a.broker_ids)) for a in topic.assignments] or None
    configs = {c.name: c.value for c in topic.configs}
    # a manual assignment is checked (against the registered brokers) and written as given
    info = await ctx.admin.create_topic(
        topic.name, partitions, replication, configs, validate_only=validate_only, assignment=assignment
    )
    if assignment:  # valid, so: partitions 0..n-1, every one with the same replica count
        partitions, replication = len(assignment), len(assignment[0][1])
    if replication == -1:  # answered resolved, as Kafka does
        replication = ctx.config["default.replication.factor"]
    if info is None:
        partitions = partitions if partitions != -1 else ctx.config["num.partitions"]
        if not validate_only:
            return {"num_partitions": partitions, "replication_factor": replication, "configs": []}
        # validate_only, as Kafka answers it: the topic as it would be, with an id and every config
        info = TopicInfo(topic.name, uuid.uuid4().bytes, partitions, configs)
    return {
        "topic_id": info.topic_id,
        "num_partitions": info.partitions,
        "replication_factor": replication,
        "configs": [
            {
                "name": e["name"],
                "value": e["value"],
                "read_only": False,
                "config_source": e["config_source"],
                "is_sensitive": False,
            }
            for e in topic_entries(ctx, info, None)
        ],
    }


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    validate_only = body.get("validate_only", False)
    results = []
    seen = set()
    counts = Counter(t.name for t in body.topics)
    quota = mutation_quota(ctx, request, STRICT_SINCE)
    for topic in body.topics:
        result = {"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None}
        if counts[topic.name] > 1:
            # as Kafka: a name given twice is refused altogether, answered once
            if topic.name not in seen:
                result.update(error_code=ErrorCode.INVALID_REQUEST, configs=[], error_message="Duplicate topic name.")
                results.append(result)
            seen.add(topic.name)
            continue
        seen.add(topic.name)
        if not (
            allowed_cluster(ctx, Operation.CREATE) or allowed(ctx, Operation.CREATE, ResourceType.TOPIC, topic.name)
        ):
            result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.")
            results.append(result)
            continue
        if quota is not None and await _valid(ctx, topic) and mutation_refused(quota, _partition_count(ctx, topic)):
            result.update(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=THROTTLED_MESSAGE, configs=[])
            results.append(result)
            continue
        try:
            result.update(await _create(ctx, topic, validate_only))
        except TopicError as exc:
            result.update(error_code=exc.code, error_message=exc.message, configs=[])  # as Kafka (v5+)
        results.append(result)
    return throttled(quota, {"throttle_time_ms": 0, "topics": results})


async def _valid(ctx: RequestContext, topic: Any) -> bool:
    """Whether the topic would be created: as Kafka's controller, only a creation that passes
    every check takes from the controller mutation quota."""
    try:
        await _create(ctx, topic, True)
    except TopicError:
        return False
    return True


def _partition_count(ctx: RequestContext, topic: Any) -> int:
    """The partitions a new topic takes from the controller mutation quota."""
    if topic.assignments:
        return len(topic.assignments)
    count: int = topic.num_partitions if topic.num_partitions > 0 else ctx.config["num.partitions"]
    return count


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout(
    "topics",
    "name",
    None,
    None,
    "topics",
    "name",
    None,
    None,
    topic_defaults={"num_partitions": -1, "replication_factor": -1, "configs": None},
)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every topic."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

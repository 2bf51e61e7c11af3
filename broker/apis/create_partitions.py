"""CreatePartitions: grow a topic's partition count; the new partitions count against the
client's controller_mutation_rate quota. A topic named twice in one request is refused (once,
INVALID_REQUEST) and not grown, as Kafka does."""

from __future__ import annotations

from collections import Counter
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from ..errors import TopicError
from ..quotas import MutationQuota
from ..request_context import RequestContext
from ._common import THROTTLED_MESSAGE, mutation_quota, mutation_refused, throttled

API_KEY = ApiKey.CREATE_PARTITIONS
VERSIONS = (0, 3)
STRICT_SINCE = 3  # controller mutation quota: THROTTLING_QUOTA_EXCEEDED from v3, only throttled before


async def _grow(ctx: RequestContext, topic: Any, validate_only: bool, quota: MutationQuota | None) -> dict[str, Any]:
    result = {"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None}
    try:
        if not allowed(ctx, Operation.ALTER, ResourceType.TOPIC, topic.name):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        info = ctx.metadata.topic(topic.name)
        if (
            info is not None
            and topic.count > info.partitions
            and mutation_refused(quota, topic.count - info.partitions)
        ):
            raise TopicError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)
        # a manual assignment (one replica list per new partition) is checked against the brokers
        # registered in the cluster and written as given; [] is an assignment too (of nothing), as in Kafka
        assignment = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        await ctx.admin.create_partitions(topic.name, topic.count, validate_only=validate_only, assignment=assignment)
    except TopicError as exc:
        result.update(error_code=exc.code, error_message=exc.message)
    return result


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    quota = mutation_quota(ctx, request, STRICT_SINCE)
    counts = Counter(t.name for t in body.topics)
    results, refused = [], set()
    for topic in body.topics:
        if counts[topic.name] > 1:  # as Kafka: a name given twice is refused altogether, answered once
            if topic.name not in refused:
                refused.add(topic.name)
                results.append(
                    {
                        "name": topic.name,
                        "error_code": ErrorCode.INVALID_REQUEST,
                        "error_message": "Duplicate topic name.",
                    }
                )
            continue
        results.append(await _grow(ctx, topic, body.validate_only, quota))
    return throttled(quota, {"throttle_time_ms": 0, "results": results})


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402

ERROR_LAYOUT = PartitionLayout("topics", "name", None, None, "results", "name", None, None)


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every topic."""
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

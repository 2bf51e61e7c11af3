"""DescribeLogDirs: each log dir of this broker, whether it works, and its partitions' sizes.

As Kafka answers: one result per configured log dir (absolute path); an offline dir (it failed
with I/O errors, was removed or became read-only) has KAFKA_STORAGE_ERROR and no topics; an
online dir lists the requested partitions it holds (all with a null topic list) with their size
in bytes and offset lag (max(high watermark - log end offset, 0), Kafka's formula; no future
logs: Strom has no AlterReplicaLogDirs), and from v4 the volume's total and usable bytes.
"""

from __future__ import annotations

import os
from typing import Any

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, allowed_cluster
from ..request_context import RequestContext

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
VERSIONS = (0, 4)


def _wanted(body: Any) -> dict[str, set[int]] | None:
    """None for every partition, else {topic: set of partitions}."""
    if body.topics is None:
        return None
    return {t.topic: set(t.partitions) for t in body.topics}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    if not allowed_cluster(ctx, Operation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    wanted = _wanted(request.body)
    results: list[dict[str, Any]] = []
    for info in ctx.logs.describe_dirs():
        result = {
            "error_code": ErrorCode.NONE,
            "log_dir": os.path.abspath(info.path),  # noqa: ASYNC240  a string join with the cwd, no disk access
            "topics": [],
            "total_bytes": info.total_bytes,
            "usable_bytes": info.usable_bytes,
        }
        if info.offline is not None:
            result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, total_bytes=-1, usable_bytes=-1)
            results.append(result)
            continue
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), (size, lag) in sorted(info.partitions.items()):
            if wanted is not None and index not in wanted.get(topic, ()):
                continue
            topics.setdefault(topic, []).append(
                {"partition_index": index, "partition_size": size, "offset_lag": lag, "is_future_key": False}
            )
        result["topics"] = [{"name": name, "partitions": parts} for name, parts in topics.items()]
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import default_error_response, finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the
    top-level code where the response version has one, else the code on each entry the request
    lists."""
    return finish(API_KEY, request, default_error_response(API_KEY, request, code), code, message)

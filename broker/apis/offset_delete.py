"""OffsetDelete: drop committed offsets of partitions a group no longer consumes.

An Empty group may lose any offset; a consumer group with members may not lose offsets of topics
its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC).
"""
from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

API_KEY = ApiKey.OFFSET_DELETE
VERSIONS = (0, 0)


async def handle(broker, request) -> dict:
    body = request.body
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    error, results = broker.groups.delete_offsets(body.group_id, asked)
    if error is not ErrorCode.NONE:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    topics: dict[str, list] = {}
    for (topic, index), code in results.items():
        topics.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0,
            "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}

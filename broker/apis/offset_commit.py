"""OffsetCommit: store a group's consumed positions (with metadata) in `__consumer_offsets`.

Members commit with their generation; simple consumers (generation -1, no member id) may commit
to a group nobody has joined, as Spark and kcat do. v2-4 may ask for an explicit retention.
"""
from __future__ import annotations

import contextlib

from broker.errors import TopicError

from protocol.schema import ApiKey

from broker.group.records import CommittedOffset

API_KEY = ApiKey.OFFSET_COMMIT
VERSIONS = (0, 9)


async def handle(broker, request) -> dict:
    with contextlib.suppress(TopicError):  # a client may commit or join before FindCoordinator
        await broker.groups.ensure_topic()
    body = request.body
    offsets = [(t.name, p.partition_index,
                CommittedOffset(p.committed_offset, p.committed_leader_epoch, p.committed_metadata or ""))
               for t in body.topics for p in t.partitions]
    version = request.header.api_version
    generation = body.generation_id_or_member_epoch if version >= 1 else -1
    results = broker.groups.commit_offsets(body.group_id, body.member_id or "", body.group_instance_id,
                                           generation, body.retention_time_ms, offsets)
    topics: dict[str, list] = {}
    for r in results:
        topics.setdefault(r.topic, []).append({"partition_index": r.partition, "error_code": r.error})
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()]}

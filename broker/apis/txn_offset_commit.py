"""TxnOffsetCommit: a transactional producer commits a group's offsets inside its transaction.

The group coordinator appends them as a transactional batch and keeps them pending until the
transaction's marker (see broker.group.coordinator). v3+ carry the consumer's member id and
generation, checked like OffsetCommit's when given.
"""
from __future__ import annotations

from strom.broker.group.records import CommittedOffset
from strom.protocol.schema import ApiKey

API_KEY = ApiKey.TXN_OFFSET_COMMIT
VERSIONS = (0, 4)


async def handle(broker, request) -> dict:
    body = request.body
    version = request.header.api_version
    offsets = [(t.name, p.partition_index,
                CommittedOffset(p.committed_offset, p.committed_leader_epoch if version >= 2 else -1,
                                p.committed_metadata or ""))
               for t in body.topics for p in t.partitions]
    results = broker.groups.txn_commit_offsets(
        body.group_id, body.producer_id, body.producer_epoch,
        (body.member_id or "") if version >= 3 else "", body.group_instance_id if version >= 3 else None,
        body.generation_id if version >= 3 else -1, offsets)
    topics: dict[str, list] = {}
    for r in results:
        topics.setdefault(r.topic, []).append({"partition_index": r.partition, "error_code": r.error})
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()]}

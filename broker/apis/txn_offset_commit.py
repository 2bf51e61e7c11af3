"""TxnOffsetCommit: a transactional producer commits a group's offsets inside its transaction.

The group coordinator appends them as a transactional batch and keeps them pending until the
transaction's marker (see broker.group.coordinator). v3+ carry the consumer's member id and
generation, checked like OffsetCommit's when given.
"""
from __future__ import annotations

from strom.broker.group.records import CommittedOffset
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed

API_KEY = ApiKey.TXN_OFFSET_COMMIT
VERSIONS = (0, 4)


async def handle(broker, request) -> dict:
    body = request.body
    version = request.header.api_version
    denied = None
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(broker, Operation.READ, ResourceType.GROUP, body.group_id):
        denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
    if denied is not None:
        return {"throttle_time_ms": 0, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": denied} for p in t.partitions]} for t in body.topics]}
    refused = {t.name for t in body.topics if not allowed(broker, Operation.READ, ResourceType.TOPIC, t.name)}
    if refused:
        return {"throttle_time_ms": 0, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED
             if t.name in refused else ErrorCode.OPERATION_NOT_ATTEMPTED} for p in t.partitions]} for t in body.topics]}
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

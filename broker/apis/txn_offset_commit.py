"""TxnOffsetCommit: a transactional producer commits a group's offsets inside its transaction.

The group coordinator appends them as a transactional batch and keeps them pending until the
transaction's marker (see broker.group.coordinator). v3+ carry the consumer's member id and
generation, checked like OffsetCommit's when given.

Before the group coordinator writes anything, the transaction coordinator is asked (KIP-890
verification, as Kafka 4.0's group coordinator asks): the producer must be the one it knows for
the transactional id (else INVALID_PRODUCER_ID_MAPPING; an older epoch INVALID_PRODUCER_EPOCH), in
an Ongoing transaction that AddOffsetsToTxn gave the group's offsets partition (else
INVALID_TXN_STATE). A coordinator on another broker is asked with AddPartitionsToTxn v4
verify_only; one that cannot be reached leaves the commit unverified, as for Produce.
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
    refusal = await _verify(broker, body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)
    if refusal is not None:
        return {"throttle_time_ms": 0, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": refusal} for p in t.partitions]} for t in body.topics]}
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


# What a verification failure answers, where Kafka's group coordinator answers differently from the
# transaction coordinator's own code.
_ANSWERED_AS = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE}


async def _verify(broker, tid: str, pid: int, epoch: int, group: str) -> ErrorCode | None:
    """None when the producer's Ongoing transaction holds the group's offsets partition (or the
    coordinator cannot be asked), else the error to answer for every partition."""
    txn = broker.txn
    if txn is None or broker.groups.group_error(group) is not None:
        return None  # the group's own error (NOT_COORDINATOR, ...) is answered by the commit
    partition = txn.offsets_partition(group)
    if txn.state.ownership_error(tid) is None:
        found = txn.verify_partitions(tid, pid, epoch, [partition])
    else:
        found = await txn.verify_elsewhere(tid, pid, epoch, [partition])
        if found is None:
            return None
    code = found.get(partition, ErrorCode.INVALID_TXN_STATE)
    return None if code == ErrorCode.NONE else _ANSWERED_AS.get(code, code)

"""TxnOffsetCommit: a transactional producer commits a group's offsets inside its transaction.

The group coordinator appends them as a transactional batch and keeps them pending until the
transaction's marker (see broker.group.coordinator). v3+ carry the consumer's member id and
generation, checked like OffsetCommit's when given.

Before the first write of a transaction to the group's `__consumer_offsets` partition, the
transaction coordinator is asked, as Kafka 4.0 does (KIP-890): v5 (transaction version 2, the
client sends no AddOffsetsToTxn) has the partition added to the transaction; older versions must
have added it with AddOffsetsToTxn (INVALID_TXN_STATE, from v4 TRANSACTION_ABORTABLE). An unknown
producer gets INVALID_PRODUCER_ID_MAPPING, an old epoch INVALID_PRODUCER_EPOCH, a coordinator
that cannot answer now COORDINATOR_NOT_AVAILABLE (retried by every client).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.broker.coordinator.group.records import CommittedOffset
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from strom.storage.producer_state import VerificationGuard

from ..auth import Operation, ResourceType, allowed
from ..request_context import RequestContext

API_KEY = ApiKey.TXN_OFFSET_COMMIT
VERSIONS = (0, 6)
TOPIC_IDS = 6  # the first version that names topics by id (KIP-1319, Kafka 4.4)


def _commit_error(code: ErrorCode, version: int) -> ErrorCode:
    """A transaction coordinator's answer as TxnOffsetCommit reports it (Kafka's group coordinator
    normalises the partition leader's verification errors)."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.INVALID_TXN_STATE and version >= 4:
        return ErrorCode.TRANSACTION_ABORTABLE
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < 4:
        return ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    if code in (
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code == ErrorCode.UNKNOWN_PRODUCER_ID:
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    return code


async def _ask_coordinator(ctx: RequestContext, body: Any, version: int) -> tuple[ErrorCode, VerificationGuard | None]:
    """(NONE, guard) when the group's offsets partition is (v5: has been made) part of the producer's
    transaction, else (the error every partition of the request gets, None). ``guard``: when the
    coordinator was awaited, the verification guard taken before (KIP-890, as Produce's): a marker of
    the producer written to the offsets partition meanwhile ends the transaction there, and the
    commit must then be refused rather than open a transaction that never ends."""
    txn = ctx.txn
    tid, pid, epoch = body.transactional_id, body.producer_id, body.producer_epoch
    partition = txn.offsets_partition(body.group_id)
    local = ctx.replica_manager.partition(*partition)
    if local is not None:
        state = local.log.producer_state
        entry = state.producers.get(pid)
        if pid in state.ongoing and entry is not None and entry.producer_epoch == epoch:
            return ErrorCode.NONE, None  # this transaction already wrote here
    if txn.state.ownership_error(tid) is None and version < 5:
        return txn.verify_partitions(tid, pid, epoch, [partition])[partition], None  # nothing awaited
    guard = local.log.verification_guard(pid) if local is not None and local.is_leader else None
    if txn.state.ownership_error(tid) is None:
        return await txn.add_partitions(tid, pid, epoch, {partition}, tv2=True), guard
    found = await txn.ask_elsewhere(tid, pid, epoch, [partition], add=version >= 5)
    code = (
        ErrorCode.COORDINATOR_NOT_AVAILABLE if found is None else found.get(partition, ErrorCode.UNKNOWN_SERVER_ERROR)
    )
    return code, guard


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if request.header.api_version < TOPIC_IDS:
        return await _handle(ctx, request)
    # v6: topics by id, answered by id; an id this cluster does not know fails its partitions
    ids = [t.topic_id for t in body.topics]
    for t in body.topics:
        t.name = ctx.metadata.topic_name_by_id(t.topic_id) or ""
    out = await _handle(ctx, request)
    for topic, topic_id in zip(out["topics"], ids, strict=True):
        topic["topic_id"] = topic_id
        if not topic["name"]:
            for part in topic["partitions"]:
                part["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
    return out


async def _handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    version = request.header.api_version
    denied = None
    if not allowed(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(ctx, Operation.READ, ResourceType.GROUP, body.group_id):
        denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
    if denied is not None:
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [{"partition_index": p.partition_index, "error_code": denied} for p in t.partitions],
                }
                for t in body.topics
            ],
        }
    refused = {t.name for t in body.topics if t.name and not allowed(ctx, Operation.READ, ResourceType.TOPIC, t.name)}
    if refused:
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED
                            if t.name in refused
                            else ErrorCode.OPERATION_NOT_ATTEMPTED,
                        }
                        for p in t.partitions
                    ],
                }
                for t in body.topics
            ],
        }
    # As Kafka: partitions that do not exist are answered so before the transaction or the group is
    # asked (none at all when no partition exists)
    unknown = {
        (t.name, p.partition_index)
        for t in body.topics
        for p in t.partitions
        if not ctx.groups.partition_exists(t.name, p.partition_index)
    }

    def answer(code_of: Callable[[str, int], ErrorCode]) -> dict[str, Any]:
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                            if (t.name, p.partition_index) in unknown
                            else code_of(t.name, p.partition_index),
                        }
                        for p in t.partitions
                    ],
                }
                for t in body.topics
            ],
        }

    if all((t.name, p.partition_index) in unknown for t in body.topics for p in t.partitions):
        return answer(lambda topic, index: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    guard = None
    if ctx.groups.group_error(body.group_id) is None:
        # an empty transactional id names no transaction: as Kafka 4.0, COORDINATOR_NOT_AVAILABLE
        # (and its offsets are not written unverified)
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if body.transactional_id:
            code, guard = await _ask_coordinator(ctx, body, version)
            code = _commit_error(code, version)
        if code != ErrorCode.NONE:
            return answer(lambda topic, index: code)
    offsets = [
        (
            t.name,
            p.partition_index,
            CommittedOffset(
                p.committed_offset, p.committed_leader_epoch if version >= 2 else -1, p.committed_metadata or ""
            ),
        )
        for t in body.topics
        for p in t.partitions
        if (t.name, p.partition_index) not in unknown
    ]
    results = ctx.groups.txn_commit_offsets(
        body.group_id,
        body.producer_id,
        body.producer_epoch,
        (body.member_id or "") if version >= 3 else "",
        body.group_instance_id if version >= 3 else None,
        body.generation_id if version >= 3 else -1,
        offsets,
        verification_guard=guard,
    )
    # As Kafka: the answer waits until the offsets partition's in-sync replicas have the commit, while
    # this broker still leads it in the epoch it was written in. Answered at once, a commit that the
    # coordinator's failover then lost was followed by the transaction's COMMIT marker: the group's
    # offsets went back and an exactly-once pipeline processed its input again.
    if any(r.error == ErrorCode.NONE for r in results):
        code = await ctx.groups.replicated(body.group_id)
        if code != ErrorCode.NONE:
            for r in results:
                if r.error == ErrorCode.NONE:
                    r.error = code
    codes = {(r.topic, r.partition): r.error for r in results}
    return answer(lambda topic, index: codes[(topic, index)])


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import finish  # noqa: E402


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict[str, Any] | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition."""
    out = {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t.get("name", ""),
                "topic_id": t.get("topic_id", bytes(16)),
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"] or []
                ],
            }
            for t in request.body.get("topics") or []
        ],
    }
    return finish(API_KEY, request, out, code, message)

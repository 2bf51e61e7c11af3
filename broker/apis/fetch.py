"""Fetch: byte ranges of segment files up to the high watermark, with long polling.

Each partition's data is a FileRegion the connection sends with `os.sendfile`. The request waits
up to `max_wait_ms` until `min_bytes` are available, woken by every append. Fetch v0-v3 clients
read message sets of magic 0/1, so their data is read and down-converted.

isolation_level=1 (read_committed, v4+) reads only below the last stable offset (no open
transaction's data) and lists the aborted transactions overlapping the data returned (producer id,
first offset) from the logs' `.txnindex`, so the consumer drops their batches; read_uncommitted
answers a null list, as Kafka does. Every v4+ answer carries the partition's LSO.

Fetch from follower (KIP-392): a consumer's Fetch v11+ (and the debugging consumer's, replica id
-2) may be served by any replica, a follower reading up to its own high watermark (the one its
leader last sent it) or, read_committed, its own last stable offset; offsets past its log end
are OFFSET_OUT_OF_RANGE, those between its high watermark and log end get no records (as on a
leader). With `replica.selector.class` set, a leader answers a consumer's v11+ fetch with
`preferred_read_replica` (no records, at once) when the selector picks another replica for the
consumer's rack (`strom.broker.replica_selector`). Fetch v0-v10 and ListOffsets stay leader-only.

A follower's fetch of a throttled partition obeys the leader's replication throttle
(`strom.broker.replication_quota`).

Incremental fetch sessions (KIP-227) live in `strom.broker.fetch_session`: it says which
partitions a request reads (the request's own, or its session's) and which of them the answer
carries; this module reads them.
"""
from __future__ import annotations

import os
import struct

import logging

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.records.legacy import downconvert
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed, allowed_cluster
from strom.storage import files
from strom.storage.errors import OffsetOutOfRange, StorageError

from strom.broker.replica.manager import now_ms
from ..replica_selector import preferred_read_replica
from ._common import ZERO_UUID, leader_partition

API_KEY = ApiKey.FETCH
VERSIONS = (0, 17)
# With more descriptors open than the file cache holds, regions up to this size are sent as a
# copy: a fetch of a thousand partitions must not hold a thousand descriptors until it is sent.
_COPY_UNDER_PRESSURE = 1 << 20
log = logging.getLogger("strom.fetch")
CONSUMER_ID = -1
DEBUGGING_CONSUMER_ID = -2



def _end_offset(region) -> int:
    """The offset after the last batch of a fetched region, from batch headers (offset, length) only."""
    fd, position, stop, end = region.fileno(), region.position, region.position + region.size, 0
    while position + 12 <= stop:
        head = os.pread(fd, 12, position)
        if len(head) < 12:
            break
        base, length = struct.unpack(">qi", head)
        if length <= 0 or position + 12 + length > stop:
            break
        tail = os.pread(fd, 4, position + 23)  # last offset delta (batch header bytes 23-27)
        if len(tail) < 4:
            break
        end = base + struct.unpack(">i", tail)[0] + 1
        position += 12 + length
    return end


def _resolve(broker, topic, version: int):
    """(name, topic_id, error) of a requested topic."""
    store = broker.topics
    if version >= 13:
        info = store.by_id.get(topic.topic_id)
        if info is None:
            return None, topic.topic_id, ErrorCode.UNKNOWN_TOPIC_ID
        return info.name, info.topic_id, ErrorCode.NONE
    info = store.topics.get(topic.topic)
    if info is None:
        return topic.topic, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return info.name, info.topic_id, ErrorCode.NONE


def _partition_error(index: int, code: ErrorCode, hw=-1, start=-1, aborted: list | None = None) -> dict:
    """A partition answered with an error, as Kafka answers it: no offsets (-1), and aborted
    transactions null when the log was asked (Kafka's read result) or an empty list when the
    partition was refused before (its FetchResponse.partitionResponse)."""
    return {"partition_index": index, "error_code": code, "high_watermark": hw,
            "last_stable_offset": hw, "log_start_offset": start, "aborted_transactions": aborted,
            "records": b""}


def _diverging(plog, req, version: int) -> tuple[int, int] | None:
    """For a follower (v12+): (epoch, end offset) where its log diverges from ours, if it does."""
    if version < 12 or req.last_fetched_epoch < 0:
        return None
    epoch, end_offset = plog.end_offset_for_epoch(req.last_fetched_epoch)
    if epoch == -1:  # nothing known about that epoch here: the offset check decides (out of range)
        return None
    if epoch < req.last_fetched_epoch or end_offset < req.fetch_offset:
        return epoch, end_offset
    return None


def _from_any_replica(version: int, replica: int) -> bool:
    """Whether a fetch may be served by a follower (Kafka's FetchParams.fetchOnlyLeader negated):
    a consumer's from v11 (KIP-392, it says its rack), and the debugging consumer's (-2)."""
    return replica == DEBUGGING_CONSUMER_ID or (replica < 0 and version >= 11)


def _read_partition(broker, name, req, version: int, budget: int, first: bool, replica: int,
                    read_committed: bool = False, rack: str | None = None) -> tuple[dict, int]:
    partition, code = leader_partition(broker, name, req.partition, req.current_leader_epoch if version >= 9 else -1,
                                       require_leader=not _from_any_replica(version, replica))
    if code != ErrorCode.NONE:
        result = _partition_error(req.partition, code,
                                  aborted=[] if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None)
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            view = broker.partition_view(name, req.partition)
            if view is not None:
                result["current_leader"] = {"leader_id": view[0], "leader_epoch": view[1]}
        return result, 0
    plog = partition.log
    result = {"partition_index": req.partition, "error_code": ErrorCode.NONE,
              "log_start_offset": plog.log_start_offset,
              "aborted_transactions": [] if read_committed else None, "preferred_read_replica": -1,
              "records": b""}
    if replica >= 0:
        diverging = _diverging(plog, req, version)
        if diverging is None:
            broker.follower_fetched(partition, replica, req.fetch_offset, req.log_start_offset if version >= 5 else -1)
        hw = partition.high_watermark
        result.update(high_watermark=hw, last_stable_offset=plog.last_stable_offset)
        if diverging is not None:
            result["diverging_epoch"] = {"epoch": diverging[0], "end_offset": diverging[1]}
            return result, 0
        quota = broker.leader_quota
        if replica not in partition.isr and quota.is_throttled(name, req.partition) \
                and quota.exceeded(trio.current_time()):
            return result, 0  # a throttled replica out of sync: nothing this time (Kafka's leader throttle)
        max_offset = None
    else:
        # a leader or (KIP-392) a follower: up to its own high watermark (a follower's is the one
        # its leader last told it) or last stable offset, as Kafka's replicas answer consumers
        hw = partition.high_watermark
        lso = plog.last_stable_offset
        result.update(high_watermark=hw, last_stable_offset=lso)
        if version >= 11 and replica == CONSUMER_ID and partition.is_leader:
            preferred = preferred_read_replica(broker, partition, rack, req.fetch_offset, now_ms())
            if preferred >= 0:  # as Kafka: no read here, the client fetches from that replica
                log.debug("%s-%d: preferred read replica %d for a consumer in rack %r", name, req.partition,
                          preferred, rack)
                result["preferred_read_replica"] = preferred
                return result, 0
        max_offset = lso if read_committed else hw
    max_bytes = min(req.partition_max_bytes, budget)
    if max_bytes <= 0 and not first:
        return result, 0
    try:
        data = plog.read(req.fetch_offset, max(max_bytes, 0), max_offset=max_offset,
                         min_one_message=first and version >= 3)
    except OffsetOutOfRange:
        if replica >= 0:  # a Strom follower reads the leader's log start and high watermark here
            result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            return result, 0
        return _partition_error(req.partition, ErrorCode.OFFSET_OUT_OF_RANGE), 0
    except StorageError as exc:  # unreadable segment, no descriptor left: logged by storage
        return _partition_error(req.partition, ErrorCode[exc.error_code_name]), 0
    region = data.records
    if region is None or region.size == 0:
        return result, 0
    if read_committed:
        aborted = plog.aborted_transactions(req.fetch_offset, max_offset)
        if any(a.first_offset >= req.fetch_offset for a in aborted):
            # as Kafka: only transactions that start within the data returned, not up to the LSO
            end = _end_offset(region)
            aborted = [a for a in aborted if a.first_offset < end]
        result["aborted_transactions"] = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                                          for a in aborted]
    if region.size <= _COPY_UNDER_PRESSURE and files.under_pressure():
        result["records"] = region.read()  # do not hold one more descriptor until it is sent
        return result, len(result["records"])
    if version < 4:
        converted = downconvert(region.read(), 0 if version < 2 else 1, min_offset=req.fetch_offset)
        result["records"] = converted
        return result, len(converted)
    result["records"] = region
    return result, region.size


def _record_throttled(broker, topics: list[dict]) -> None:
    """Count the bytes sent to a follower for throttled partitions (in sync or not) against the
    leader's replication quota, as Kafka does, so all throttled traffic stays within it."""
    quota = broker.leader_quota
    size = 0
    for topic in topics:
        for part in topic["partitions"]:
            records = part.get("records")
            if records and quota.is_throttled(topic["topic"], part["partition_index"]):
                size += getattr(records, "size", None) or len(records)
    quota.record(size, trio.current_time())


def _replica_id(body, version: int) -> int:
    return body.replica_state.replica_id if version >= 15 else body.replica_id


def _read_all(broker, body, version: int, requested) -> tuple[list[dict], int, bool, list[tuple[str, int]]]:
    """One pass over every requested partition: (topics, bytes found, whether any error, the
    partitions read, whose changes a long poll waits for)."""
    budget = body.max_bytes if version >= 3 else 2**31 - 1
    total = 0
    errors = False
    topics = []
    read: list[tuple[str, int]] = []
    replica = _replica_id(body, version)
    read_committed = version >= 4 and body.isolation_level == 1 and replica < 0
    rack = body.rack_id if version >= 11 else None
    for topic in requested:
        name, topic_id, code = _resolve(broker, topic, version)
        if code == ErrorCode.NONE and broker.authorizer is not None and not (
                allowed_cluster(broker, Operation.CLUSTER_ACTION) if replica >= 0
                else allowed(broker, Operation.READ, ResourceType.TOPIC, name)):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        parts = []
        for req in topic.partitions:
            if code != ErrorCode.NONE:  # refused before any log is asked
                parts.append(_partition_error(req.partition, code, aborted=[]))
                errors = True
                continue
            result, size = _read_partition(broker, name, req, version, budget - total, total == 0, replica,
                                           read_committed, rack)
            # an error or a preferred read replica is answered at once, as Kafka does
            errors = errors or result["error_code"] != ErrorCode.NONE or result.get("preferred_read_replica", -1) >= 0
            read.append((name, req.partition))
            total += size
            parts.append(result)
        topics.append({"topic": name if name is not None else "", "topic_id": topic_id, "partitions": parts})
    return topics, total, errors, read


async def handle(broker, request) -> dict:
    body = request.body
    version = request.header.api_version
    context = broker.fetch_sessions.new_context(version, body, _replica_id(body, version) >= 0)
    if context.error != ErrorCode.NONE:
        return {"throttle_time_ms": 0, "error_code": context.error, "session_id": 0, "responses": []}
    deadline = trio.current_time() + max(body.max_wait_ms, 0) / 1000
    follower = _replica_id(body, version) >= 0
    while True:
        topics, total, errors, read = _read_all(broker, body, version, context.topics)
        now = trio.current_time()
        if total >= body.min_bytes or errors or now >= deadline:
            break
        wake = deadline
        if follower and broker.leader_quota.active():
            # data held back by the replication throttle is due again once the rate falls
            wake = min(deadline, now + max(broker.leader_quota.delay(now), 0.005))
        with trio.move_on_at(wake):
            await broker.replicas.wait_for_data(read)
    if follower:  # throttled replicas' bytes are measured whether a rate is set or not, as Kafka
        _record_throttled(broker, topics)
    session_id, topics = context.finish(topics)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": session_id, "responses": topics}


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402


ERROR_LAYOUT = PartitionLayout("topics", "topic", "partitions", "partition", "responses", "topic", "partitions",
                               "partition_index",
                               {"high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                "preferred_read_replica": -1, "aborted_transactions": None, "records": None},
                               top_defaults={"error_code": 0, "session_id": 0})


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition and at the top level; v13+: the top-level code alone, as Kafka answers."""
    out = finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)
    if request.header.api_version >= 13:
        out["responses"] = []
    return out

"""Produce: validate record batches by their headers and CRCs, append them, answer with offsets.

The hot path: batches stay bytes. Each partition's records are checked batch by batch (header,
size, CRC-32C), copied once into a bytearray whose base offsets the log rewrites in place, and
written with one write. v0/v1 message sets from old clients are converted to v2 first.

Malformed input is answered as Kafka 4.0 answers it: Produce v3+ carries exactly one whole v2
batch per partition (else INVALID_RECORD), a bad CRC or an impossible length is CORRUPT_MESSAGE,
a header that contradicts itself (record count, offsets, a producer id without a sequence) is
INVALID_RECORD. Unlike Kafka, records inside an intact batch are not decoded (nor decompressed)
unless the topic is compacted or recompresses: a client that writes a valid header and CRC over
garbage records gets them stored (FINDINGS.md F11).

A topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION: as in Kafka 4, only Metadata creates
topics automatically, and clients ask Metadata before they produce.

Transactions are recognised from the batch header attributes alone. A client may not write
control batches (INVALID_RECORD). A transactional batch whose producer has no open transaction in
the partition (at the batch's epoch) goes to the transaction coordinator first, as Kafka 4.0's
AddPartitionsToTxnManager does (this broker's own coordinator directly; in a cluster the
coordinating broker with AddPartitionsToTxn v4+):

* Produce v12 (transaction version 2, KIP-890 part 2): the coordinator adds the partition to the
  producer's transaction (the client sends no AddPartitionsToTxn);
* older versions (KIP-890 part 1 verification): the partition must already be in the Ongoing
  transaction, else INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11).

An older epoch answers INVALID_PRODUCER_EPOCH; a coordinator that is loading, moved, busy or
unreachable NOT_ENOUGH_REPLICAS (retried by every client; the batch is never accepted
unverified). So a zombie or a confused client cannot open a transaction that would hold the LSO
back forever. A marker written while the answer is awaited (the transaction ended meanwhile)
drops the verification guard the partition's producer state made when the verification began;
the batch is then refused with INVALID_TXN_STATE ("Record was not part of an ongoing
transaction"), as Kafka's log refuses it, instead of being appended after the marker.
"""
from __future__ import annotations

import logging
import time

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_records, recompress, validate_batches, validate_keys
from strom.protocol.records.compression import Compression
from strom.protocol.records.header import (ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET,
                                          TRANSACTIONAL_MASK, parse_header)
from strom.protocol.records.errors import (BatchTooLarge, InvalidBatch, InvalidRecord, LegacyFormat, RecordsError,
                                           UnknownCodec)
from strom.protocol.records.legacy import upconvert
from strom.protocol.schema import ApiKey

from ..auth import Operation, ResourceType, allowed
from strom.broker.replica.manager import PendingAppend, await_appends
from strom.storage.errors import StorageError
from strom.storage.producer_state import NO_VERIFICATION

from ..topics import ADMIN_CLIENT_ID, INTERNAL_TOPICS
from ._common import leader_partition


API_KEY = ApiKey.PRODUCE
VERSIONS = (0, 12)
log = logging.getLogger("strom.produce")


class PartitionError(Exception):
    """A partition's records refused. ``at_log``: found where Kafka's log validates a batch, so the
    answer carries the partition's log start offset, as Kafka's does (its request-level checks, CRC
    and size errors answer -1)."""

    def __init__(self, code: ErrorCode, message: str | None = None, at_log: bool = False,
                 record_errors: list[dict] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.at_log = at_log
        self.log_start_offset = -1
        self.record_errors = record_errors or []


def _result(index: int, code=ErrorCode.NONE, base_offset=-1, append_time=-1, start=-1, message=None) -> dict:
    return {"index": index, "error_code": code, "base_offset": base_offset,
            "log_append_time_ms": append_time, "log_start_offset": start,
            "record_errors": [], "error_message": message}


# Topic compression.type values other than "producer": the codec batches are stored in.
TOPIC_CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


# Kafka's ByteBufferLogInputStream: an entry shorter than a v0 message's overhead cannot be
# anything; an entry cut short ends the records.
_RECORD_OVERHEAD_V0 = 14
_HEADER_UP_TO_MAGIC = MAGIC_OFFSET + 1


def _entry_size(view, pos: int) -> int | None:
    """The size of the log entry at ``pos`` as Kafka's reader sees it: None when it is cut short
    (Kafka's iterator ends there), CORRUPT_MESSAGE when its length or magic is impossible."""
    remaining = len(view) - pos
    if remaining < LOG_OVERHEAD:
        return None
    length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
    if length < _RECORD_OVERHEAD_V0:
        raise PartitionError(ErrorCode.CORRUPT_MESSAGE,
                             f"Record size {length} is less than the minimum record overhead ({_RECORD_OVERHEAD_V0})")
    if remaining < _HEADER_UP_TO_MAGIC:
        return None
    magic = view[pos + MAGIC_OFFSET]
    if magic > 2:  # unsigned here: a negative magic byte reads as > 127
        raise PartitionError(ErrorCode.CORRUPT_MESSAGE, f"Invalid magic found in record: {magic}")
    size = LOG_OVERHEAD + length
    return size if remaining >= size else None


def _one_batch(records, version: int):
    """Produce v3+ carries exactly one v2 batch per partition (Kafka's ProduceRequest.validateRecords):
    no whole batch, a magic 0/1 one, or a second whole batch is INVALID_RECORD; bytes after the one
    batch that are not a whole entry are dropped, as Kafka's reader drops them."""
    view = memoryview(records)
    first = _entry_size(view, 0)
    if first is None:
        raise PartitionError(ErrorCode.INVALID_RECORD,
                             f"Produce requests with version {version} must have at least one record batch per partition")
    if view[MAGIC_OFFSET] != 2:
        raise PartitionError(ErrorCode.INVALID_RECORD, f"Produce requests with version {version} are only allowed to "
                             "contain record batches with magic version 2")
    if _entry_size(view, first) is not None:
        raise PartitionError(ErrorCode.INVALID_RECORD, f"Produce requests with version {version} are only allowed to "
                             "contain exactly one record batch per partition")
    return records if first == len(view) else records[:first]


def _check_client_batch(header) -> None:
    """What Kafka's LogValidator refuses in a batch from a client, beyond its framing and CRC."""
    count = header.last_offset_delta + 1
    if header.records_count <= 0:
        raise PartitionError(ErrorCode.INVALID_RECORD, f"Invalid reported count for record batch: "
                             f"{header.records_count}", at_log=True)
    if count != header.records_count:
        raise PartitionError(ErrorCode.INVALID_RECORD, f"Inconsistent batch offset range [0, {count - 1}] and "
                             f"count of records {header.records_count}", at_log=True)
    if header.is_control:
        raise PartitionError(ErrorCode.INVALID_RECORD, "control batches are written by transaction coordinators only",
                             at_log=True)
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise PartitionError(ErrorCode.INVALID_RECORD, f"Invalid sequence number {header.base_sequence} in record "
                             f"batch with producerId {header.producer_id}", at_log=True)


def _batches(records, version: int, max_bytes: int, codec: int | None):
    """Whole v2 batches and their headers, or PartitionError with Kafka's code.

    `codec` is the topic's compression.type as a codec id, or None to keep the producer's.
    """
    try:
        try:
            headers = validate_batches(records, max_batch_size=max_bytes)
        except LegacyFormat:
            if version >= 3:
                raise PartitionError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                                     f"Produce v{version} requires record batches of magic 2") from None
            records = upconvert(records)
            headers = validate_batches(records, max_batch_size=max_bytes)
        if version < 7 and any(h.compression == Compression.ZSTD for h in headers):
            # as Kafka: a client too old for Produce v7 could not read zstd batches back
            raise PartitionError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                 f"zstd-compressed batches need Produce v7 or later, not v{version}")
        if codec is not None and any(h.compression != codec for h in headers):
            records = recompress(records, headers, codec)
            headers = validate_batches(records, max_batch_size=max_bytes)
        return bytearray(records), headers
    except BatchTooLarge as exc:
        raise PartitionError(ErrorCode.MESSAGE_TOO_LARGE, str(exc)) from None
    except InvalidBatch as exc:
        raise PartitionError(ErrorCode.INVALID_RECORD, str(exc), at_log=True) from None
    except UnknownCodec as exc:
        raise PartitionError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc), at_log=True) from None
    except RecordsError as exc:
        raise PartitionError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None


# What a partition leader answers when the coordinator could not vouch for a transactional batch
# (Kafka's ReplicaManager): retriable coordinator trouble becomes NOT_ENOUGH_REPLICAS, which every
# client retries without a metadata refresh; an unknown producer OUT_OF_ORDER_SEQUENCE_NUMBER.
_RETRIABLE = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.REQUEST_TIMED_OUT}


def produce_txn_error(code: ErrorCode, version: int) -> ErrorCode:
    """A coordinator's answer about a transactional batch as Produce ``version`` reports it."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.INVALID_TXN_STATE and version >= 11:
        return ErrorCode.TRANSACTION_ABORTABLE  # "not in the transaction" (KIP-890), Produce v11+
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < 11:
        return ErrorCode.INVALID_TXN_STATE
    if code in _RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if code == ErrorCode.UNKNOWN_PRODUCER_ID:
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    return code


def _opens_transaction(partition, header) -> bool:
    """A transactional batch whose producer has no open transaction at this epoch here."""
    return header.is_transactional and not partition.log.producer_state.has_ongoing_txn(
        header.producer_id, header.producer_epoch)


async def _ask_coordinator(broker, body, version: int) -> dict[tuple[str, int], tuple[ErrorCode, object]]:
    """For each partition whose first batch would open a transaction here (read from the first
    batch header only): the coordinator's answer and the verification guard made before asking.
    Produce v12 (transaction version 2) asks it to add the partition, older versions whether it
    was added (KIP-890 verification). A coordinator on another broker is asked with
    AddPartitionsToTxn v4+; one that cannot be reached answers COORDINATOR_NOT_AVAILABLE, so the
    batch is refused as retriable, never accepted unverified.

    While the answer is awaited a marker may end the transaction (the coordinator aborts it, on a
    timeout or for the client); that marker drops the partition's guard for the producer, so the
    append presenting it is refused (Kafka's VerificationGuard) instead of opening a transaction
    the coordinator already considers ended, which would hold the last stable offset back forever."""
    tid = body.transactional_id
    txn = broker.txn
    if txn is None or (version < 12 and txn.state.ownership_error(tid) is None):
        return {}  # verified here, without waiting, by _verify_transaction (the hot path of classic clients)
    asked: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for topic in body.topic_data:
        for p in topic.partition_data:
            records = p.records
            partition = broker.partition(topic.name, p.index)
            if partition is None or not partition.is_leader or not records or len(records) < HEADER_SIZE:
                continue
            try:
                header = parse_header(records, 0)
            except Exception:  # noqa: BLE001 - a malformed batch is refused by _append with its own error
                continue
            if header.magic != 2 or header.is_control or not _opens_transaction(partition, header):
                continue
            asked.setdefault((header.producer_id, header.producer_epoch), []).append(
                (topic.name, p.index, partition.log.verification_guard(header.producer_id)))
    out: dict[tuple[str, int], tuple[ErrorCode, object]] = {}
    add = version >= 12
    for (pid, epoch), asking in asked.items():
        if not tid:
            continue  # refused by _append (INVALID_RECORD)
        partitions = [(topic, index) for topic, index, _ in asking]
        if txn.state.ownership_error(tid) is None:
            if add:
                code = await txn.add_partitions(tid, pid, epoch, set(partitions), tv2=True)
                found = {tp: code for tp in partitions}
            else:
                found = txn.verify_partitions(tid, pid, epoch, partitions)
        else:
            found = await txn.ask_elsewhere(tid, pid, epoch, partitions, add=add)
        for topic, index, guard in asking:
            out[(topic, index)] = ((found or {}).get((topic, index), ErrorCode.COORDINATOR_NOT_AVAILABLE), guard)
    return out


def _verify_transaction(broker, transactional_id, topic: str, index: int, partition, headers, version: int,
                        answers: dict):
    """Raise PartitionError unless every transactional producer here is in an Ongoing transaction
    that holds this partition (asked only when the log knows no open transaction of it at its epoch).
    Returns the verification guard the append must present to the log (NO_VERIFICATION when
    every transaction is open here already)."""
    guard = NO_VERIFICATION
    for header in headers:
        if not _opens_transaction(partition, header):
            continue
        if not transactional_id:
            raise PartitionError(ErrorCode.INVALID_RECORD, "transactional batches need a transactional.id")
        code, guard = answers.get((topic, index), (None, None))
        if code is None:  # a second producer in one request, or one the first header did not show
            txn = broker.txn
            # verified now, with no wait before the append: the guard made here is still current then
            guard = partition.log.verification_guard(header.producer_id)
            code = (txn.verify_partitions(transactional_id, header.producer_id, header.producer_epoch,
                                          [(topic, index)])[(topic, index)]
                    if txn.state.ownership_error(transactional_id) is None else ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if code != ErrorCode.NONE:
            code = produce_txn_error(code, version)
            message = ("Partition was not added to the transaction"
                       if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE)
                       else f"could not add {topic}-{index} to the transaction of {transactional_id}"
                       if version >= 12 else f"could not verify the transaction of {transactional_id}")
            raise PartitionError(code, message)
    return guard


def _append(broker, topic: str, index: int, records, version: int, acks: int, waits: list,
            transactional_id: str | None = None, answers: dict | None = None) -> dict:
    if version >= 3:
        records = _one_batch(records or b"", version)
    elif not records:
        raise PartitionError(ErrorCode.INVALID_RECORD, "a Produce request must carry at least one record batch")
    partition, code = leader_partition(broker, topic, index)
    if code != ErrorCode.NONE:
        raise PartitionError(code)
    min_isr = broker.topic_setting(topic, "min.insync.replicas") if acks == -1 else 1
    if len(partition.isr) < min_isr:
        raise PartitionError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{len(partition.isr)} in-sync replicas, min.insync.replicas={min_isr}")
    try:
        data, headers, guard = _validated(broker, topic, index, partition, records, version, transactional_id, answers)
        info = partition.append(data, headers, verification_guard=guard)
    except StorageError as exc:
        code = ErrorCode[exc.error_code_name]
        # as Kafka: a sequence or epoch refused by the log's producer state answers with the log start
        raise _at_log(PartitionError(code, str(exc), at_log=code not in _WITHOUT_LOG_START), partition) from None
    except PartitionError as exc:
        raise _at_log(exc, partition) from None
    result = _result(index, base_offset=info.first_offset, append_time=info.log_append_time,
                     start=info.log_start_offset)
    if acks == -1:  # the leader epoch of the append, taken before anything awaits (see PendingAppend)
        waits.append((PendingAppend.of(partition, info.last_offset + 1), min_isr, result))
    return result


# Errors Kafka's ReplicaManager answers without the partition's log start offset.
_WITHOUT_LOG_START = {ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE,
                      ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.NOT_LEADER_OR_FOLLOWER}


def _at_log(exc: PartitionError, partition) -> PartitionError:
    if exc.at_log:
        exc.log_start_offset = partition.log.log_start_offset
    return exc


def _validated(broker, topic: str, index: int, partition, records, version: int, transactional_id, answers):
    """The batches to append, their headers and the verification guard to present (None without
    transactional batches), checked as Kafka's log checks a client's batches."""
    config = partition.log.config
    codec = TOPIC_CODECS.get(config.compression_type)
    data, headers = _batches(records, version, config.max_message_bytes, codec)
    for header in headers:
        _check_client_batch(header)
    _check_timestamps(broker, topic, data, headers)
    if config.compact_enabled:
        try:
            validate_keys(data)
        except InvalidRecord as exc:
            why = f"Compacted topic cannot accept message without key in topic partition {topic}-{index}"
            raise PartitionError(ErrorCode.INVALID_RECORD, why, at_log=True, record_errors=[
                {"batch_index": i, "batch_index_error_message": why} for i in exc.indexes]) from None
        except RecordsError as exc:  # records that do not decode
            raise PartitionError(ErrorCode.INVALID_RECORD, f"Found invalid record structure: {exc}",
                                 at_log=True) from None
    guard = None
    if any(h.is_transactional for h in headers):
        guard = _verify_transaction(broker, transactional_id, topic, index, partition, headers, version,
                                    answers or {})
    return data, headers, guard


def _has_transactional_records(body) -> bool:
    """Kafka's ProduceRequest.hasTransactionalRecords: a partition's first batch (magic 2) has
    the transactional attribute bit."""
    for topic in body.topic_data:
        for p in topic.partition_data:
            records = p.records
            if records is not None and len(records) > _ATTRIBUTES_LOW and records[MAGIC_OFFSET] == 2 \
                    and records[_ATTRIBUTES_LOW] & TRANSACTIONAL_MASK:
                return True
    return False


_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the low byte of a v2 batch's big-endian int16 attributes


def _check_timestamps(broker, topic: str, data, headers) -> None:
    """As Kafka 4.0 (KIP-937): a CreateTime topic refuses records timestamped more than
    message.timestamp.after.max.ms ahead of now (one hour by default) or more than
    message.timestamp.before.max.ms behind it (no bound by default), INVALID_TIMESTAMP with one
    record error per such record. Each batch's first and max timestamps are checked (the records'
    own only when one is out of range, to name them): a batch whose header claims a smaller max
    timestamp than its records carry is not caught here."""
    if broker.topic_setting(topic, "message.timestamp.type") != "CreateTime":
        return
    now = int(time.time() * 1000)
    low = now - broker.topic_setting(topic, "message.timestamp.before.max.ms")
    high = now + broker.topic_setting(topic, "message.timestamp.after.max.ms")
    if all(low <= h.base_timestamp and h.max_timestamp <= high or h.base_timestamp == h.max_timestamp == -1
           for h in headers):
        return
    errors = [{"batch_index": i, "batch_index_error_message":
               f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. "
               f"The timestamp should be within [{low}, {high}]"}
              for i, r in enumerate(iter_records(data)) if r.timestamp != -1 and not low <= r.timestamp <= high]
    if errors or any(not low <= h.max_timestamp <= high for h in headers if h.max_timestamp != -1):
        raise PartitionError(ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to "
                             "invalid timestamp", at_log=True, record_errors=errors)


async def _await_replication(broker, waits: list, timeout_ms: int, leaders: set[int]) -> None:
    """acks=all: wait until the ISR has every appended batch (REQUEST_TIMED_OUT if not in time),
    as long as this broker leads the partition in the epoch of the append: once it lost that
    leadership (it may since have truncated the batch and copied another leader's records into
    its offsets, with a high watermark beyond them) the answer is NOT_LEADER_OR_FOLLOWER, as
    Kafka's DelayedProduce answers, never the offset of a batch that may be gone."""
    codes = await await_appends([w[0] for w in waits], timeout_ms / 1000, broker.replicas.wait_for_data)
    for (pending, min_isr, result), code in zip(waits, codes):
        if code == ErrorCode.NONE and len(pending.partition.isr) < min_isr:
            code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if code == ErrorCode.NONE:
            continue
        result.update(error_code=code, base_offset=-1)
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            topic, index = pending.key
            log.info("acks=all produce to %s-%d answered NOT_LEADER_OR_FOLLOWER: leadership of epoch %d "
                     "lost before offset %d was replicated", topic, index, pending.leader_epoch, pending.required)
            result.update(log_start_offset=-1, current_leader=_leader_hint(broker, topic, index, leaders))


async def handle(broker, request) -> dict | None:
    body = request.body
    version = request.header.api_version
    acks = body.acks
    responses = []
    waits: list = []
    leaders: set[int] = set()
    appended: list[tuple[str, int]] = []
    transactional_id = body.transactional_id if version >= 3 else None
    if (transactional_id is None and _has_transactional_records(body)) or (
            transactional_id is not None and not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                         transactional_id)):
        # as Kafka: transactional batches without a transactional id fail the whole request so
        # (found by broker/tests/test_fuzz_apis.py; was INVALID_RECORD per partition)
        if acks == 0:
            return None
        return {"responses": [{"name": t.name, "partition_responses": [
            _result(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for p in t.partition_data]}
            for t in body.topic_data], "throttle_time_ms": 0, "node_endpoints": []}
    answers = await _ask_coordinator(broker, body, version) if transactional_id else None
    for topic in body.topic_data:
        name = topic.name
        if not allowed(broker, Operation.WRITE, ResourceType.TOPIC, name):
            parts = [_result(p.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in topic.partition_data]
        elif name not in broker.topics.topics:
            # As Kafka 4: only Metadata creates a missing topic (clients ask it before producing).
            parts = [_result(p.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in topic.partition_data]
        elif acks not in (0, 1, -1):
            parts = [_result(p.index, ErrorCode.INVALID_REQUIRED_ACKS) for p in topic.partition_data]
        elif name in INTERNAL_TOPICS and request.header.client_id != ADMIN_CLIENT_ID:
            # as Kafka: the coordinators' own records are not a client's to write (found by
            # broker/tests/test_fuzz_apis.py: any client could append to __consumer_offsets)
            log.info("produce refused topic=%s: internal topics are written by their coordinators only", name)
            parts = [_result(p.index, ErrorCode.INVALID_TOPIC_EXCEPTION) for p in topic.partition_data]
        else:
            parts = []
            for p in topic.partition_data:
                try:
                    parts.append(_append(broker, name, p.index, p.records, version, acks, waits,
                                         transactional_id, answers))
                    appended.append((name, p.index))
                except PartitionError as exc:
                    log.debug("produce rejected topic=%s partition=%d error=%s: %s",
                              name, p.index, exc.code.name, exc.message)
                    result = _result(p.index, exc.code, start=exc.log_start_offset, message=exc.message)
                    result["record_errors"] = exc.record_errors
                    if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        result["current_leader"] = _leader_hint(broker, name, p.index, leaders)
                    parts.append(result)
        responses.append({"name": name, "partition_responses": parts})
    if appended:
        broker.replicas.notify_data(appended)
    if acks == 0:
        return None
    if waits:
        await _await_replication(broker, waits, body.timeout_ms, leaders)
    return {"responses": responses, "throttle_time_ms": 0, "node_endpoints": node_endpoints(broker, leaders)}


def _leader_hint(broker, topic: str, index: int, leaders: set[int]) -> dict:
    """Where the partition's leader is now (v10+, KIP-951), so clients need no metadata round trip."""
    view = broker.partition_view(topic, index)
    if view is None or view[0] < 0:
        return {"leader_id": -1, "leader_epoch": -1}
    leaders.add(view[0])
    return {"leader_id": view[0], "leader_epoch": view[1]}


def node_endpoints(broker, ids: set[int]) -> list[dict]:
    return [{"node_id": node, "host": host, "port": port, "rack": rack}
            for node, host, port, rack in broker.live_brokers() if node in ids]


# ---------------------------------------------------------------- error response (Kafka's getErrorResponse)
from strom.protocol.connection import Request  # noqa: E402

from ._error_response import PartitionLayout, finish, partition_error_response  # noqa: E402


ERROR_LAYOUT = PartitionLayout("topic_data", "name", "partition_data", "index", "responses", "name",
                               "partition_responses", "index",
                               {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1})


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> dict | None:
    """The whole answer to ``request`` failing with ``code`` (``message``, if given, in the error
    messages beside it), or None where no answer can carry it and the connection closes: the code
    on every partition; None for acks=0 (no response carries it: the connection closes)."""
    if request.body.get("acks") == 0:
        return None
    return finish(API_KEY, request, partition_error_response(ERROR_LAYOUT, request, code), code, message)

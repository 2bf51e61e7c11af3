"""Produce: validate record batches by their headers and CRCs, append them, answer with offsets.

The hot path: batches stay bytes. Each partition's records are checked batch by batch (header,
size, CRC-32C), copied once into a bytearray whose base offsets the log rewrites in place, and
written with one write. v0/v1 message sets from old clients are converted to v2 first.
"""
from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.records.batch import recompress, validate_batches
from protocol.records.compression import Compression
from protocol.records.errors import BatchTooLarge, LegacyFormat, RecordsError
from protocol.records.legacy import upconvert
from protocol.schema import ApiKey
from storage.errors import StorageError


API_KEY = ApiKey.PRODUCE
VERSIONS = (0, 11)
log = logging.getLogger("strom.produce")


class PartitionError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message


def _result(index: int, code=ErrorCode.NONE, base_offset=-1, append_time=-1, start=-1, message=None) -> dict:
    return {"index": index, "error_code": code, "base_offset": base_offset,
            "log_append_time_ms": append_time, "log_start_offset": start,
            "record_errors": [], "error_message": message}


# Topic compression.type values other than "producer": the codec batches are stored in.
TOPIC_CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


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
        if codec is not None and any(h.compression != codec for h in headers):
            records = recompress(records, headers, codec)
            headers = validate_batches(records, max_batch_size=max_bytes)
        return bytearray(records), headers
    except BatchTooLarge as exc:
        raise PartitionError(ErrorCode.MESSAGE_TOO_LARGE, str(exc)) from None
    except RecordsError as exc:
        raise PartitionError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None


def _append(broker, topic: str, index: int, records, version: int) -> dict:
    partition = broker.partition(topic, index)
    if partition is None:
        raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not records:
        return _result(index, start=partition.log.log_start_offset)
    config = partition.log.config
    codec = TOPIC_CODECS.get(config.compression_type)
    data, headers = _batches(records, version, config.max_message_bytes, codec)
    if any(h.is_transactional or h.is_control for h in headers):
        raise PartitionError(ErrorCode.INVALID_TXN_STATE, "Transactions are not supported by this broker")
    try:
        info = partition.append(data, headers)
    except StorageError as exc:
        raise PartitionError(ErrorCode[exc.error_code_name], str(exc)) from None
    return _result(index, base_offset=info.first_offset, append_time=info.log_append_time,
                   start=info.log_start_offset)


async def handle(broker, request) -> dict | None:
    body = request.body
    version = request.header.api_version
    acks = body.acks
    responses = []
    appended = False
    for topic in body.topic_data:
        name = topic.name
        if name not in broker.topics.topics and broker.auto_create(name) is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            parts = [_result(p.index, code) for p in topic.partition_data]
        elif acks not in (0, 1, -1):
            parts = [_result(p.index, ErrorCode.INVALID_REQUIRED_ACKS) for p in topic.partition_data]
        else:
            parts = []
            for p in topic.partition_data:
                try:
                    parts.append(_append(broker, name, p.index, p.records, version))
                    appended = True
                except PartitionError as exc:
                    log.debug("produce rejected topic=%s partition=%d error=%s: %s",
                              name, p.index, exc.code.name, exc.message)
                    parts.append(_result(p.index, exc.code, message=exc.message))
        responses.append({"name": name, "partition_responses": parts})
    if appended:
        broker.replicas.notify_data()
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}

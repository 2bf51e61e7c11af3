"""The record browser: a bounded slice of one partition, decoded for display."""

from __future__ import annotations

import base64
import json

import trio

from strom.protocol.records.batch import iter_records
from strom.protocol.records.errors import RecordsError
from strom.storage.errors import StorageError

from .source import ConsoleError

MAX_RECORDS = 500
MAX_BYTES = 1 << 20  # read at most this much of the log per request
SHOWN_BYTES = 4096  # of each key, value and header value


def render_bytes(data: bytes | None, fmt: str) -> dict:
    """A key, value or header value as text, JSON (pretty, if it parses) or hex; cut at SHOWN_BYTES."""
    if data is None:
        return {"null": True, "size": 0, "text": None, "truncated": False}
    data = bytes(data)
    shown, truncated = data[:SHOWN_BYTES], len(data) > SHOWN_BYTES
    if fmt == "hex":
        text = shown.hex(" ")
    else:
        text = shown.decode("utf-8", errors="replace")
        if fmt == "json" and not truncated:
            try:
                text = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        elif fmt == "base64":
            text = base64.b64encode(shown).decode()
    return {"null": False, "size": len(data), "text": text, "truncated": truncated}


async def browse(
    source,
    topic: str,
    index: int,
    *,
    offset: int | None = None,
    timestamp: int | None = None,
    to_offset: int | None = None,
    to_timestamp: int | None = None,
    limit: int = 50,
    fmt: str = "text",
) -> dict:
    """Records of ``topic``-``index`` from ``offset`` (or the first at/after ``timestamp``, or the
    latest ``limit``), up to the high watermark, ``to_offset`` (exclusive) or the last record
    stamped at or before ``to_timestamp``; at most ``limit`` records and MAX_BYTES read."""
    if source.topic(topic) is None:
        raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {topic} does not exist.", 404)
    partition = source.local_partition(topic, index)
    if partition is None:
        raise ConsoleError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{index} is not hosted by this broker.", 404)
    if fmt not in ("text", "json", "hex", "base64"):
        raise ConsoleError("INVALID_REQUEST", "format must be text, json, hex or base64", 400)
    limit = max(1, min(limit, MAX_RECORDS))
    plog = partition.log
    start, end = plog.log_start_offset, partition.high_watermark
    if timestamp is not None:
        found = await trio.to_thread.run_sync(plog.fetch_offset_by_timestamp, timestamp)
        begin = found.offset if found is not None else end
    elif offset is not None:
        begin = min(max(offset, start), end)
    else:
        begin = max(start, end - limit)
    if to_offset is not None:
        end = max(begin, min(end, to_offset))
    records, position, budget = [], begin, MAX_BYTES
    truncated = False
    past_range = False
    while position < end and len(records) < limit and budget > 0:
        try:
            region = plog.read(position, budget, max_offset=end).records
        except StorageError as exc:
            raise ConsoleError("OFFSET_OUT_OF_RANGE", str(exc), 409) from None
        if region is None:
            break
        data = await trio.to_thread.run_sync(region.read)
        budget -= len(data)
        last = position
        try:
            for rec in iter_records(data):
                last = rec.offset
                if rec.offset < begin or rec.offset >= end:
                    continue
                if to_timestamp is not None and rec.timestamp > to_timestamp:
                    past_range = True
                    break
                if len(records) >= limit:
                    truncated = True
                    break
                records.append(
                    {
                        "offset": rec.offset,
                        "timestamp": rec.timestamp,
                        "key": render_bytes(rec.key, fmt),
                        "value": render_bytes(rec.value, fmt),
                        "headers": [{"key": k, "value": render_bytes(v, fmt)} for k, v in rec.headers],
                    }
                )
        except RecordsError as exc:
            raise ConsoleError("CORRUPT_MESSAGE", f"{topic}-{index} at offset {position}: {exc}", 500) from None
        if last < position or past_range:
            break
        position = last + 1
    if budget <= 0 and position < end and len(records) < limit:
        truncated = True
    return {
        "topic": topic,
        "partition": index,
        "log_start_offset": start,
        "high_watermark": end,
        "from_offset": begin,
        "next_offset": records[-1]["offset"] + 1 if truncated and records else position,
        "format": fmt,
        "limit": limit,
        "records": records,
        "truncated": truncated,
    }

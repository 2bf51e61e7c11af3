"""`strom dump-log`: print and check log segment files directly, as kafka-dump-log does.

Reads files, never a broker. A ``.log`` segment is a sequence of log entries; each starts with
``base_offset int64 | batch_length int32`` and has its magic byte at position 16 (v2 batches:
the 61-byte header of :mod:`protocol.records.header`, CRC-32C over bytes [21, end); v0/v1
messages: CRC-32 at byte 12 over bytes [16, end)). ``.index`` files hold 8-byte entries
``relative_offset int32 | position int32`` (relative_offset = last offset of the batch at that
position); ``.timeindex`` files 12-byte entries ``timestamp int64 | relative_offset int32``;
``.txnindex`` files Kafka's 34-byte aborted-transaction entries (storage.txn_index).
File names are the segment's 20-digit base offset.

Every problem found (bad CRC, truncated or unreadable entry, offsets out of order, an index
entry that does not match the log) is reported, and the exit code is 1 if there was any.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from strom.protocol.records.batch import LOG_APPEND_TIME, MIN_BATCH_LENGTH, read_batch
from strom.protocol.records.compression import Compression
from strom.protocol.records.crc import crc32, crc32c
from strom.protocol.records.errors import RecordsError
from strom.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_SEQUENCE,
    entry_frame,
    parse_header,
)
from strom.protocol.records.legacy import iter_message_set
from strom.tools.common import emit_json

LEGACY_CRC = struct.Struct(">I")
LEGACY_CRC_OFFSET = 12
INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
TIMESTAMP_NAMES = {0: "CreateTime", 1: "LogAppendTime"}
MAX_DECOMPRESSED = 256 * 1024 * 1024


class DumpProblem(click.ClickException):
    """The files were read and some were found broken: exit code 1."""

    exit_code = 1


# --------------------------------------------------------------------------- .log


@dataclass
class BatchInfo:
    """One log entry as found in the file; ``records`` only when data printing was asked for."""

    position: int
    base_offset: int
    last_offset: int
    count: int
    size: int
    magic: int
    crc: int
    valid: bool
    compression: str = "none"
    timestamp_type: str = "CreateTime"
    create_time: int = -1
    max_timestamp: int = -1
    partition_leader_epoch: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    last_sequence: int = NO_SEQUENCE
    is_transactional: bool = False
    is_control: bool = False
    records: list[dict[str, Any]] | None = None


@dataclass
class LogScan:
    batches: list[BatchInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def batch_at(self, position: int) -> BatchInfo | None:
        return next((b for b in self.batches if b.position == position), None)

    @property
    def last_offset(self) -> int | None:
        return self.batches[-1].last_offset if self.batches else None


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def _show(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _v2_records(view: memoryview, pos: int, info: BatchInfo) -> list[dict[str, Any]]:
    header, records = read_batch(view, pos, max_size=MAX_DECOMPRESSED)
    out = []
    for r in records:
        sequence = NO_SEQUENCE if header.base_sequence == NO_SEQUENCE else header.base_sequence + r.offset_delta
        timestamp = (
            header.max_timestamp
            if header.timestamp_type == LOG_APPEND_TIME
            else header.base_timestamp + r.timestamp_delta
        )
        out.append(
            {
                "offset": header.base_offset + r.offset_delta,
                "timestamp": timestamp,
                "key_size": -1 if r.key is None else len(r.key),
                "value_size": -1 if r.value is None else len(r.value),
                "sequence": sequence,
                "key": _show(r.key),
                "value": _show(r.value),
                "headers": [[k, _show(v)] for k, v in r.headers],
            }
        )
    return out


def _v2_batch(view: memoryview, pos: int, end: int, deep: bool) -> BatchInfo:
    h = parse_header(view, pos)
    info = BatchInfo(
        position=pos,
        base_offset=h.base_offset,
        last_offset=h.last_offset,
        count=h.records_count,
        size=h.size,
        magic=h.magic,
        crc=h.crc,
        valid=crc32c(view[pos + ATTRIBUTES_OFFSET : end]) == h.crc,
        compression=_codec_name(h.compression),
        timestamp_type=TIMESTAMP_NAMES[h.timestamp_type],
        create_time=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        last_sequence=h.last_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
    )
    if deep and info.valid:
        info.records = _v2_records(view, pos, info)
    return info


def _legacy_entry(view: memoryview, pos: int, end: int, deep: bool) -> BatchInfo:
    base_offset, _ = entry_frame(view, pos)
    (crc,) = LEGACY_CRC.unpack_from(view, pos + LEGACY_CRC_OFFSET)
    info = BatchInfo(
        position=pos,
        base_offset=base_offset,
        last_offset=base_offset,
        count=1,
        size=end - pos,
        magic=view[pos + MAGIC_OFFSET],
        crc=crc,
        valid=crc32(view[pos + MAGIC_OFFSET : end]) == crc,
        compression=_codec_name(view[pos + MAGIC_OFFSET + 1] & 0x07),
    )
    if deep and info.valid:
        messages = list(iter_message_set(view[pos:end], strict=True, max_size=MAX_DECOMPRESSED))
        info.records = [
            {
                "offset": m.offset,
                "timestamp": m.timestamp,
                "key_size": -1 if m.key is None else len(m.key),
                "value_size": -1 if m.value is None else len(m.value),
                "sequence": NO_SEQUENCE,
                "key": _show(m.key),
                "value": _show(m.value),
                "headers": [],
            }
            for m in messages
        ]
        info.count = len(messages)
    return info


ENTRY_READERS: dict[int, Callable[[memoryview, int, int, bool], BatchInfo]] = {
    0: _legacy_entry,
    1: _legacy_entry,
    2: _v2_batch,
}
MIN_ENTRY_LENGTH = {0: 14, 1: 22, 2: MIN_BATCH_LENGTH}  # bytes after the 12-byte framing


def _entry_end(view: memoryview, pos: int) -> tuple[int | None, str | None]:
    """(end, None) for a well-framed entry at ``pos``, or (None, why not)."""
    n = len(view)
    if n - pos < MAGIC_OFFSET + 1:
        return None, f"truncated entry at position {pos}: only {n - pos} bytes left"
    _, length = entry_frame(view, pos)
    magic = view[pos + MAGIC_OFFSET]
    if magic not in ENTRY_READERS:
        return None, f"unknown magic {magic} at position {pos}: the rest of the file cannot be read"
    if length < MIN_ENTRY_LENGTH[magic]:
        return None, f"entry at position {pos} has an impossible length {length}"
    if pos + LOG_OVERHEAD + length > n:
        return None, f"truncated entry at position {pos}: needs {LOG_OVERHEAD + length} bytes, {n - pos} left"
    return pos + LOG_OVERHEAD + length, None


def scan_log(data: bytes | memoryview | mmap.mmap, base_offset: int = 0, deep: bool = False) -> LogScan:
    """Walk every entry of a segment, checking framing, CRCs and offset order."""
    view = memoryview(data)
    scan = LogScan()
    pos = 0
    expected = base_offset
    while pos < len(view):
        end, why = _entry_end(view, pos)
        if end is None:
            scan.problems.append(why)
            break
        info = _read_entry(view, pos, end, deep, scan)
        if info.base_offset < expected:
            scan.problems.append(
                f"batch at position {pos} starts at offset {info.base_offset}, below the expected {expected}"
            )
        if not info.valid:
            scan.problems.append(
                f"CRC mismatch in batch at position {pos} (offsets {info.base_offset}"
                f"-{info.last_offset}): stored {info.crc}"
            )
        expected = info.last_offset + 1
        scan.batches.append(info)
        pos = end
    return scan


def _read_entry(view: memoryview, pos: int, end: int, deep: bool, scan: LogScan) -> BatchInfo:
    reader = ENTRY_READERS[view[pos + MAGIC_OFFSET]]
    try:
        return reader(view, pos, end, deep)
    except RecordsError as exc:
        scan.problems.append(f"records of the batch at position {pos} cannot be decoded: {exc}")
        return reader(view, pos, end, False)


# --------------------------------------------------------------------------- indexes


@dataclass
class IndexScan:
    entries: list[dict[str, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _entries(data: bytes, entry: struct.Struct, scan: IndexScan) -> list[tuple[int, int]]:
    whole = len(data) - len(data) % entry.size
    if whole != len(data):
        scan.problems.append(
            f"file size {len(data)} is not a multiple of the {entry.size}-byte entry (torn last entry)"
        )
    return list(entry.iter_unpack(data[:whole]))


def scan_offset_index(data: bytes, base_offset: int, log: LogScan | None) -> IndexScan:
    """Entries of a ``.index`` file; each must increase and, given the log, point at a batch ending there."""
    scan = IndexScan()
    previous = (-1, -1)
    for i, (relative, position) in enumerate(_entries(data, INDEX_ENTRY, scan)):
        offset = base_offset + relative
        scan.entries.append({"offset": offset, "position": position})
        if relative <= previous[0] or position <= previous[1]:
            scan.problems.append(f"entry {i} (offset {offset}, position {position}) does not increase")
        previous = (relative, position)
        if log is not None:
            _check_index_entry(log, i, offset, position, scan)
    return scan


def _check_index_entry(log: LogScan, i: int, offset: int, position: int, scan: IndexScan) -> None:
    batch = log.batch_at(position)
    if batch is None:
        scan.problems.append(f"entry {i}: position {position} is not the start of a batch in the log")
    elif batch.last_offset != offset:
        scan.problems.append(
            f"entry {i}: offset {offset} but the batch at position {position} ends at offset {batch.last_offset}"
        )


def scan_time_index(data: bytes, base_offset: int, log: LogScan | None) -> IndexScan:
    """Entries of a ``.timeindex``: timestamps increase, offsets never decrease, and lie in the log."""
    scan = IndexScan()
    previous = (None, -1)
    for i, (timestamp, relative) in enumerate(_entries(data, TIME_INDEX_ENTRY, scan)):
        offset = base_offset + relative
        scan.entries.append({"timestamp": timestamp, "offset": offset})
        if (previous[0] is not None and timestamp <= previous[0]) or relative < previous[1]:
            scan.problems.append(f"entry {i} (timestamp {timestamp}, offset {offset}) is out of order")
        previous = (timestamp, relative)
        last = log.last_offset if log is not None else None
        if log is not None and (last is None or offset > last):
            scan.problems.append(f"entry {i}: offset {offset} is beyond the log's last offset {last}")
    return scan


# --------------------------------------------------------------------------- files and output


_TXN_ENTRY = struct.Struct(">hqqqq")


def scan_txn_index(data: bytes, base_offset: int, log: LogScan | None) -> IndexScan:
    """Entries of a ``.txnindex`` (storage.txn_index: version, producer id, first offset, last
    offset = the ABORT marker's, last stable offset); each marker must lie in the segment."""
    scan = IndexScan()
    end = log.last_offset if log is not None else None
    for version, pid, first, last, lso in _entries(data, _TXN_ENTRY, scan):
        scan.entries.append(
            {"version": version, "producerId": pid, "firstOffset": first, "lastOffset": last, "lastStableOffset": lso}
        )
        if version != 0:
            scan.problems.append(f"entry of producer {pid}: unknown version {version}")
        elif first > last:
            scan.problems.append(f"entry of producer {pid}: first offset {first} after its marker {last}")
        elif last < base_offset or (end is not None and last > end):
            scan.problems.append(f"entry of producer {pid}: marker offset {last} is outside the segment")
    return scan


def base_offset_of(path: Path) -> int:
    stem = path.name.split(".")[0]
    if not stem.isdigit():
        raise click.BadParameter(
            f"{path.name}: segment files are named after their base offset (e.g. 00000000000000000000.log)"
        )
    return int(stem)


def _read_log(path: Path, deep: bool) -> LogScan:
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return LogScan()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                return scan_log(view, base_offset_of(path), deep)
            finally:
                view.release()


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _batch_line(b: BatchInfo) -> str:
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.count} "
        f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
        f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
        f"isTransactional: {_bool(b.is_transactional)} isControl: {_bool(b.is_control)} "
        f"position: {b.position} {b.timestamp_type}: {b.create_time} maxTimestamp: {b.max_timestamp} "
        f"size: {b.size} magic: {b.magic} compresscodec: {b.compression} crc: {b.crc} isvalid: {_bool(b.valid)}"
    )


def _record_line(r: dict[str, Any]) -> str:
    headers = ",".join(f"{k}:{v}" for k, v in r["headers"])
    return (
        f"| offset: {r['offset']} CreateTime: {r['timestamp']} keySize: {r['key_size']} "
        f"valueSize: {r['value_size']} sequence: {r['sequence']} headers: [{headers}] "
        f"key: {r['key']} payload: {r['value']}"
    )


def _print_log(scan: LogScan) -> None:
    for b in scan.batches:
        click.echo(_batch_line(b))
        for r in b.records or []:
            click.echo(_record_line(r))


def _print_index(scan: IndexScan) -> None:
    for e in scan.entries:
        click.echo(" ".join(f"{k}: {v}" for k, v in e.items()))


def _dump_log_file(path: Path, deep: bool, show_records: bool, as_json: bool) -> list[str]:
    scan = _read_log(path, deep)
    for batch in scan.batches if not show_records else []:
        batch.records = None
    if as_json:
        emit_json({"file": str(path), "batches": [vars(b) for b in scan.batches], "problems": scan.problems})
    else:
        _print_log(scan)
    return scan.problems


def _sibling_log(path: Path) -> LogScan | None:
    log_path = path.with_suffix(".log")
    return _read_log(log_path, False) if log_path.exists() else None


def _dump_index_file(
    path: Path, scanner: Callable[[bytes, int, LogScan | None], IndexScan], as_json: bool
) -> list[str]:
    scan = scanner(path.read_bytes(), base_offset_of(path), _sibling_log(path))
    if as_json:
        emit_json({"file": str(path), "entries": scan.entries, "problems": scan.problems})
    else:
        _print_index(scan)
    return scan.problems


DUMPERS: dict[str, Callable[[Path, bool, bool, bool], list[str]]] = {
    ".log": _dump_log_file,
    ".index": lambda p, deep, show, as_json: _dump_index_file(p, scan_offset_index, as_json),
    ".timeindex": lambda p, deep, show, as_json: _dump_index_file(p, scan_time_index, as_json),
    ".txnindex": lambda p, deep, show, as_json: _dump_index_file(p, scan_txn_index, as_json),
}


@click.command("dump-log")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--print-data-log", "-d", "print_data", is_flag=True, help="Print every record too (key, value, headers)."
)
@click.option("--deep-iteration", is_flag=True, help="Decode every record (checks them) without necessarily printing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file.")
def dump_log(files: tuple[Path, ...], print_data: bool, deep_iteration: bool, as_json: bool) -> None:
    """Print and check .log segments, .index, .timeindex and .txnindex files (as kafka-dump-log).

    Exits with 1 if any batch is corrupt (bad CRC, truncated, undecodable) or an index disagrees.
    """
    total: list[str] = []
    for path in files:
        dumper = DUMPERS.get(path.suffix)
        if dumper is None:
            raise click.BadParameter(
                f"{path.name}: expected a .log, .index, .timeindex or .txnindex file", param_hint="FILES"
            )
        if not as_json:
            click.echo(f"Dumping {path}")
        problems = dumper(path, print_data or deep_iteration, print_data, as_json)
        for problem in problems:
            click.echo(f"{path}: {problem}", err=True)
        total += problems
    if total:
        raise DumpProblem(f"found {len(total)} problem(s) in {len(files)} file(s)")

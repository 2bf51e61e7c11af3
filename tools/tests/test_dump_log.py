"""`strom dump-log` on segments a live broker wrote, and on hand-built damaged files."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from click.testing import CliRunner

from strom.protocol.records.batch import Record, build_batch
from strom.tools.dump_log import INDEX_ENTRY, dump_log, scan_log, scan_offset_index, scan_time_index, scan_txn_index
from strom.tools.tests.helpers import Strom

SEGMENT = "00000000000000000000"


def _dump(*args: str):
    return CliRunner().invoke(dump_log, list(args))


def _written_segment(strom: Strom, topic: str) -> Path:
    strom.ok("produce", "--topic", topic, "--key-separator", ":", "--header", "h=1", input="k1:v1\nk2:v2\n")
    strom.ok("produce", "--topic", topic, input="third\n")
    return strom.partition_dir(topic) / f"{SEGMENT}.log"


def test_prints_the_batches_and_records_of_a_broker_segment(strom: Strom, topic: str) -> None:
    segment = _written_segment(strom, topic)
    result = _dump("--print-data-log", str(segment))
    assert result.exit_code == 0, result.output
    batches = [line for line in result.stdout.splitlines() if line.startswith("baseOffset:")]
    assert len(batches) == 2
    assert batches[0].startswith("baseOffset: 0 lastOffset: 1 count: 2 ")
    assert batches[1].startswith("baseOffset: 2 lastOffset: 2 count: 1 ")
    assert all("isvalid: true" in b and "magic: 2" in b for b in batches)
    assert "| offset: 1 " in result.stdout and "headers: [h:1] key: k2 payload: v2" in result.stdout

    doc = json.loads(_dump("--json", str(segment)).stdout)
    assert [b["position"] for b in doc["batches"]] == [0, doc["batches"][0]["size"]]
    assert doc["problems"] == []


def test_broker_indexes_agree_with_the_log(strom: Strom, topic: str) -> None:
    segment = _written_segment(strom, topic)
    index, timeindex = segment.with_suffix(".index"), segment.with_suffix(".timeindex")
    result = _dump("--json", str(index), str(timeindex))
    assert result.exit_code == 0, result.output
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert docs[0]["entries"] and docs[0]["problems"] == []
    assert docs[0]["entries"][-1]["offset"] == 2  # the last batch (offset 2) is indexed
    assert docs[1]["problems"] == []


def test_flipped_byte_is_reported_as_invalid_crc(strom: Strom, topic: str, tmp_path: Path) -> None:
    segment = _written_segment(strom, topic)
    copy = tmp_path / segment.name
    shutil.copy(segment, copy)
    data = bytearray(copy.read_bytes())
    first_size = 12 + struct.unpack_from(">i", data, 8)[0]
    data[first_size + 65] ^= 0x01  # inside the second batch's records
    copy.write_bytes(bytes(data))

    result = _dump(str(copy))
    assert result.exit_code == 1
    lines = [line for line in result.stdout.splitlines() if line.startswith("baseOffset:")]
    assert "isvalid: true" in lines[0] and "isvalid: false" in lines[1]
    assert f"CRC mismatch in batch at position {first_size}" in result.stderr


def _two_batches() -> bytes:
    first = build_batch([Record(0, 0, b"k", b"a"), Record(1, 0, None, b"b")], base_offset=0, base_timestamp=1000)
    second = build_batch([Record(0, 5, None, b"c")], base_offset=2, base_timestamp=2000)
    return first + second


def test_truncated_tail_is_a_problem() -> None:
    data = _two_batches()
    scan = scan_log(data[:-3])
    assert [b.base_offset for b in scan.batches] == [0]
    assert scan.problems and "truncated" in scan.problems[0]


def test_offsets_going_backwards_are_a_problem() -> None:
    batch = build_batch([Record(0, 0, None, b"x")], base_offset=0)
    assert "below the expected" in scan_log(batch + batch).problems[0]


def test_index_entry_must_point_at_a_batch_ending_at_its_offset() -> None:
    data = _two_batches()
    log = scan_log(data)
    second_pos = log.batches[1].position
    good = INDEX_ENTRY.pack(1, 0) + INDEX_ENTRY.pack(2, second_pos)
    assert scan_offset_index(good, 0, log).problems == []
    wrong_offset = INDEX_ENTRY.pack(0, 0)
    assert "ends at offset 1" in scan_offset_index(wrong_offset, 0, log).problems[0]
    wrong_position = INDEX_ENTRY.pack(1, 7)
    assert "not the start of a batch" in scan_offset_index(wrong_position, 0, log).problems[0]
    assert "torn" in scan_offset_index(good + b"\x00", 0, log).problems[0]


def test_time_index_must_increase_and_stay_inside_the_log() -> None:
    log = scan_log(_two_batches())
    entry = struct.Struct(">qi")
    assert scan_time_index(entry.pack(1000, 1) + entry.pack(2005, 2), 0, log).problems == []
    assert "out of order" in scan_time_index(entry.pack(2000, 1) + entry.pack(1000, 2), 0, log).problems[0]
    assert "beyond" in scan_time_index(entry.pack(1000, 9), 0, log).problems[0]


def test_txn_index_entries_are_printed_and_checked(tmp_path: Path) -> None:
    entry = struct.Struct(">hqqqq")
    log = scan_log(_two_batches())
    assert scan_txn_index(entry.pack(0, 7, 0, 1, 2), 0, log).entries == [
        {"version": 0, "producerId": 7, "firstOffset": 0, "lastOffset": 1, "lastStableOffset": 2}
    ]
    assert scan_txn_index(entry.pack(0, 7, 0, 1, 2), 0, log).problems == []
    assert "outside" in scan_txn_index(entry.pack(0, 7, 0, 50, 51), 0, log).problems[0]
    assert "unknown version" in scan_txn_index(entry.pack(3, 7, 0, 1, 2), 0, log).problems[0]
    assert "torn" in scan_txn_index(entry.pack(0, 7, 0, 1, 2) + b"\x00", 0, log).problems[0]
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(entry.pack(0, 7, 0, 1, 2))
    result = _dump(str(path))
    assert result.exit_code == 0 and "producerId: 7 firstOffset: 0 lastOffset: 1" in result.output


def test_unknown_file_kind_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n")
    assert _dump(str(path)).exit_code == 2

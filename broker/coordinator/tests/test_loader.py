"""The coordinator loader and the internal topics (`__consumer_offsets`, `__transaction_state`): a
record Strom cannot read raises its topic's error and nothing else; replaying a partition goes over
every batch in order, in reads of a bounded size, and stops (with a log line) at an unreadable
batch, keeping what came before it."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.broker.coordinator import loader
from strom.broker.coordinator.group import records as group_records
from strom.broker.coordinator.loader import replay_partition
from strom.broker.coordinator.txn import records as txn_records
from strom.protocol.internal_records import build_records_batch
from strom.protocol.records.batch import iter_records

DECODERS = [
    (group_records.decode_key, group_records.GroupRecordError),
    (group_records.decode_offset_value, group_records.GroupRecordError),
    (group_records.decode_group_value, group_records.GroupRecordError),
    (txn_records.decode_key, txn_records.TxnRecordError),
    (txn_records.decode_value, txn_records.TxnRecordError),
]


@pytest.mark.parametrize("data", [None, b"", b"\x00", b"\x00\x01\x00\x05ab", b"\x00\x09\x00\x00", b"\x7f\xff"])
@pytest.mark.parametrize("decode, error", DECODERS, ids=lambda x: getattr(x, "__qualname__", ""))
def test_malformed_records_raise_a_clear_error(decode, error, data):
    with pytest.raises(error):
        decode(data)


@settings(deadline=None)  # no per-example deadline: CI runs tests in parallel on 2 cores
@given(st.binary(max_size=64))
def test_garbage_never_escapes_as_another_exception(data):
    for decode, error in DECODERS:
        try:
            decode(data)
        except error:
            pass


class _Log:
    """Whole batches from the one holding ``offset``, none reaching ``max_offset``, the first
    whatever its size: as storage.Log.read gives them."""

    def __init__(self, batches: list[tuple[int, bytes]], log_start_offset: int = 0):
        self.batches = batches  # (last offset, batch)
        self.log_start_offset = log_start_offset
        self.log_end_offset = 0  # set by each replay

    def read(self, offset: int, max_bytes: int, max_offset: int):
        out = b""
        for last, batch in self.batches:
            if offset <= last < max_offset and (not out or len(out) + len(batch) <= max_bytes):
                out += batch
        return SimpleNamespace(records=SimpleNamespace(read=lambda: out) if out else None)


def _batches(sizes: list[int]) -> list[tuple[int, bytes]]:
    out, base = [], 0
    for size in sizes:
        data = build_records_batch([(b"k%d" % (base + i), b"v") for i in range(size)], 1000)
        data[0:8] = base.to_bytes(8, "big")  # base offset (not covered by the CRC)
        base += size
        out.append((base - 1, bytes(data)))
    return out


def _replay(plog: _Log, end: int):
    seen: list[bytes | None] = []
    plog.log_end_offset = end
    done = replay_partition(
        plog, "__x", 3, lambda h, b: seen.extend(r.key for r in iter_records(b)), logging.getLogger("test")
    )
    return done, seen


def test_every_batch_up_to_the_log_end_in_small_reads(monkeypatch):
    monkeypatch.setattr(loader, "LOAD_READ_BYTES", 1)  # one batch a read
    done, seen = _replay(_Log(_batches([2, 1, 3])), end=3)
    assert done and seen == [b"k0", b"k1", b"k2"]  # the batch at offset 3 is past the end


def test_the_replay_starts_at_the_log_start():
    done, seen = _replay(_Log(_batches([2, 2]), log_start_offset=2), end=4)
    assert done and seen == [b"k2", b"k3"]


def test_an_unreadable_batch_ends_the_replay_and_says_where(caplog):
    batches = _batches([1, 1, 1])
    corrupt = bytearray(batches[1][1])
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    batches[1] = (batches[1][0], bytes(corrupt))
    with caplog.at_level(logging.ERROR):
        done, seen = _replay(_Log(batches), end=3)
    assert not done and seen == [b"k0"]
    assert "__x-3: unreadable batch at offset 0" in caplog.text

"""Transactions in the log: open transactions, the last stable offset, `.txnindex`, recovery."""

import struct

import pytest

from strom.protocol.records.control import build_marker
from strom.protocol.records.header import TRANSACTIONAL_MASK
from strom.storage.config import LogConfig
from strom.storage.errors import InvalidProducerEpoch, InvalidTxnState
from strom.storage.tests.batches import append, make_batch
from strom.storage.txn_index import AbortedTxn, read_index

A, B = 1000, 2000


def txn(pid, seq, records=2, epoch=0):
    return make_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes=TRANSACTIONAL_MASK)


def marker(pid, commit, epoch=0, coordinator_epoch=3):
    return build_marker(pid, epoch, commit, coordinator_epoch, 5_000)


def _hw(log):
    log.high_watermark = log.log_end_offset
    return log


def test_open_transaction_holds_the_lso_until_its_marker(open_log):
    log = open_log()
    append(log, make_batch(2))  # 0-1 plain
    append(log, txn(A, 0))  # 2-3 A opens at 2
    append(log, txn(B, 0))  # 4-5 B opens at 4
    _hw(log)
    assert log.last_stable_offset == 2
    append(log, marker(A, commit=True))  # 6 commits A
    _hw(log)
    assert log.last_stable_offset == 4
    append(log, marker(B, commit=False))  # 7 aborts B
    _hw(log)
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.aborted_transactions(0, 8) == [AbortedTxn(B, 4, 7, 8)]
    assert log.aborted_transactions(8, 100) == []  # its marker is below the fetch offset
    assert log.aborted_transactions(0, 4) == []  # it starts at or after the upper bound
    # DescribeProducers' view
    a = log.producer_state.producers[A]
    assert (a.current_txn_first_offset, a.coordinator_epoch) == (-1, 3)


def test_lso_waits_for_the_high_watermark_to_pass_the_marker(open_log):
    log = open_log()
    append(log, txn(A, 0))
    append(log, marker(A, commit=True))
    log.high_watermark = 1  # a follower has not fetched the marker yet
    assert log.last_stable_offset == 0
    log.high_watermark = 3
    assert log.last_stable_offset == 3


def test_txnindex_file_has_kafka_layout(open_log):
    log = open_log()
    append(log, txn(A, 0, records=3))
    append(log, marker(A, commit=False))
    raw = (log.dir / f"{0:020d}.txnindex").read_bytes()
    assert raw == struct.pack(">hqqqq", 0, A, 0, 3, 4)
    assert read_index(log.dir / f"{0:020d}.txnindex") == [AbortedTxn(A, 0, 3, 4)]
    append(log, txn(B, 0))
    append(log, marker(B, commit=True))  # commits need no entry
    assert len((log.dir / f"{0:020d}.txnindex").read_bytes()) == 34


def test_a_non_transactional_batch_while_a_transaction_is_open_is_refused(open_log):
    log = open_log()
    append(log, txn(A, 0))
    with pytest.raises(InvalidTxnState):
        append(log, make_batch(1, producer_id=A, producer_epoch=0, base_sequence=2))
    append(log, marker(A, commit=True, epoch=1))  # the coordinator bumped the epoch (fencing)
    with pytest.raises(InvalidProducerEpoch):
        append(log, marker(A, commit=False, epoch=0))
    with pytest.raises(InvalidProducerEpoch):
        append(log, txn(A, 2, epoch=0))


def test_open_transaction_and_aborts_survive_a_clean_restart(open_log):
    config = LogConfig(segment_bytes=400)
    log = open_log(config)
    append(log, txn(A, 0))
    append(log, marker(A, commit=False))
    for seq in range(0, 8, 2):
        append(log, txn(B, seq))  # rolls segments; B stays open from offset 3
    log.close()
    again = _hw(open_log(config, clean_shutdown=True))
    assert again.producer_state.ongoing == {B: 3}
    assert again.last_stable_offset == 3
    assert again.aborted_transactions(0, 100) == [AbortedTxn(A, 0, 2, 3)]


@pytest.mark.parametrize("recovery_point", [0, 5])
def test_unclean_restart_rebuilds_open_transactions_and_the_index(open_log, recovery_point):
    config = LogConfig(segment_bytes=400)
    log = open_log(config)
    append(log, txn(A, 0))  # 0-1
    append(log, txn(B, 0))  # 2-3
    append(log, marker(A, commit=False))  # 4
    append(log, make_batch(3))  # 5-7
    append(log, marker(B, commit=False))  # 8
    append(log, txn(A, 2, records=1))  # 9, open
    (log.dir / f"{0:020d}.txnindex").write_bytes(b"\x00\x00torn")  # a torn index file
    # no close: a crash; no snapshot covers the tail
    again = _hw(open_log(config, recovery_point=recovery_point))
    assert again.producer_state.ongoing == {A: 9}
    assert again.last_stable_offset == 9
    assert again.aborted_transactions(0, 100) == [AbortedTxn(A, 0, 4, 2), AbortedTxn(B, 2, 8, 9)]


def test_truncation_forgets_aborts_above_and_reopens_transactions(open_log):
    log = open_log()
    append(log, txn(A, 0))  # 0-1
    append(log, marker(A, commit=False))  # 2
    append(log, txn(B, 0))  # 3-4
    append(log, marker(B, commit=False))  # 5
    log.truncate_to(5)
    assert log.aborted_transactions(0, 100) == [AbortedTxn(A, 0, 2, 3)]
    assert log.producer_state.ongoing == {B: 3}
    assert read_index(log.dir / f"{0:020d}.txnindex") == [AbortedTxn(A, 0, 2, 3)]
    log.truncate_fully_and_start_at(10)
    assert log.aborted_transactions(0, 100) == [] and not log.producer_state.ongoing
    assert not list(log.dir.glob("*.txnindex"))


def test_compaction_removes_aborted_data_keeps_markers_and_stops_at_the_lso(open_log):
    from strom.protocol.records.batch import Record, build_batch, iter_batches, iter_records, validate_batches

    def put(pairs, pid=-1, seq=-1, txn=False):
        data = build_batch(
            [Record(i, 0, k, v) for i, (k, v) in enumerate(pairs)],
            base_timestamp=1_000,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            is_transactional=txn,
        )
        log.append_as_leader(data, validate_batches(data), 0)

    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=100_000, file_delete_delay_ms=0))
    put([(b"k", b"committed-1")])  # 0
    put([(b"k", b"aborted"), (b"j", b"aborted")], A, 0, txn=True)  # 1-2
    append(log, marker(A, commit=False))  # 3
    put([(b"j", b"committed-2")], B, 0, txn=True)  # 4
    append(log, marker(B, commit=True))  # 5
    log.roll()
    put([(b"k", b"open")], A, 2, txn=True)  # 6: open: the LSO
    put([(b"k", b"open")], B, 1)  # a later duplicate key, still open
    log.roll()
    put([(b"x", b"tail")])  # 8 (active segment)
    _hw(log)
    assert log.last_stable_offset == 6
    result = log.compact(now_ms=10_000_000)
    assert result is not None and result.records_removed == 2
    found = []
    offset = 0
    while offset < log.log_end_offset:
        raw = log.read(offset, 1 << 20).records.read()
        for pos, h in iter_batches(raw):
            values = None if h.is_control else [r.value for r in iter_records(raw[pos : pos + h.size])]
            found.append((h.base_offset, h.is_control, values))
            offset = h.last_offset + 1
    # the aborted records are gone (not shadowing k=committed-1), markers stay, the open
    # transaction (beyond the LSO) was not touched
    assert found == [
        (0, False, [b"committed-1"]),
        (3, True, None),
        (4, False, [b"committed-2"]),
        (5, True, None),
        (6, False, [b"open"]),
        (7, False, [b"open"]),
        (8, False, [b"tail"]),
    ]
    # the swapped-in segment carries the aborted transaction's index entry across a restart
    aborted = log.aborted_transactions(0, 100)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in aborted] == [(A, 1, 3)]
    log.close()
    again = _hw(open_log(LogConfig(cleanup_policy="compact", segment_bytes=100_000), clean_shutdown=True))
    assert again.aborted_transactions(0, 100) == aborted
    assert again.last_stable_offset == 6


def test_retention_takes_a_segments_txnindex_with_it(open_log, clock):
    log = open_log(LogConfig(segment_bytes=200, retention_ms=1000, file_delete_delay_ms=0))
    append(log, txn(A, 0))
    append(log, marker(A, commit=False))
    log.roll()
    append(log, make_batch(2, timestamp=clock.now))
    _hw(log)
    assert (log.dir / f"{0:020d}.txnindex").exists()
    clock.now += 10_000_000
    assert log.delete_old_segments() == 1
    assert not (log.dir / f"{0:020d}.txnindex").exists()
    assert log.aborted_transactions(0, 100) == []


def test_completed_transactions_above_the_high_watermark_stay_bounded(open_log):
    log = open_log()  # a follower: its high watermark trails, nobody asks it for an LSO
    for n in range(50):
        append(log, txn(A, 2 * n))
        append(log, marker(A, commit=True))
        log.high_watermark = log.log_end_offset - 1
    assert len(log.txn.unreplicated) <= 2


def test_an_index_write_that_fails_is_redone_at_close(open_log, monkeypatch):
    from strom.storage import txn_index

    log = open_log()
    append(log, txn(A, 0))
    real = txn_index.append_entry

    def broken(path, entry):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(txn_index, "append_entry", broken)
    append(log, marker(A, commit=False))  # the marker is written; the index file is not
    assert log.log_end_offset == 3 and log.aborted_transactions(0, 10) == [AbortedTxn(A, 0, 2, 3)]
    monkeypatch.setattr(txn_index, "append_entry", real)
    log.close()
    assert read_index(log.dir / f"{0:020d}.txnindex") == [AbortedTxn(A, 0, 2, 3)]


def _append_verified(log, batch, guard):
    from strom.storage.tests.batches import headers_of

    return log.append_as_leader(batch, headers_of(batch), 0, verification_guard=guard)


def test_a_verification_guard_admits_the_opening_batch_until_a_marker_drops_it(open_log):
    """KIP-890 part 1: the guard made when verification starts must still be there when the
    verified batch is appended; a marker of the producer written meanwhile drops it."""
    from strom.storage.producer_state import NO_VERIFICATION

    log = open_log()
    stale = log.verification_guard(A)
    append(log, marker(A, commit=False))  # 0: the transaction ended meanwhile
    with pytest.raises(InvalidTxnState, match="not part of an ongoing transaction"):
        _append_verified(log, txn(A, 0), stale)
    with pytest.raises(InvalidTxnState):  # a verification that never started
        _append_verified(log, txn(A, 0), NO_VERIFICATION)
    assert log.log_end_offset == 1 and not log.producer_state.ongoing
    guard = log.verification_guard(A)
    assert guard is not stale and log.verification_guard(A) is guard  # concurrent verifications share it
    with pytest.raises(InvalidTxnState):  # only the current guard counts
        _append_verified(log, txn(A, 0), stale)
    assert _append_verified(log, txn(A, 0), guard).first_offset == 1
    assert log.producer_state.ongoing == {A: 1} and not log.producer_state.verifications
    # the transaction is open: later batches need no verification
    assert _append_verified(log, txn(A, 2), NO_VERIFICATION).first_offset == 3
    append(log, txn(B, 0))  # a caller that does not verify (None)
    assert log.producer_state.ongoing == {A: 1, B: 5}

"""Idempotent producers: duplicates, sequence and epoch checks, state after restarts."""

import pytest

from strom.storage.config import LogConfig
from strom.storage.errors import InvalidProducerEpoch, OutOfOrderSequence
from strom.storage.tests.batches import append, make_batch

PID = 42


def idem(seq, records=2, epoch=0, pid=PID):
    return make_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_returns_original_offsets_and_writes_nothing(open_log):
    log = open_log()
    first = append(log, idem(0))
    append(log, make_batch(3))
    size = log.size_in_bytes
    again = append(log, idem(0))
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.size_in_bytes == size and log.log_end_offset == 5


def test_out_of_order_sequence_raises_and_appends_nothing(open_log):
    log = open_log()
    append(log, idem(0))
    with pytest.raises(OutOfOrderSequence) as exc:
        append(log, idem(5))
    assert exc.value.error_code_name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    with pytest.raises(OutOfOrderSequence):  # second batch of the request is out of order
        append(log, idem(2), idem(9))
    assert log.log_end_offset == 2
    assert append(log, idem(2), idem(4)).last_offset == 5


def test_epoch_rules(open_log):
    log = open_log()
    append(log, idem(0, epoch=1))
    with pytest.raises(InvalidProducerEpoch):
        append(log, idem(2, epoch=0))
    with pytest.raises(OutOfOrderSequence):
        append(log, idem(2, epoch=2))
    assert not append(log, idem(0, epoch=2)).duplicate


def test_unknown_producer_accepts_any_first_sequence(open_log):
    log = open_log()
    assert append(log, idem(17)).first_offset == 0
    assert append(log, idem(19)).first_offset == 2


def test_sequence_wraps_at_int32_max(open_log):
    log = open_log()
    append(log, idem(2**31 - 2, records=1))
    append(log, idem(2**31 - 1, records=1))
    assert append(log, idem(0, records=1)).first_offset == 2


def test_state_restored_after_clean_close(open_log):
    log = open_log(LogConfig(segment_bytes=300))
    infos = [append(log, idem(seq)) for seq in range(0, 12, 2)]
    log.close()
    again = open_log(LogConfig(segment_bytes=300), clean_shutdown=True)
    dup = append(again, idem(6))  # an older batch still among the last five
    assert dup.duplicate and dup.first_offset == infos[3].first_offset
    with pytest.raises(OutOfOrderSequence):
        append(again, idem(20))
    assert append(again, idem(12)).first_offset == 12


def test_state_rebuilt_by_replay_after_unclean_stop(open_log, tmp_path):
    log = open_log(LogConfig(segment_bytes=300))
    for seq in range(0, 12, 2):
        append(log, idem(seq))
    # No close: simulate a crash; reopen from recovery point 0 with no snapshot of the tail.
    again = open_log(LogConfig(segment_bytes=300), recovery_point=0)
    assert again.log_end_offset == 12
    assert append(again, idem(10)).duplicate
    with pytest.raises(OutOfOrderSequence):
        append(again, idem(14))
    assert append(again, idem(12)).first_offset == 12


def test_snapshot_file_uses_kafka_layout(open_log):
    log = open_log()
    append(log, idem(0))
    log.close()
    data = (log.dir / f"{2:020d}.snapshot").read_bytes()
    assert data[:2] == b"\x00\x01"  # version 1
    assert int.from_bytes(data[6:10], "big") == 1  # one entry
    assert int.from_bytes(data[10:18], "big") == PID

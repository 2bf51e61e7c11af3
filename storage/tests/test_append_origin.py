"""Append origins: a coordinator's own appends are never duplicates; epochs are still fenced."""

import pytest

from strom.protocol.internal_records import build_records_batch
from strom.protocol.records.control import build_marker
from strom.storage.errors import InvalidProducerEpoch, TransactionCoordinatorFenced
from strom.storage.producer_state import AppendOrigin
from strom.storage.tests.batches import headers_of, make_batch

PID = 7
COORDINATOR = AppendOrigin.COORDINATOR


def _append(log, data, origin=AppendOrigin.CLIENT):
    data = bytearray(data)
    return log.append_as_leader(data, headers_of(bytes(data)), 0, origin)


def _offset_commit(epoch=0, value=b"v"):
    """A transactional offset commit as the group coordinator writes it (no sequence)."""
    return build_records_batch([(b"k", value)], 1_000, (PID, epoch))


def _marker(epoch=0, commit=True, coordinator_epoch=0):
    return build_marker(PID, epoch, commit, coordinator_epoch, 1_000)


def test_every_transactional_commit_of_one_epoch_is_written(open_log):
    log = open_log()
    for n in range(3):
        info = _append(log, _offset_commit(value=b"%d" % n), COORDINATOR)
        assert not info.duplicate and info.first_offset == 2 * n
        assert not _append(log, _marker(), COORDINATOR).duplicate
    assert log.log_end_offset == 6
    log.close()
    assert open_log().log_end_offset == 6


def test_a_client_append_still_finds_its_duplicates(open_log):
    log = open_log()
    batch = make_batch(2, producer_id=PID, producer_epoch=0, base_sequence=0)
    first = _append(log, batch)
    again = _append(log, batch)
    assert again.duplicate and again.first_offset == first.first_offset and log.log_end_offset == 2
    # the same batch from a coordinator is not a repeat of the client's
    assert not _append(log, batch, COORDINATOR).duplicate and log.log_end_offset == 4


def test_a_coordinator_append_of_an_older_epoch_is_fenced(open_log):
    log = open_log()
    _append(log, _offset_commit(epoch=3), COORDINATOR)
    _append(log, _marker(epoch=3), COORDINATOR)
    with pytest.raises(InvalidProducerEpoch):
        _append(log, _offset_commit(epoch=2), COORDINATOR)
    with pytest.raises(InvalidProducerEpoch):
        _append(log, _marker(epoch=2), COORDINATOR)
    assert log.log_end_offset == 2
    assert not _append(log, _offset_commit(epoch=4), COORDINATOR).duplicate


def test_a_marker_of_a_deposed_coordinator_is_fenced(open_log):
    """A coordinator that lost its partition may still have a marker in flight (a stalled link
    delivers it late). When it lands after the next coordinator opened another transaction of the
    same producer epoch (transaction version 1 keeps the epoch), an abort would end that
    transaction here only: its records hidden in this partition, committed in the others."""
    log = open_log()
    _append(log, _marker(commit=False, coordinator_epoch=4), COORDINATOR)  # the new coordinator's abort
    txn = make_batch(2, producer_id=PID, producer_epoch=0, base_sequence=0, attributes=0x10)  # transactional
    _append(log, txn)  # the next transaction, opened here
    assert log.producer_state.first_unstable_offset() == 1
    with pytest.raises(TransactionCoordinatorFenced):
        _append(log, _marker(commit=False, coordinator_epoch=3), COORDINATOR)  # the old one's, late
    assert log.log_end_offset == 3 and log.aborted_transactions(0, 3) == []
    assert log.producer_state.first_unstable_offset() == 1  # still open
    # the current coordinator's marker, and a later one's, are written
    _append(log, _marker(commit=True, coordinator_epoch=4), COORDINATOR)
    assert log.log_end_offset == 4
    _append(log, _marker(commit=True, coordinator_epoch=5), COORDINATOR)
    log.close()
    reopened = open_log()  # the coordinator epoch survives a restart (snapshot or replay)
    with pytest.raises(TransactionCoordinatorFenced):
        _append(reopened, _marker(commit=False, coordinator_epoch=4), COORDINATOR)

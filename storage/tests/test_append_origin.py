"""Append origins: a coordinator's own appends are never duplicates; epochs are still fenced."""

import pytest

from strom.protocol.internal_records import build_records_batch
from strom.protocol.records.control import build_marker
from strom.storage.errors import InvalidProducerEpoch
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


def _marker(epoch=0, commit=True):
    return build_marker(PID, epoch, commit, 0, 1_000)


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

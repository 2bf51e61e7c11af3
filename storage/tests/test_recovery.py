"""Crash tests: damage the files of a log that was never closed, reopen, check what survives."""

import os

import pytest

from strom.storage.config import LogConfig
from strom.storage.log import Log
from strom.storage.tests.batches import append, make_batch, split

CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=200)
BATCH = 261  # make_batch(2, payload=200)


@pytest.fixture
def crashed(tmp_path, clock):
    """A log with 20 two-record batches over several segments, left open (as after a crash)."""
    log = Log.open(tmp_path / "t-0", CONFIG, now_ms=clock)
    for i in range(20):
        append(log, make_batch(2, payload=200, timestamp=i))
    log.flush()
    return log


def reopen(log, **kwargs):
    return Log.open(log.dir, CONFIG, now_ms=lambda: 0, **kwargs)


def all_batches(log):
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = split(log.read(offset, 1 << 20).records.read())
        out.extend(h.base_offset for h, _ in batches)
        offset = batches[-1][0].last_offset + 1
    return out


def last_segment_path(log, suffix=".log"):
    return log.dir / f"{log.segments[-1].base_offset:020d}{suffix}"


def test_cut_in_the_middle_of_a_batch(crashed):
    path = last_segment_path(crashed)
    size = path.stat().st_size
    cut_batch_base = crashed.segments[-1].base_offset + 2 * ((size // BATCH) - 1)
    os.truncate(path, size - 100)
    log = reopen(crashed)
    assert all_batches(log) == list(range(0, cut_batch_base, 2))
    assert log.log_end_offset == cut_batch_base
    assert append(log, make_batch()).first_offset == cut_batch_base
    log.close()


def test_flipped_byte_truncates_there_and_drops_later_segments(crashed):
    victim = crashed.segments[1]
    with open(victim.log_path, "r+b") as f:
        f.seek(BATCH + 100)  # inside the second batch of the second segment
        byte = f.read(1)
        f.seek(BATCH + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    good_end = victim.base_offset + 2
    log = reopen(crashed)
    assert all_batches(log) == list(range(0, good_end, 2))
    assert log.num_segments == 2
    assert append(log, make_batch()).first_offset == good_end
    log.close()


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage"])
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_damaged_indexes_are_rebuilt(crashed, damage, suffix):
    expected = all_batches(crashed)
    crashed.close()
    for segment in crashed.segments:
        path = segment.directory / f"{segment.base_offset:020d}{suffix}"
        if damage == "delete":
            path.unlink()
        elif damage == "truncate":
            os.truncate(path, max(0, path.stat().st_size - 3))
        else:
            path.write_bytes(b"\x7f\xff\xff\xff" * 6)
    log = reopen(crashed, recovery_point=crashed.log_end_offset, clean_shutdown=True)
    assert all_batches(log) == expected
    for target in range(0, 40, 3):
        ((header, _),) = split(log.read(target, 1).records.read())
        assert header.base_offset <= target <= header.last_offset
    assert log.fetch_offset_by_timestamp(7).offset == 14
    assert append(log, make_batch()).first_offset == 40
    log.close()


def test_garbage_tail_after_crash_is_dropped(crashed):
    with open(last_segment_path(crashed), "ab") as f:
        f.write(b"\x00" * 500)
    log = reopen(crashed)
    assert all_batches(log) == list(range(0, 40, 2))
    assert append(log, make_batch()).first_offset == 40
    log.close()


def test_epoch_cache_truncated_to_recovered_end(crashed):
    append(crashed, make_batch(2, payload=200), epoch=5)
    os.truncate(last_segment_path(crashed), last_segment_path(crashed).stat().st_size - 10)
    log = reopen(crashed)
    assert log.log_end_offset == 40 and log.latest_epoch() == 0
    log.close()


def test_recovered_data_is_fsynced_but_a_new_empty_log_is_not(crashed, tmp_path, monkeypatch):
    """Creating a topic's partitions must not cost an fsync each (50 for __consumer_offsets, on the
    event loop); recovered segments with data still reach the disk before the log is used."""
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    new = Log.open(tmp_path / "new-0", CONFIG, now_ms=lambda: 0)
    assert synced == []
    recovered = reopen(crashed)
    assert synced
    new.close()
    recovered.close()


def _lose_unflushed_tail_before_a_roll(log: Log, batches_lost: int) -> tuple[int, int]:
    """The state a power loss leaves right after a roll: the new segment's file exists but is
    empty (never fsynced), and the previous segment lost its unflushed tail, cleanly, at a batch
    boundary (a file shorter than what was written, as after delayed allocation). Returns the
    offset where the surviving data ends and the new segment's base offset."""
    rolled_at = log.log_end_offset
    log.roll()
    previous = log.segments[-2]
    os.truncate(previous.log_path, previous.size - batches_lost * BATCH)
    return rolled_at - 2 * batches_lost, rolled_at


def test_an_empty_segment_past_a_lost_tail_does_not_move_the_log_end_past_the_hole(crashed):
    """seed 20296 of the simulation (docs/simulation.md, finding 4): a broker lost the unflushed
    tail of a segment in a power loss while the segment rolled after it survived, empty. The log
    end offset came back at the empty segment's base: a hole of offsets without records below
    it, which the broker, back in the ISR, never fetched again."""
    data_end, rolled_at = _lose_unflushed_tail_before_a_roll(crashed, batches_lost=2)
    log = reopen(crashed, recovery_point=10)
    assert log.log_end_offset == data_end < rolled_at
    assert all_batches(log) == list(range(0, data_end, 2))
    assert append(log, make_batch()).first_offset == data_end
    log.close()
    again = reopen(log, recovery_point=log.recovery_point, clean_shutdown=True)
    assert all_batches(again) == [*range(0, data_end, 2), data_end]
    again.close()


def test_an_empty_segment_below_the_recovery_point_is_trusted(crashed):
    """A gap below the recovery point was flushed as it is (compaction leaves such gaps): the
    empty segment's base stays the log end offset."""
    data_end, rolled_at = _lose_unflushed_tail_before_a_roll(crashed, batches_lost=2)
    log = reopen(crashed, recovery_point=rolled_at)
    assert log.log_end_offset == rolled_at
    ((last, _),) = split(log.read(data_end - 2, 1).records.read())
    assert last.base_offset == data_end - 2
    log.close()

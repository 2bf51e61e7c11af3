"""Storage faults through the injectable file layer: a failed write never leaves a log
inconsistent, nothing half-written is acknowledged, and appends resume once the fault is gone."""

from __future__ import annotations

import errno
import os

import pytest

from strom.storage import files
from strom.storage.checkpoint import OffsetCheckpointFile, atomic_write
from strom.storage.config import LogConfig
from strom.storage.errors import KafkaStorageError
from strom.storage.log import Log
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager
from strom.storage.tests.batches import append, make_batch, split
from strom.testing.storage_faults import file_faults


@pytest.fixture
def faults():
    with file_faults() as injector:
        yield injector


def read_all(log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        batches = split(log.read(offset, 1 << 20).records.read())
        out.extend(batches)
        offset = batches[-1][0].last_offset + 1
    return out


def payloads(log):
    return [raw[61:] for _, raw in read_all(log)]


def on_disk_size(segment) -> int:
    return os.stat(segment.log_path).st_size


def reopen(log, tmp_path, clock, config=None):
    """Re-open the directory as after a crash (no clean shutdown, recovery point 0)."""
    return Log.open(log.dir, config or log.config, now_ms=clock, clean_shutdown=False)


def body(i: int) -> bytes:
    return b"record-%04d" % i + b"x" * 200


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS])
def test_failed_write_leaves_log_unchanged_and_appends_resume(open_log, faults, clock, tmp_path, err):
    log = open_log(LogConfig(index_interval_bytes=0))
    for i in range(5):
        append(log, make_batch(1, payload=body(i)))
    before = (log.log_end_offset, log.active_segment.size, log.active_segment.offset_index.entries)
    faults.fail("write", err, path=".log", times=1)
    with pytest.raises(KafkaStorageError) as raised:
        append(log, make_batch(1, payload=body(99)))
    assert raised.value.errno == err
    assert raised.value.error_code_name == "KAFKA_STORAGE_ERROR"
    assert raised.value.transient == (err in (errno.ENOSPC, errno.EDQUOT))
    assert (log.log_end_offset, log.active_segment.size, log.active_segment.offset_index.entries) == before
    assert on_disk_size(log.active_segment) == log.active_segment.size
    info = append(log, make_batch(1, payload=body(5)))  # the fault is gone: same offset again
    assert info.first_offset == 5
    assert payloads(log) == [body(i) for i in range(6)]


def test_torn_write_is_cut_back_to_the_last_whole_batch(open_log, faults, clock, tmp_path):
    log = open_log()
    for i in range(3):
        append(log, make_batch(1, payload=body(i)))
    size = log.active_segment.size
    faults.fail("write", errno.ENOSPC, path=".log", times=1, partial=100)  # 100 bytes, then ENOSPC
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(1, payload=body(3)))
    assert log.active_segment.size == size == on_disk_size(log.active_segment)
    assert log.log_end_offset == 3
    append(log, make_batch(1, payload=body(3)))
    log.close()
    recovered = reopen(log, tmp_path, clock)
    assert payloads(recovered) == [body(i) for i in range(4)]
    recovered.close()


def test_failed_truncation_is_repaired_before_the_next_append(open_log, faults, clock, tmp_path):
    """EIO on the write and on the cut-back: the garbage is never read and is cut later."""
    log = open_log()
    append(log, make_batch(1, payload=body(0)))
    faults.fail("write", errno.ENOSPC, path=".log", times=1, partial=50)
    faults.fail("ftruncate", errno.EIO, path=".log", times=1)
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(1, payload=body(1)))
    assert log.active_segment.dirty_tail
    assert on_disk_size(log.active_segment) > log.active_segment.size
    assert payloads(log) == [body(0)]
    append(log, make_batch(1, payload=body(1)))
    assert not log.active_segment.dirty_tail
    assert payloads(log) == [body(0), body(1)]
    assert on_disk_size(log.active_segment) == log.active_segment.size
    log.close()
    recovered = reopen(log, tmp_path, clock)
    assert payloads(recovered) == [body(0), body(1)]
    recovered.close()


@pytest.mark.parametrize("index", [".index", ".timeindex"])
def test_failed_index_write_rolls_the_whole_append_back(open_log, faults, clock, tmp_path, index):
    log = open_log(LogConfig(index_interval_bytes=0))
    for i in range(3):
        append(log, make_batch(1, payload=body(i), timestamp=1000 + i))
    segment = log.active_segment
    entries = (segment.offset_index.entries, segment.time_index.entries)
    faults.fail("write", errno.ENOSPC, path=index, times=1, partial=3)
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(1, payload=body(3), timestamp=2000))
    assert (segment.offset_index.entries, segment.time_index.entries) == entries
    assert os.stat(segment.offset_index.path).st_size == entries[0] * 8
    assert os.stat(segment.time_index.path).st_size == entries[1] * 12
    assert on_disk_size(segment) == segment.size and log.log_end_offset == 3
    append(log, make_batch(1, payload=body(3), timestamp=2000))
    assert log.fetch_offset_by_timestamp(2000).offset == 3
    log.close()
    reopened = Log.open(log.dir, log.config, now_ms=clock, clean_shutdown=True)
    assert all(s.sanity_error() is None for s in reopened.segments)
    assert payloads(reopened) == [body(i) for i in range(4)]
    reopened.close()


def test_no_descriptor_for_a_new_segment_fails_the_append_not_the_log(open_log, faults, clock):
    log = open_log(LogConfig(segment_bytes=600))
    append(log, make_batch(1, payload=body(0)))
    append(log, make_batch(1, payload=body(1)))
    segments = log.num_segments
    faults.fail("open", errno.EMFILE, path="00000000000000000002.log")
    with pytest.raises(KafkaStorageError) as raised:
        append(log, make_batch(1, payload=body(2)))  # needs a roll
    assert raised.value.errno == errno.EMFILE and raised.value.transient
    assert log.num_segments == segments and log.log_end_offset == 2
    faults.clear()
    append(log, make_batch(1, payload=body(2)))
    assert log.num_segments == segments + 1
    assert payloads(log) == [body(i) for i in range(3)]


def test_one_emfile_is_absorbed_by_closing_cached_descriptors(open_log, faults):
    log = open_log(LogConfig(segment_bytes=600))
    append(log, make_batch(1, payload=body(0)))
    append(log, make_batch(1, payload=body(1)))
    evicted = files.cache.evicted
    faults.fail("open", errno.EMFILE, path="00000000000000000002.log", times=1)
    append(log, make_batch(1, payload=body(2)))  # rolls: the first open fails, the retry works
    assert files.cache.evicted > evicted
    assert payloads(log) == [body(i) for i in range(3)]


def test_idempotent_retry_after_a_failed_write_is_accepted_once(open_log, faults):
    """Producer state is untouched by a failed write: the retry is neither a gap nor a duplicate."""
    log = open_log()
    pid = dict(producer_id=7, producer_epoch=0)
    append(log, make_batch(2, payload=body(0), base_sequence=0, **pid))
    faults.fail("write", errno.ENOSPC, path=".log", times=1)
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(2, payload=body(1), base_sequence=2, **pid))
    retry = append(log, make_batch(2, payload=body(1), base_sequence=2, **pid))
    assert (retry.first_offset, retry.duplicate) == (2, False)
    again = append(log, make_batch(2, payload=body(1), base_sequence=2, **pid))
    assert again.duplicate and again.first_offset == 2
    assert log.log_end_offset == 4


def test_new_leader_epoch_not_written_means_no_data_written(open_log, faults):
    log = open_log()
    append(log, make_batch(1, payload=body(0)), epoch=1)
    faults.fail("write", errno.ENOSPC, path="leader-epoch-checkpoint", times=1)
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(1, payload=body(1)), epoch=2)
    assert log.leader_epoch_cache.entries() == [(1, 0)] and log.log_end_offset == 1
    assert on_disk_size(log.active_segment) == log.active_segment.size
    append(log, make_batch(1, payload=body(1)), epoch=2)
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 1)]


def test_failed_fsync_keeps_the_recovery_point_and_is_retried(open_log, faults):
    log = open_log()
    append(log, make_batch(1, payload=body(0)))
    log.flush()
    append(log, make_batch(1, payload=body(1)))
    faults.fail("fsync", errno.EIO, path=".log", times=1)
    with pytest.raises(KafkaStorageError) as raised:
        log.flush()
    assert raised.value.errno == errno.EIO and not raised.value.transient
    assert log.recovery_point == 1
    log.flush()
    assert log.recovery_point == 2


def test_atomic_write_failure_keeps_the_last_good_copy(tmp_path, faults):
    path = tmp_path / "checkpoint"
    atomic_write(path, b"good")
    for op, kw in (("write", {"partial": 2}), ("fsync", {}), ("replace", {})):
        faults.fail(op, errno.ENOSPC, times=1, **kw)
        with pytest.raises(OSError):
            atomic_write(path, b"new content")
        assert path.read_bytes() == b"good"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"], op


def test_full_disk_then_crash_recovers_every_acknowledged_record(tmp_path, faults, clock):
    """Appends fail at random points (torn writes, index writes, rolls); after a crash the log holds
    exactly the acknowledged records, in order."""
    import random

    rng = random.Random(17)
    config = LogConfig(segment_bytes=2000, index_interval_bytes=300)
    log = Log.open(tmp_path / "t-0", config, now_ms=clock)
    acked = []
    for i in range(300):
        if rng.random() < 0.3:
            op, path = rng.choice(
                [
                    ("write", ".log"),
                    ("write", ".index"),
                    ("write", ".timeindex"),
                    ("open", ".log"),
                    ("write", ".snapshot"),
                ]
            )
            faults.fail(
                op,
                rng.choice([errno.ENOSPC, errno.EIO]),
                path=path,
                times=1,
                partial=rng.choice([None, 7, 100]) if op == "write" else None,
            )
        try:
            append(log, make_batch(1, payload=body(i), timestamp=1000 + i))
            acked.append(body(i))
        except KafkaStorageError:
            pass
        faults.clear()
    assert 150 < len(acked) < 300
    assert payloads(log) == acked
    log.flush()  # a crash now: no close, no snapshot
    del log
    files.cache.resize(files.cache.capacity)
    recovered = Log.open(tmp_path / "t-0", config, now_ms=clock, recovery_point=0, clean_shutdown=False)
    assert payloads(recovered) == acked
    assert recovered.log_end_offset == len(acked)  # failed appends consumed no offsets
    assert [h.base_offset for h, _ in read_all(recovered)] == list(range(len(acked)))
    recovered.close()


def test_checkpoint_failure_is_logged_and_keeps_the_old_file(tmp_path, faults, clock, caplog):
    manager = LogManager([tmp_path / "d"], LogConfig(), now_ms=clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    append(log, make_batch(1, payload=body(0)))
    log.flush()
    manager.checkpoint()
    path = tmp_path / "d" / RECOVERY_POINT_CHECKPOINT
    assert OffsetCheckpointFile(path).read() == {("t", 0): 1}
    append(log, make_batch(1, payload=body(1)))
    log.flush()
    faults.fail("write", errno.ENOSPC, path="checkpoint")
    manager.checkpoint()  # logged, not raised
    assert OffsetCheckpointFile(path).read() == {("t", 0): 1}
    assert "ENOSPC" in caplog.text and str(tmp_path / "d") in caplog.text
    manager.shutdown()
    assert not (tmp_path / "d" / CLEAN_SHUTDOWN_FILE).exists()  # the next start recovers
    faults.clear()
    again = LogManager([tmp_path / "d"], LogConfig(), now_ms=clock)
    again.startup()
    assert not again.had_clean_shutdown
    assert payloads(again.get_log("t", 0)) == [body(0), body(1)]
    again.shutdown()
    assert (tmp_path / "d" / CLEAN_SHUTDOWN_FILE).exists()


def test_storage_failures_are_logged_once_per_burst_with_dir_partition_and_errno(open_log, faults, caplog):
    log = open_log()
    faults.fail("write", errno.ENOSPC, path=".log")
    for _ in range(20):
        with pytest.raises(KafkaStorageError):
            append(log, make_batch(1, payload=body(0)))
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "ENOSPC" in r.getMessage()]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "topic-0" in message and str(log.dir.parent) in message and "free space" in message

"""Checkpoint files and LogManager restarts."""

import pytest

from strom.storage.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile
from strom.storage.config import LogConfig
from strom.storage.errors import CorruptLog
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from strom.storage.tests.batches import append, make_batch


def test_offset_checkpoint_round_trip_and_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("orders", 1): 42, ("a-b", 0): 7})
    assert path.read_text() == "0\n2\na-b 0 7\norders 1 42\n"
    assert OffsetCheckpointFile(path).read() == {("orders", 1): 42, ("a-b", 0): 7}


def test_torn_temp_file_is_ignored(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    OffsetCheckpointFile(path).write({("t", 0): 5})
    (tmp_path / "log-start-offset-checkpoint.tmp").write_text("0\n3\nt 0 9\n")  # crash mid-write
    assert OffsetCheckpointFile(path).read() == {("t", 0): 5}
    OffsetCheckpointFile(path).write({("t", 0): 6})
    assert OffsetCheckpointFile(path).read() == {("t", 0): 6}


def test_malformed_checkpoint_raises(tmp_path):
    path = tmp_path / "cp"
    path.write_text("0\n2\nt 0 1\n")
    with pytest.raises(CorruptLog):
        OffsetCheckpointFile(path).read()
    LeaderEpochCheckpointFile(path).write([(1, 0), (4, 10)])
    assert LeaderEpochCheckpointFile(path).read() == [(1, 0), (4, 10)]


def test_config_from_properties():
    config = LogConfig.from_properties(
        {"segment.bytes": "2048", "retention.ms": "-1", "message.timestamp.type": "LogAppendTime", "foo": "x"}
    )
    assert (config.segment_bytes, config.retention_ms, config.log_append_time) == (2048, -1, True)
    with pytest.raises(ValueError, match="segment.bytes"):
        LogConfig.from_properties({"segment.bytes": "big"})
    with pytest.raises(ValueError, match="cleanup.policy"):
        LogConfig.from_properties({"cleanup.policy": "forever"})


def make_manager(tmp_path, clock, progress=None):
    return LogManager(
        [tmp_path / "d1", tmp_path / "d2"], LogConfig(segment_bytes=1000), now_ms=clock, progress=progress
    )


def fill(manager):
    for partition in range(4):
        log = manager.get_or_create_log("orders", partition, LogConfig(segment_bytes=1000))
        for _ in range(partition + 3):
            append(log, make_batch(2, payload=300))
        log.high_watermark = log.log_end_offset - 2


def test_restart_keeps_partitions_offsets_and_skips_recovery(tmp_path, clock, monkeypatch):
    manager = make_manager(tmp_path, clock)
    manager.startup(broker_id=1, cluster_id="abc")
    fill(manager)
    assert {manager._log_dir_of[("orders", p)] for p in range(4)} == {tmp_path / "d1", tmp_path / "d2"}
    manager.shutdown()
    assert (tmp_path / "d1" / CLEAN_SHUTDOWN_FILE).exists()
    assert "broker.id=1" in (tmp_path / "d1" / "meta.properties").read_text()

    messages: list[str] = []
    again = make_manager(tmp_path, clock, messages.append)
    calls = []
    import strom.storage.segment as segment_module

    real_recover = segment_module.LogSegment.recover

    def recover(self: segment_module.LogSegment, start: int) -> int:
        calls.append(self)
        return real_recover(self, start)

    monkeypatch.setattr(segment_module.LogSegment, "recover", recover)
    again.startup(broker_id=1)
    assert calls == []  # clean shutdown: no batch-by-batch recovery
    assert again.cluster_id == "abc" and again.had_clean_shutdown
    assert not (tmp_path / "d1" / CLEAN_SHUTDOWN_FILE).exists()
    logs = again.all_logs()
    assert sorted(logs) == [("orders", p) for p in range(4)]
    for p, log in logs.items():
        assert log.log_end_offset == 2 * (p[1] + 3)
        assert log.high_watermark == log.log_end_offset - 2
    assert any("loaded 4 logs" in m for m in messages)
    again.shutdown()


def test_unclean_restart_recovers_from_checkpoints(tmp_path, clock):
    manager = make_manager(tmp_path, clock)
    manager.startup()
    fill(manager)
    manager.flush_dirty()
    log = manager.get_log("orders", 3)
    append(log, make_batch(2, payload=300))  # written after the last checkpoint
    again = make_manager(tmp_path, clock)
    again.startup()  # no shutdown: unclean
    assert not again.had_clean_shutdown
    assert again.get_log("orders", 3).log_end_offset == 14
    assert append(again.get_log("orders", 3), make_batch()).first_offset == 14
    again.shutdown()


def test_delete_log_and_leftover_delete_dirs(tmp_path, clock):
    manager = make_manager(tmp_path, clock)
    manager.startup()
    fill(manager)
    manager.delete_log("orders", 0)
    assert manager.get_log("orders", 0) is None
    assert not list((tmp_path).glob("d*/orders-0*"))
    (tmp_path / "d1" / "orders-9.0123abcd-delete").mkdir()
    manager.shutdown()
    again = make_manager(tmp_path, clock)
    again.startup()
    assert sorted(again.all_logs()) == [("orders", p) for p in (1, 2, 3)]
    assert not (tmp_path / "d1" / "orders-9.0123abcd-delete").exists()
    again.shutdown()


def test_cleanup_applies_retention_and_checkpoints_log_start(tmp_path, clock):
    manager = make_manager(tmp_path, clock)
    manager.startup()
    log = manager.get_or_create_log("t", 0, LogConfig(segment_bytes=400, retention_bytes=400, file_delete_delay_ms=0))
    for _ in range(6):
        append(log, make_batch(payload=300))
    log.high_watermark = log.log_end_offset  # retention deletes only below the high watermark
    assert manager.cleanup() > 0
    start = log.log_start_offset
    assert start > 0
    d = manager._log_dir_of[("t", 0)]
    assert f"t 0 {start}" in (d / "log-start-offset-checkpoint").read_text()
    manager.shutdown()

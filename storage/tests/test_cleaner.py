"""Log compaction: last value per key, offsets/timestamps kept, tombstones, codecs, idempotence,
crash safety of the cleaned-segment swap, and a model-based property test."""

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.records.batch import Record, build_batch, iter_batches, iter_records, validate_batches
from strom.protocol.records.compression import Compression
from strom.storage.cleaner import (
    DELETE_HORIZON_MASK,
    LogCleaner,
    cleanable_segments,
    dirty_ratio,
    needs_cleaning,
)
from strom.storage.config import LogConfig
from strom.storage.errors import CorruptLog
from strom.storage.log import Log
from strom.storage.log_manager import CLEANER_OFFSET_CHECKPOINT, LogManager

COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=600, index_interval_bytes=100, file_delete_delay_ms=0)
DAY = 86_400_000


def kv_batch(pairs, *, ts=1_000, codec=0, pid=-1, epoch=-1, seq=-1) -> bytes:
    records = [Record(i, i, key, value) for i, (key, value) in enumerate(pairs)]
    return build_batch(
        records, compression=codec, base_timestamp=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def put(log, pairs, **kwargs):
    data = kv_batch(pairs, **kwargs)
    info = log.append_as_leader(data, validate_batches(data), 0)
    log.high_watermark = log.log_end_offset
    return info


def batches(log, offset=None):
    """(header, raw bytes) of every batch from ``offset`` (default: the log start), following
    reads across segments and past empty batches as consumers do."""
    out = []
    offset = log.log_start_offset if offset is None else offset
    while offset < log.log_end_offset:
        region = log.read(offset, 1 << 20).records
        if region is None:
            break
        raw = region.read()
        found = [(h, raw[p : p + h.size]) for p, h in iter_batches(raw)]
        out.extend(found)
        offset = found[-1][0].last_offset + 1
    return out


def records(log, offset=None):
    return [r for _, raw in batches(log, offset) for r in iter_records(raw)]


def latest(recs):
    model = {}
    for r in recs:
        model[r.key] = r.value
    return model


def seal(log):
    """Roll so everything written so far is in non-active segments below the high watermark."""
    log.roll()
    log.high_watermark = log.log_end_offset


def fill(log, rounds=6, keys=8, ts=1_000):
    for n in range(rounds):
        for k in range(keys):
            put(log, [(b"k%d" % k, b"v%d-%d" % (k, n))], ts=ts + n * keys + k)
    seal(log)


# ============================================================ basic semantics
def test_last_value_per_key_survives_across_many_segments(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    before = records(log)
    assert log.num_segments > 4
    result = LogCleaner().clean(log, clock.now)
    after = records(log)
    assert latest(after) == latest(before) == {b"k%d" % k: b"v%d-5" % k for k in range(8)}
    assert len(after) == 8
    assert result.records_removed == len(before) - 8
    assert result.end_offset == log.active_segment.base_offset
    assert log.log_end_offset == before[-1].offset + 1
    # runs are grouped by their size before cleaning: the next pass merges the shrunken segments
    second = LogCleaner().clean(log, clock.now)
    assert second.segments_after < second.segments_before == result.segments_after
    assert records(log) == after


def test_offsets_and_timestamps_unchanged(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    original = {r.offset: r for r in records(log)}
    LogCleaner().clean(log, clock.now)
    for r in records(log):
        assert original[r.offset] == r


def test_batch_headers_keep_producer_fields_and_range(open_log, clock):
    log = open_log(COMPACT)
    put(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], pid=5, epoch=2, seq=0)
    put(log, [(b"a", b"2")], pid=6, epoch=0, seq=0)
    seal(log)
    LogCleaner().clean(log, clock.now)
    first = batches(log)[0][0]
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 2)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (5, 2, 0)
    assert [(r.offset, r.key) for r in records(log)] == [(1, b"b"), (2, b"c"), (3, b"a")]


def test_only_segments_below_the_high_watermark_and_active_segment_are_cleaned(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    hw_limit = log.segments[2].base_offset
    log.high_watermark = hw_limit
    LogCleaner().clean(log, clock.now)
    kept = [r for r in records(log) if r.offset >= hw_limit]
    assert len(kept) == log.log_end_offset - hw_limit  # untouched above the high watermark
    assert all(s.next_offset <= hw_limit for s in cleanable_segments(log, clock.now))


def test_null_keys_are_removed(open_log, clock):
    log = open_log(COMPACT)
    put(log, [(None, b"x"), (b"a", b"1")])
    seal(log)
    LogCleaner().clean(log, clock.now)
    assert [(r.key, r.value) for r in records(log)] == [(b"a", b"1")]


def test_pass_over_a_clean_log_changes_nothing(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    LogCleaner().clean(log, clock.now)
    LogCleaner().clean(log, clock.now)  # merges the shrunken segments
    files = sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log")
    snapshot = records(log)
    result = LogCleaner().clean(log, clock.now)
    assert result.records_removed == 0 and records(log) == snapshot
    assert sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log") == files


# ============================================================ tombstones
def test_tombstones_kept_for_delete_retention_then_removed(open_log, clock):
    config = LogConfig(cleanup_policy="compact", segment_bytes=600, delete_retention_ms=DAY, file_delete_delay_ms=0)
    log = open_log(config)
    put(log, [(b"gone", b"1"), (b"stays", b"1")])
    put(log, [(b"gone", None)], ts=2_000)
    seal(log)
    cleaner = LogCleaner()
    cleaner.clean(log, clock.now)
    assert [(r.key, r.value, r.timestamp) for r in records(log)] == [(b"stays", b"1", 1_001), (b"gone", None, 2_000)]
    tombstone_batch = batches(log)[-1][0]
    assert tombstone_batch.attributes & DELETE_HORIZON_MASK
    assert tombstone_batch.base_timestamp == clock.now + DAY
    assert tombstone_batch.max_timestamp == 2_000

    cleaner.clean(log, clock.now + DAY - 1)
    assert (b"gone", None) in [(r.key, r.value) for r in records(log)]
    assert not needs_cleaning(log, clock.now + DAY - 1)
    assert needs_cleaning(log, clock.now + DAY)

    result = cleaner.clean(log, clock.now + DAY)
    assert result.tombstones_removed == 1
    assert [(r.key, r.value) for r in records(log)] == [(b"stays", b"1")]


def test_tombstone_horizon_survives_reopen(open_log, clock, tmp_path):
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=600, delete_retention_ms=10))
    put(log, [(b"a", b"1")])
    put(log, [(b"a", None)])
    seal(log)
    LogCleaner().clean(log, clock.now)
    log.close()
    reopened = open_log(log.config, clean_shutdown=True, high_watermark=log.log_end_offset)
    reopened.cleaner_state.first_dirty_offset = log.cleaner_state.first_dirty_offset
    assert not needs_cleaning(reopened, clock.now)
    assert needs_cleaning(reopened, clock.now + 10)  # found from the batch headers alone
    assert reopened.compact(clock.now + 10).tombstones_removed == 1


# ============================================================ codecs
@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_compressed_batches_are_recompressed_with_their_codec(open_log, clock, codec):
    log = open_log(COMPACT)
    for n in range(4):
        put(log, [(b"k%d" % k, b"value-%d-%d" % (k, n) * 5) for k in range(6)], codec=codec, ts=1_000 + n)
    seal(log)
    LogCleaner().clean(log, clock.now)
    found = batches(log)
    assert {h.compression for h, _ in found if h.records_count} == {int(codec)}
    assert latest(records(log)) == {b"k%d" % k: b"value-%d-3" % k * 5 for k in range(6)}


# ============================================================ reads, ListOffsets, indexes
def test_reads_and_list_offsets_by_timestamp_after_cleaning(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=2000, index_interval_bytes=50))
    for i in range(60):
        put(log, [(b"k%d" % (i % 5 if i < 40 else i), b"v%d" % i)], ts=10_000 + i * 10)
    seal(log)
    LogCleaner().clean(log, clock.now)
    survivors = records(log)
    assert [r.offset for r in survivors] == list(range(35, 60))
    assert records(log, 3)[0].offset == 35
    assert log.fetch_offset_by_timestamp(10_000).offset == 35
    assert log.fetch_offset_by_timestamp(10_000 + 45 * 10).offset == 45
    assert log.fetch_offset_by_timestamp(10_000 + 45 * 10 - 5).offset == 45
    assert log.fetch_offset_by_timestamp(99_999) is None
    assert log.offset_for_max_timestamp().offset == 59
    for segment in log.segments:
        assert segment.sanity_error() is None
        assert segment.offset_index.entries or segment.size < 200


# ============================================================ idempotent producers
def test_idempotent_duplicates_detected_after_cleaning_and_reopen(open_log, clock):
    log = open_log(COMPACT)
    dup = kv_batch([(b"a", b"1"), (b"b", b"1")], pid=42, epoch=0, seq=0)
    log.append_as_leader(dup, validate_batches(dup), 0)
    put(log, [(b"a", b"2"), (b"b", b"2")])  # supersedes every record of producer 42
    seal(log)
    LogCleaner().clean(log, clock.now)
    empty = batches(log)[0][0]
    assert (empty.producer_id, empty.records_count, empty.last_offset) == (42, 0, 1)
    assert log.append_as_leader(dup, validate_batches(dup), 0).duplicate
    end = log.log_end_offset
    log.close()
    for snapshot in log.dir.glob("*.snapshot"):
        snapshot.unlink()  # unclean reopen: producer state comes from the batch headers alone
    reopened = open_log(COMPACT, clean_shutdown=False)
    assert reopened.log_end_offset == end
    assert reopened.append_as_leader(dup, validate_batches(dup), 0).duplicate
    following = kv_batch([(b"c", b"1")], pid=42, epoch=0, seq=2)
    assert not reopened.append_as_leader(following, validate_batches(following), 0).duplicate


# ============================================================ policy
def test_config_keys_parse_with_kafka_names_and_defaults():
    config = LogConfig.from_properties(
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.9",
            "min.compaction.lag.ms": "7",
            "delete.retention.ms": "5",
            "max.compaction.lag.ms": "1000",
        }
    )
    assert (
        config.min_cleanable_dirty_ratio,
        config.min_compaction_lag_ms,
        config.delete_retention_ms,
        config.max_compaction_lag_ms,
    ) == (0.9, 7, 5, 1000)
    assert config.compact_enabled and config.delete_enabled
    assert config.to_properties()["min.cleanable.dirty.ratio"] == "0.9"
    with pytest.raises(ValueError, match="min.cleanable.dirty.ratio"):
        LogConfig.from_properties({"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(ValueError, match="max.compaction.lag.ms"):
        LogConfig.from_properties({"max.compaction.lag.ms": "0"})
    default = LogConfig()
    assert (
        default.min_cleanable_dirty_ratio,
        default.min_compaction_lag_ms,
        default.delete_retention_ms,
        default.max_compaction_lag_ms,
    ) == (0.5, 0, DAY, (1 << 63) - 1)


def test_policy_follows_the_dirty_ratio(open_log, clock):
    log = open_log(COMPACT)
    fill(log, rounds=10)
    assert dirty_ratio(log, clock.now) == 1.0 and needs_cleaning(log, clock.now)
    assert log.compact(clock.now) is not None
    assert dirty_ratio(log, clock.now) == 0.0 and log.compact(clock.now) is None
    put(log, [(b"k0", b"new")])
    seal(log)
    ratio = dirty_ratio(log, clock.now)
    assert 0.0 < ratio < 0.5 and not needs_cleaning(log, clock.now)
    log.update_config(LogConfig.from_properties({"min.cleanable.dirty.ratio": "0.01"}, log.config))
    assert needs_cleaning(log, clock.now)
    assert log.compact(clock.now).records_removed == 1


def test_max_compaction_lag_forces_cleaning_below_the_ratio(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=600, max_compaction_lag_ms=1000))
    fill(log)
    LogCleaner().clean(log, clock.now)
    put(log, [(b"k0", b"late")], ts=clock.now)
    seal(log)
    assert dirty_ratio(log, clock.now) < 0.5
    assert not needs_cleaning(log, clock.now + 999)
    assert needs_cleaning(log, clock.now + 1000)


def test_min_compaction_lag_holds_back_recent_segments(open_log, clock):
    log = open_log(LogConfig(cleanup_policy="compact", segment_bytes=600, min_compaction_lag_ms=500))
    fill(log, ts=clock.now - 100)
    assert cleanable_segments(log, clock.now) == []
    assert cleanable_segments(log, clock.now + 10_000)


def test_delete_policy_is_never_compacted(open_log, clock):
    log = open_log(LogConfig(segment_bytes=600))
    fill(log)
    assert not needs_cleaning(log, clock.now) and log.compact(clock.now) is None


# ============================================================ concurrency: the log changes underneath
def test_truncation_during_cleaning_aborts_the_swap(open_log, clock, monkeypatch):
    from strom.storage import cleaner as cleaner_module

    log = open_log(COMPACT)
    fill(log)
    cut = log.segments[1].base_offset
    finish = cleaner_module.CleanedSegment.finish

    def truncate_then_finish(self):
        finish(self)
        log.truncate_to(cut)  # what a follower's truncation on the event-loop thread would do

    monkeypatch.setattr(cleaner_module.CleanedSegment, "finish", truncate_then_finish)
    result = LogCleaner().clean(log, clock.now)
    assert result.aborted
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert [r.offset for r in records(log)] == list(range(cut))


def test_truncation_below_the_first_dirty_offset_makes_new_data_dirty(open_log, clock):
    log = open_log(COMPACT)
    fill(log)
    LogCleaner().clean(log, clock.now)
    cut = log.cleaner_state.first_dirty_offset - 3
    log.truncate_to(cut)
    assert log.cleaner_state.first_dirty_offset == log.log_end_offset <= cut
    put(log, [(b"x", b"1")])
    put(log, [(b"x", b"2")])
    seal(log)
    LogCleaner().clean(log, clock.now)
    assert [r.value for r in records(log) if r.key == b"x"] == [b"2"]


# ============================================================ crash safety
def _run_with_crash_points(log, tmp_path, clock, monkeypatch):
    """Clean ``log``, copying its directory just before every rename (each one a crash point)."""
    copies: list[Path] = []
    real_rename = os.rename

    def rename(src, dst):
        target = tmp_path / f"crash{len(copies)}" / log.dir.name
        shutil.copytree(log.dir, target)
        copies.append(target)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    LogCleaner().clean(log, clock.now)
    monkeypatch.setattr(os, "rename", real_rename)
    final = tmp_path / "crash-final" / log.dir.name
    shutil.copytree(log.dir, final)
    return copies + [final]


@pytest.mark.parametrize("earlier_passes", [0, 1], ids=["one-segment-runs", "merging-runs"])
def test_crash_at_every_step_of_the_swap_leaves_old_or_new_segments(
    open_log, tmp_path, clock, monkeypatch, earlier_passes
):
    log = open_log(COMPACT)
    fill(log)
    for _ in range(earlier_passes):
        LogCleaner().clean(log, clock.now)
        put(log, [(b"k1", b"again")])
        seal(log)
    put(log, [(b"tail", b"t")])  # the active segment
    segments_before = log.num_segments
    before = records(log)
    crash_points = _run_with_crash_points(log, tmp_path, clock, monkeypatch)
    after = records(log)
    assert len(crash_points) > 6
    assert any(p.name.endswith(".cleaned") for p in crash_points[0].iterdir())
    assert any(p.name.endswith(".swap") for d in crash_points for p in d.iterdir())
    seen = set()
    for directory in crash_points:
        reopened = Log.open(directory, COMPACT, now_ms=clock, clean_shutdown=False, high_watermark=log.log_end_offset)
        try:
            got = records(reopened)
            offsets = [r.offset for r in got]
            assert offsets == sorted(set(offsets)), directory  # no duplicates
            assert latest(got) == latest(before), directory  # nothing lost
            assert got in (before, after) or _mix_of_runs(got, before, after), directory
            seen.add(len(got))
            assert not [p for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]
            for segment in reopened.segments:
                assert segment.sanity_error() is None
        finally:
            reopened.close()
    assert {len(before), len(after)} <= seen
    if earlier_passes:
        assert log.num_segments < segments_before  # runs of several segments were swapped


def _mix_of_runs(got, before, after):
    """Several runs are swapped one after another: each offset range is wholly old or new."""
    old = {r.offset: r for r in before}
    new = {r.offset: r for r in after}
    return all(old.get(r.offset) == r or new.get(r.offset) == r for r in got)


def test_leftover_cleaned_files_are_deleted_and_swap_completes_on_open(open_log, tmp_path, clock):
    log = open_log(COMPACT)
    fill(log)
    (log.dir / "00000000000000000000.log.cleaned").write_bytes(b"garbage")
    (log.dir / "00000000000000000000.index.cleaned").write_bytes(b"")
    end = log.log_end_offset
    model = latest(records(log))
    log.close()
    reopened = open_log(COMPACT, clean_shutdown=True, high_watermark=end)
    assert not list(reopened.dir.glob("*.cleaned"))
    assert latest(records(reopened)) == model and reopened.log_end_offset == end


# ============================================================ LogManager hook
def test_log_manager_cleans_compacted_logs_and_checkpoints_first_dirty(tmp_path, clock):
    manager = LogManager([tmp_path / "data"], LogConfig(), now_ms=clock)
    manager.startup()
    compacted = manager.get_or_create_log("offsets", 0, COMPACT)
    plain = manager.get_or_create_log("plain", 0, LogConfig(segment_bytes=600))
    fill(compacted)
    fill(plain)
    results = manager.clean_compacted()
    assert list(results) == [("offsets", 0)]
    assert len(records(compacted)) == 8 and len(records(plain)) == 48
    checkpoint = (tmp_path / "data" / CLEANER_OFFSET_CHECKPOINT).read_text()
    assert f"offsets 0 {compacted.cleaner_state.first_dirty_offset}" in checkpoint
    manager.shutdown()
    again = LogManager([tmp_path / "data"], LogConfig(), now_ms=clock)
    again.startup(topic_configs={"offsets": COMPACT})
    log = again.get_log("offsets", 0)
    assert log is not None and log.cleaner_state.first_dirty_offset == compacted.cleaner_state.first_dirty_offset
    assert again.clean_compacted() == {}
    again.shutdown()


def test_corrupt_segment_is_reported_and_skipped(tmp_path, clock):
    manager = LogManager([tmp_path / "data"], LogConfig(), now_ms=clock)
    manager.startup()
    log = manager.get_or_create_log("offsets", 0, COMPACT)
    fill(log)
    path = log.segments[1].log_path
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # inside the first record: the CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLog):
        LogCleaner().clean(log, clock.now)
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert manager.clean_compacted() == {} and ("offsets", 0) in manager.uncleanable
    manager.shutdown()


# ============================================================ model-based
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
            st.one_of(st.none(), st.binary(min_size=0, max_size=30)),
        ),
        st.tuples(st.just("clean"), st.integers(0, 3), st.none()),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_cleaned_log_matches_last_value_per_key_model(tmp_path_factory, ops):
    directory = tmp_path_factory.mktemp("model") / "topic-0"
    now = [1_000_000]
    config = LogConfig(
        cleanup_policy="compact",
        segment_bytes=300,
        delete_retention_ms=100,
        index_interval_bytes=64,
        file_delete_delay_ms=0,
    )
    log = Log.open(directory, config, now_ms=lambda: now[0])
    model, written = {}, {}
    try:
        for op, key, value in ops:
            if op == "put":
                info = put(log, [(key, value)], ts=now[0])
                model[key] = value
                written[info.first_offset] = (key, value)
            else:
                now[0] += key * 60
                seal(log)
                LogCleaner().clean(log, now[0])
        got = records(log)
        assert [r.offset for r in got] == sorted({r.offset for r in got})
        for r in got:
            assert written[r.offset] == (r.key, r.value)  # offsets and contents never change
        live = {k: v for k, v in latest(got).items()}
        for key, value in model.items():
            if value is None:
                assert live.get(key) is None  # deleted: gone or still a tombstone
            else:
                assert live[key] == value
        cleaned_end = log.cleaner_state.first_dirty_offset
        keys = [r.key for r in got if r.offset < cleaned_end]
        assert len(keys) == len(set(keys))  # the cleaned part holds each key once
        assert log.log_end_offset == (max(written) + 1 if written else 0)
    finally:
        log.close()

"""Append/read round trips, rolls, reads by offset, limits, timestamps, retention, truncation."""

import os

import pytest

from strom.storage.config import LogConfig
from strom.storage.errors import CorruptRecord, OffsetOutOfRange, RecordTooLarge
from strom.storage.tests.batches import append, crc_valid, make_batch, split


def offsets(region_bytes):
    return [(h.base_offset, h.last_offset) for h, _ in split(region_bytes)]


def read_all(log):
    """Every batch in the log, following reads across segments."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        batches = split(info.records.read())
        out.extend(batches)
        offset = batches[-1][0].last_offset + 1
    return out


def test_append_assigns_offsets_and_round_trips(open_log):
    log = open_log()
    first = append(log, make_batch(3, payload=b"a" * 10))
    second = append(log, make_batch(2, payload=b"b" * 10), make_batch(1, payload=b"c"))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.num_batches) == (3, 5, 2)
    assert log.log_end_offset == 6
    batches = read_all(log)
    assert [(h.base_offset, h.last_offset) for h, _ in batches] == [(0, 2), (3, 4), (5, 5)]
    assert [raw[61:] for _, raw in batches] == [b"a" * 10, b"b" * 10, b"c"]
    assert all(crc_valid(raw) for _, raw in batches)


def test_rolls_by_size_and_reads_across_segments(open_log):
    log = open_log(LogConfig(segment_bytes=1024))
    for _ in range(40):
        append(log, make_batch(2, payload=200))
    assert log.num_segments > 5
    assert all(s.size <= 1024 for s in log.segments)
    assert [h.base_offset for h, _ in read_all(log)] == list(range(0, 80, 2))
    assert [s.base_offset for s in log.segments] == sorted(s.base_offset for s in log.segments)


def test_rolls_by_time_with_injected_clock(open_log, clock):
    log = open_log(LogConfig(segment_ms=1000))
    append(log, make_batch(timestamp=clock.now))
    clock.now += 500
    append(log, make_batch(timestamp=clock.now))
    assert log.num_segments == 1
    clock.now += 600
    append(log, make_batch(timestamp=clock.now))
    assert log.num_segments == 2
    assert log.active_segment.base_offset == 2


def test_read_from_middle_of_batch_returns_containing_batch(open_log):
    log = open_log(LogConfig(segment_bytes=2000, index_interval_bytes=100))
    for _ in range(50):
        append(log, make_batch(5, payload=100))
    for target in (0, 3, 77, 123, 249):
        info = log.read(target, 1)
        ((header, _),) = split(info.records.read())
        assert header.base_offset <= target <= header.last_offset


def test_max_bytes_and_min_one_message(open_log):
    log = open_log()
    for _ in range(5):
        append(log, make_batch(1, payload=939))  # 1000-byte batches
    assert offsets(log.read(0, 2500).records.read()) == [(0, 0), (1, 1)]
    assert offsets(log.read(0, 10).records.read()) == [(0, 0)]
    assert log.read(0, 10, min_one_message=False).records is None


def test_max_offset_is_an_exclusive_bound(open_log):
    log = open_log()
    for _ in range(5):
        append(log, make_batch(2))
    assert offsets(log.read(0, 1 << 20, max_offset=6).records.read()) == [(0, 1), (2, 3), (4, 5)]
    assert log.read(6, 1 << 20, max_offset=6).records is None


def test_read_bounds(open_log):
    log = open_log()
    append(log, make_batch(2))
    assert log.read(2, 100).records is None
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100)
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(-1, 100)
    assert exc.value.error_code_name == "OFFSET_OUT_OF_RANGE"


def test_file_region_survives_segment_deletion(open_log):
    log = open_log(LogConfig(segment_bytes=300, file_delete_delay_ms=0))
    for _ in range(6):
        append(log, make_batch(payload=100))
    region = log.read(0, 1000).records
    expected = region.read()
    log.maybe_increment_log_start_offset(0)
    log.high_watermark = log.log_end_offset
    log.maybe_increment_log_start_offset(4)
    log.delete_old_segments()
    assert not any(s.base_offset == 0 for s in log.segments)
    assert region.read() == expected
    assert os.pread(region.fileno(), region.size, region.position) == expected


def test_oversized_and_malformed_appends_are_rejected(open_log):
    log = open_log(LogConfig(max_message_bytes=500))
    with pytest.raises(RecordTooLarge):
        append(log, make_batch(payload=600))
    batch = make_batch()
    from strom.storage.tests.batches import headers_of

    with pytest.raises(CorruptRecord):
        log.append_as_leader(batch + b"x", headers_of(batch), 0)
    assert log.log_end_offset == 0


def test_log_append_time_rewrites_timestamp_and_crc(open_log, clock):
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    info = append(log, make_batch(timestamp=5))
    assert info.log_append_time == clock.now
    ((header, raw),) = split(log.read(0, 1000).records.read())
    assert header.max_timestamp == clock.now and header.timestamp_type == 1
    assert crc_valid(raw)


def test_fetch_offset_by_timestamp_and_max_timestamp(open_log):
    log = open_log(LogConfig(segment_bytes=1000, index_interval_bytes=150))
    for i in range(30):
        append(log, make_batch(2, payload=100, timestamp=1000 + i * 10), epoch=i // 10)
    found = log.fetch_offset_by_timestamp(1105)
    assert (found.timestamp, found.offset, found.leader_epoch) == (1110, 22, 1)
    assert log.fetch_offset_by_timestamp(1000).offset == 0
    assert log.fetch_offset_by_timestamp(5000) is None
    assert log.offset_for_max_timestamp()[:2] == (1290, 59)


def test_retention_by_time(open_log, clock):
    log = open_log(LogConfig(segment_bytes=500, retention_ms=10_000, file_delete_delay_ms=0))
    for i in range(10):
        append(log, make_batch(payload=200, timestamp=clock.now - 20_000 if i < 6 else clock.now))
    log.high_watermark = log.log_end_offset  # every replica has it (retention stays below the HW)
    before = log.num_segments
    deleted = log.delete_old_segments()
    assert deleted == 6 and log.num_segments == before - 6  # one 261-byte batch per segment
    assert log.log_start_offset == 6
    assert read_all(log)[0][0].base_offset == 6
    assert not [p for p in log.dir.iterdir() if p.name.endswith(".deleted")]


def test_retention_by_size_keeps_active_segment(open_log):
    log = open_log(LogConfig(segment_bytes=500, retention_bytes=600, file_delete_delay_ms=0))
    for _ in range(10):
        append(log, make_batch(payload=200))
    log.high_watermark = log.log_end_offset
    log.delete_old_segments()
    assert log.size_in_bytes <= 600 + 500
    assert log.log_end_offset == 10 and log.num_segments >= 1
    assert read_all(log)[-1][0].base_offset == 9


def _high_watermark_behind(log, hw):
    """A leader whose followers have only the records below ``hw``."""
    log.high_watermark = hw
    assert log.high_watermark == hw < log.log_end_offset
    return log


@pytest.mark.parametrize("retention", [{"retention_ms": 10_000}, {"retention_bytes": 0}])
def test_retention_never_deletes_at_or_above_the_high_watermark(open_log, clock, retention):
    """As Kafka's deletableSegments: a segment goes only when the next one starts at or below the
    high watermark, so the log start offset never passes it (followers would else wipe their
    logs and acks=all would succeed for records kept nowhere)."""
    log = open_log(LogConfig(segment_bytes=600, file_delete_delay_ms=0, **retention))
    for _ in range(10):  # two 261-byte batches per segment: [0, 2), [2, 4), ... [8, 10)
        append(log, make_batch(payload=200, timestamp=clock.now - 20_000))
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
    _high_watermark_behind(log, 0)
    assert log.delete_old_segments() == 0 and log.log_start_offset == 0
    _high_watermark_behind(log, 5)  # inside [4, 6): that segment and later ones stay
    assert log.delete_old_segments() == 2
    assert (log.log_start_offset, log.high_watermark) == (4, 5)
    assert [h.base_offset for h, _ in read_all(log)] == list(range(4, 10))
    log.high_watermark = 6
    assert log.delete_old_segments() == 1 and log.log_start_offset == 6
    log.high_watermark = log.log_end_offset
    assert log.delete_old_segments() == 1  # everything but the active segment
    assert log.log_start_offset == 8 <= log.high_watermark


def test_log_start_breach_deletes_only_below_the_high_watermark(open_log):
    log = open_log(LogConfig(segment_bytes=600, file_delete_delay_ms=0))
    for _ in range(10):
        append(log, make_batch(payload=200))
    _high_watermark_behind(log, 7)
    with pytest.raises(OffsetOutOfRange):
        log.maybe_increment_log_start_offset(8)  # DeleteRecords past the high watermark
    log.maybe_increment_log_start_offset(7)
    assert log.log_start_offset == 7 and log.segments[0].base_offset == 6
    assert log.delete_old_segments() == 0


def test_delete_records_moves_log_start(open_log):
    log = open_log(LogConfig(segment_bytes=500))
    for _ in range(10):
        append(log, make_batch(payload=200))
    with pytest.raises(OffsetOutOfRange):
        log.maybe_increment_log_start_offset(5)  # beyond the high watermark
    log.high_watermark = 10
    log.maybe_increment_log_start_offset(5)
    assert log.log_start_offset == 5
    assert log.segments[0].base_offset <= 5 < log.segments[0].next_offset
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 100)
    assert split(log.read(5, 100).records.read())[0][0].base_offset == 5


def test_truncate_to(open_log):
    log = open_log(LogConfig(segment_bytes=500))
    for i in range(10):
        append(log, make_batch(2, payload=200, timestamp=i), epoch=i // 5)
    log.high_watermark = 20
    log.truncate_to(8)
    assert log.log_end_offset == 8 and log.high_watermark == 8
    assert [h.base_offset for h, _ in read_all(log)] == [0, 2, 4, 6]
    assert log.latest_epoch() == 0
    info = append(log, make_batch(), epoch=3)
    assert info.first_offset == 8
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (100, 100, 1)
    assert append(log, make_batch()).first_offset == 100


def test_leader_epoch_cache_and_end_offset_for_epoch(open_log, tmp_path):
    log = open_log()
    append(log, make_batch(3), epoch=1)
    append(log, make_batch(2), epoch=1)
    append(log, make_batch(4), epoch=3)
    assert log.latest_epoch() == 3
    assert log.end_offset_for_epoch(1) == (1, 5)
    assert log.end_offset_for_epoch(2) == (1, 5)
    assert log.end_offset_for_epoch(3) == (3, 9)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(7) == (-1, -1)
    text = (log.dir / "leader-epoch-checkpoint").read_text()
    assert text == "0\n2\n1 0\n3 5\n"
    append(log, make_batch(1), epoch=3)
    log.truncate_to(9)
    assert log.end_offset_for_epoch(3) == (3, 9) and log.latest_epoch() == 3
    log.truncate_to(6)  # inside the batch 5..8: the whole batch goes, and epoch 3 with it
    assert log.log_end_offset == 5 and log.latest_epoch() == 1
    assert log.end_offset_for_epoch(1) == (1, 5)


def test_truncating_at_the_log_end_drops_an_epoch_that_has_no_data(open_log):
    """Issue 21: a replica that led epoch 5 of an idle partition wrote (5, 4) to its epoch cache and
    appended nothing before it lost the lead. The new leader never had epoch 5, answers the
    follower's fetches with a diverging epoch ending at 4 and the follower truncates to 4, its
    log end: nothing to cut, but the cache must still lose epoch 5 (as Kafka's truncateTo does),
    or the follower reports it again at every fetch and never rejoins the ISR."""
    log = open_log()
    append(log, make_batch(4), epoch=3)
    log.leader_epoch_cache.assign(5, log.log_end_offset)
    assert log.latest_epoch() == 5
    log.truncate_to(4)
    assert log.log_end_offset == 4 and log.latest_epoch() == 3
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n3 0\n"
    log.leader_epoch_cache.assign(6, log.log_end_offset)
    log.truncate_to(10)  # past the end: no data goes, the empty epoch does
    assert log.log_end_offset == 4 and log.leader_epoch_cache.entries() == [(3, 0)]
    assert append(log, make_batch(2), epoch=7).first_offset == 4
    log.truncate_to(6)  # an epoch with data at the log end stays
    assert log.leader_epoch_cache.entries() == [(3, 0), (7, 4)]


def test_reopen_keeps_everything(open_log):
    log = open_log(LogConfig(segment_bytes=700, index_interval_bytes=100))
    for i in range(20):
        append(log, make_batch(3, payload=100, timestamp=i))
    expected = read_all(log)
    log.close()
    again = open_log(LogConfig(segment_bytes=700), clean_shutdown=True)
    assert again.log_end_offset == 60
    assert read_all(again) == expected
    assert again.offset_for_max_timestamp()[:2] == (19, 59)
    assert append(again, make_batch()).first_offset == 60


def test_flush_from_worker_thread_while_appending(open_log):
    import threading

    log = open_log(LogConfig(segment_bytes=2000))
    stop = threading.Event()

    def flusher():
        while not stop.is_set():
            log.flush()

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        for _ in range(300):
            append(log, make_batch(payload=100))
    finally:
        stop.set()
        worker.join()
    log.flush()
    assert log.recovery_point == log.log_end_offset == 300
    assert [h.base_offset for h, _ in read_all(log)] == list(range(300))


def test_timestamp_lookups_are_record_precise_inside_a_batch(tmp_path):
    from strom.protocol.records.batch import Record, build_batch, validate_batches
    from strom.storage.config import LogConfig
    from strom.storage.log import Log

    log = Log.open(tmp_path / "t-0", LogConfig())
    data = bytearray(build_batch([Record(i, 10 * i, b"k", b"v") for i in range(100)], base_timestamp=1000))
    log.append_as_leader(data, validate_batches(data), 0)
    found = log.fetch_offset_by_timestamp(1370)
    assert found is not None and (found.offset, found.timestamp) == (37, 1370)
    later, earliest = log.fetch_offset_by_timestamp(1371), log.fetch_offset_by_timestamp(999)
    assert later is not None and later.offset == 38
    assert earliest is not None and earliest.offset == 0
    assert log.fetch_offset_by_timestamp(1991) is None
    latest = log.offset_for_max_timestamp()
    assert latest is not None and (latest.offset, latest.timestamp) == (99, 1990)
    log.close()

"""The bounded cache of open segment files: descriptors stay bounded however many segments
exist, evicted files reopen on use, and regions in flight keep theirs."""

from __future__ import annotations

import os

import pytest

from strom.storage import files
from strom.storage.config import LogConfig
from strom.storage.log import Log
from strom.storage.tests.batches import append, make_batch, split


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_cache():
    old = files.cache.capacity
    files.cache.resize(20)
    try:
        yield files.cache
    finally:
        files.cache.resize(old)


def test_descriptors_stay_bounded_with_many_logs_and_segments(tmp_path, small_cache, clock):
    before = open_fds()
    logs = [Log.open(tmp_path / f"t-{i}", LogConfig(segment_bytes=300), now_ms=clock) for i in range(30)]
    for _round in range(4):
        for log in logs:
            append(log, make_batch(1, payload=200))
    assert sum(log.num_segments for log in logs) == 120  # 360 files
    assert open_fds() - before <= small_cache.capacity + 2
    for log in logs:  # every segment readable again through reopened descriptors
        offset = 0
        while offset < log.log_end_offset:
            region = log.read(offset, 1 << 20).records
            assert region is not None
            (header, _), *_ = split(region.read())
            offset = header.last_offset + 1
    assert open_fds() - before <= small_cache.capacity + 2
    for log in logs:
        log.flush()
        log.close()
    assert open_fds() <= before + small_cache.capacity


def test_region_in_flight_keeps_its_descriptor_after_eviction(tmp_path, small_cache, clock):
    log = Log.open(tmp_path / "t-0", LogConfig(), now_ms=clock)
    append(log, make_batch(3, payload=b"kept"))
    region = log.read(0, 1 << 20).records
    assert region is not None
    small_cache.shed()
    small_cache.resize(1)
    others = [Log.open(tmp_path / f"o-{i}", LogConfig(), now_ms=clock) for i in range(5)]
    assert split(region.read())[0][1][61:] == b"kept"
    for other in others:
        other.close()
    log.close()


def test_a_renamed_or_recreated_path_is_never_served_a_stale_descriptor(tmp_path):
    path = str(tmp_path / "f")
    first = files.cache.open(path, os.O_RDWR | os.O_CREAT)
    os.write(first.fd, b"old")
    files.cache.forget(path)
    os.unlink(path)
    second = files.cache.open(path, os.O_RDWR | os.O_CREAT)
    assert os.pread(second.fd, 10, 0) == b""
    files.cache.forget(path)
    os.unlink(path)
    with pytest.raises(FileNotFoundError):
        files.cache.get(path, os.O_RDWR)  # reopening never recreates a deleted file

"""Benchmark figures of the bounded cache of open segment files (storage.files.cache).

In-process, on the storage layer alone (no broker, no client), all in one run:

* append throughput of 1 KiB batches spread round-robin over many partitions of several
  segments each, with the cache bounded (``bounded`` files) against unbounded (every file kept
  open, as Kafka does): the cost of reopening files evicted from the cache;
* read throughput of the same partitions from offset 0 (old segments) bounded against unbounded;
* reads from old segments against reads from the active segments, both bounded (the old ones'
  files are mostly not open: each read may reopen one).

``python -m strom.tools.bench.files`` prints them; ``strom bench`` adds them to its report.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from strom.protocol.records.batch import Record, build_batch
from strom.protocol.records.header import parse_header
from strom.storage import files
from strom.storage.config import LogConfig
from strom.storage.log import Log

BATCH = 1024
PER_SEGMENT = 4


def _batch() -> bytes:
    """One record batch of about BATCH bytes."""
    return build_batch([Record(0, 0, b"key", b"v" * (BATCH - 90), [])], base_timestamp=1_700_000_000_000)


def _build(directory: Path, partitions: int, segments: int) -> None:
    """``partitions`` copies of one partition of ``segments`` full segments (setup, not timed)."""
    batch = _batch()
    headers = [parse_header(batch)]
    template = Log.open(directory / "p-0", LogConfig(segment_bytes=BATCH * PER_SEGMENT, index_interval_bytes=BATCH))
    for _ in range(segments * PER_SEGMENT):
        template.append_as_leader(bytearray(batch), headers, 0)
    template.roll()
    template.close()
    contents = {path.name: path.read_bytes() for path in (directory / "p-0").iterdir()}
    for i in range(1, partitions):
        target = directory / f"p-{i}"
        target.mkdir()
        for name, data in contents.items():
            (target / name).write_bytes(data)


def _run(directory: Path, capacity: int, partitions: int, appends_each: int) -> dict[str, float]:
    """Appends/s, old-segment reads/s and active-segment reads/s with a cache of ``capacity``."""
    files.cache.resize(1)
    files.cache.shed()
    files.cache.resize(capacity)
    batch = _batch()
    headers = [parse_header(batch)]
    config = LogConfig(segment_bytes=1 << 30, index_interval_bytes=BATCH)  # no roll while timed
    logs = [Log.open(directory / f"p-{i}", config, clean_shutdown=True) for i in range(partitions)]
    started = time.perf_counter()
    for _ in range(appends_each):
        for log in logs:
            log.append_as_leader(bytearray(batch), headers, 0)
    append_rate = appends_each * partitions / (time.perf_counter() - started)

    def read_rate(offset_of: Callable[[Log], int], rounds: int) -> float:
        started = time.perf_counter()
        for _ in range(rounds):
            for log in logs:
                region = log.read(offset_of(log), 1 << 20).records
                assert region is not None and region.read()
        return rounds * len(logs) / (time.perf_counter() - started)

    old = read_rate(lambda log: 0, 3)
    active = read_rate(lambda log: log.log_end_offset - 1, 3)
    for log in logs:
        log.delete()  # no flush: the files are thrown away
    return {"appends": append_rate, "old_reads": old, "active_reads": active}


def measure(
    partitions: int = 1000, segments: int = 3, bounded: int = 256, workdir: Path | None = None
) -> dict[str, float]:
    """Both runs in fresh directories; returns the figures and their ratios."""
    files.raise_open_files_limit()
    base = Path(tempfile.mkdtemp(prefix="strom-bench-files-", dir=workdir))
    previous = files.cache.capacity
    try:
        _build(base / "unbounded", partitions, segments)
        _build(base / "bounded", partitions, segments)
        unbounded = _run(base / "unbounded", 0, partitions, 5)
        limited = _run(base / "bounded", bounded, partitions, 5)
    finally:
        files.cache.resize(previous)
        shutil.rmtree(base, ignore_errors=True)
    return {
        "files": partitions * (segments + 1) * 3,
        "bounded": bounded,
        "unbounded_appends_per_s": unbounded["appends"],
        "bounded_appends_per_s": limited["appends"],
        "appends_ratio": limited["appends"] / unbounded["appends"],
        "unbounded_old_reads_per_s": unbounded["old_reads"],
        "bounded_old_reads_per_s": limited["old_reads"],
        "old_reads_ratio": limited["old_reads"] / unbounded["old_reads"],
        "bounded_active_reads_per_s": limited["active_reads"],
        "old_vs_active_reads_ratio": limited["old_reads"] / limited["active_reads"],
    }


def add_to_report(report, partitions: int, workdir: Path, log) -> None:
    """The figures in ``strom bench``'s report (each a ratio to a reference of the same run)."""
    bounded = max(16, partitions // 4)
    log(f"file cache: {partitions} partitions of 4 segments, {bounded} open files vs unbounded")
    m = measure(partitions=partitions, bounded=bounded, workdir=workdir)
    report.details["file_cache"] = m
    report.reference(
        "file_cache_unbounded_appends_per_s",
        m["unbounded_appends_per_s"],
        "appends/s",
        f"1 KiB appends round-robin over {partitions} partitions, all {m['files']} files open",
    )
    report.reference(
        "file_cache_unbounded_old_reads_per_s",
        m["unbounded_old_reads_per_s"],
        "reads/s",
        f"reads from offset 0 (old segments) of {partitions} partitions, all files open",
    )
    report.reference(
        "file_cache_bounded_active_reads_per_s",
        m["bounded_active_reads_per_s"],
        "reads/s",
        f"reads of the last batch (active segments) of {partitions} partitions, {bounded} files open",
    )
    report.add(
        "file_cache_bounded_appends_per_s",
        m["bounded_appends_per_s"],
        "appends/s",
        "file_cache_unbounded_appends_per_s",
    )
    report.add(
        "file_cache_bounded_old_reads_per_s",
        m["bounded_old_reads_per_s"],
        "reads/s",
        "file_cache_unbounded_old_reads_per_s",
    )
    report.add(
        "file_cache_old_segment_reads_per_s",
        m["bounded_old_reads_per_s"],
        "reads/s",
        "file_cache_bounded_active_reads_per_s",
    )


def main() -> None:
    m = measure()
    print(f"{m['files']} files, cache of {m['bounded']} open files vs unbounded")
    print(
        f"appends/s       bounded {m['bounded_appends_per_s']:10.0f}  unbounded {m['unbounded_appends_per_s']:10.0f}"
        f"  ratio {m['appends_ratio']:.2f}"
    )
    print(
        f"old reads/s     bounded {m['bounded_old_reads_per_s']:10.0f}"
        f"  unbounded {m['unbounded_old_reads_per_s']:10.0f}"
        f"  ratio {m['old_reads_ratio']:.2f}"
    )
    print(f"old vs active reads (bounded): {m['old_vs_active_reads_ratio']:.2f}")


if __name__ == "__main__":
    main()

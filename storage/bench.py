"""Append throughput of the storage hot path: ``python -m strom.storage.bench [dir]``.

Measures Log.append_as_leader (offset assignment + one write + index upkeep) for 16 KiB and
1 KiB batches, page cache only (no fsync), as the broker's produce path runs it.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from strom.protocol.records.header import parse_header
from strom.storage.config import LogConfig
from strom.storage.log import Log
from strom.storage.synthetic import make_batch


def run(directory: Path, batch_bytes: int, seconds: float = 2.0) -> tuple[float, float]:
    """(appends per second, MB per second) for batches of ``batch_bytes`` bytes."""
    batch = make_batch(10, payload=batch_bytes - 61)
    headers = [parse_header(batch)]
    log = Log.open(directory / f"bench{batch_bytes}-0", LogConfig(segment_bytes=256 << 20))
    count, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            log.append_as_leader(bytearray(batch), headers, 0)
        count += 200
    elapsed = time.perf_counter() - started
    log.delete()
    return count / elapsed, count * batch_bytes / elapsed / 1e6


def main() -> None:
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="strom-bench-"))
    for size in (16 * 1024, 1024):
        rate, mbps = run(base, size)
        print(f"{size:>6}-byte batches: {rate:10.0f} appends/s  {mbps:8.1f} MB/s")


if __name__ == "__main__":
    main()

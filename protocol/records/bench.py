"""Benchmark of the produce hot path: ``python -m strom.protocol.records.bench``.

Builds a 1 MiB blob of 16 KiB uncompressed batches and times :func:`validate_batches`
and :func:`assign_offsets` over it. Prints MB/s; asserts nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from strom.protocol.records.batch import Record, assign_offsets, build_batch, validate_batches

BLOB_SIZE = 1 << 20
RECORDS_PER_BATCH = 16
VALUE_SIZE = 1000  # 16 records of ~1 KB: a 16 KiB batch


def make_blob() -> bytearray:
    batch = build_batch(
        [Record(i, 0, None, os.urandom(VALUE_SIZE)) for i in range(RECORDS_PER_BATCH)], base_timestamp=0
    )
    return bytearray(batch * (BLOB_SIZE // len(batch)))


def best_seconds(fn: Callable[[], object], repeat: int = 5, number: int = 500) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def main() -> None:
    blob = make_blob()
    headers = validate_batches(blob)
    validate = best_seconds(lambda: validate_batches(blob))
    assign = best_seconds(lambda: assign_offsets(blob, headers, 0, 0))
    print(f"{len(headers)} batches, {len(blob)} bytes")
    print(f"validate_batches: {validate * 1e6:8.1f} us  {len(blob) / validate / 1e6:8.0f} MB/s")
    print(f"assign_offsets:   {assign * 1e6:8.1f} us  {len(blob) / assign / 1e6:8.0f} MB/s")


if __name__ == "__main__":
    main()

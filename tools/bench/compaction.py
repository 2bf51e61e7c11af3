"""Benchmark figures of compaction with transactions and of the aborted-transaction lookups.

In-process, on the storage layer alone (no broker, no client), all in one run:

* one cleaner pass over a log of transactional batches (one in five transactions aborted, each
  with its marker) against the same pass over a log of plain batches of the same records;
* the aborted-transaction lookup of a read_committed fetch at the log end when the log holds
  100,000 aborted transactions (only the newest ~10,000 kept in memory), and of a fetch of old data
  (read from the ``.txnindex`` files), each against the lookup at the end of a log with 1,000.

``python -m strom.tools.bench.compaction`` prints them; ``strom bench`` adds them to its report.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from strom.protocol.records.batch import Record, build_batch, validate_batches
from strom.protocol.records.control import build_marker
from strom.storage.cleaner import LogCleaner
from strom.storage.config import LogConfig
from strom.storage.log import Log
from strom.storage.txn_index import AbortedTxn, TxnLogState, txn_index_path, write_index

BATCHES = 4000
RECORDS_PER_BATCH = 10
KEYS = 5000
NOW = 10**12


def _clean_seconds(directory: Path, transactional: bool, batches: int = BATCHES) -> float:
    log = Log.open(
        directory / ("txn-0" if transactional else "plain-0"),
        LogConfig(cleanup_policy="compact", segment_bytes=1 << 20),
        now_ms=lambda: NOW,
    )
    try:
        for n in range(batches):
            records = [
                Record(i, 0, b"k%d" % ((n * RECORDS_PER_BATCH + i) % KEYS), b"v" * 50) for i in range(RECORDS_PER_BATCH)
            ]
            if transactional:
                data = build_batch(
                    records,
                    base_timestamp=1000,
                    producer_id=7,
                    producer_epoch=0,
                    base_sequence=n * RECORDS_PER_BATCH,
                    is_transactional=True,
                )
                log.append_as_leader(data, validate_batches(data), 0)
                marker = build_marker(7, 0, n % 5 != 0, 0, 1000)
                log.append_as_leader(marker, validate_batches(marker), 0)
            else:
                data = build_batch(records, base_timestamp=1000)
                log.append_as_leader(data, validate_batches(data), 0)
        log.roll()
        log.high_watermark = log.log_end_offset
        started = time.perf_counter()
        LogCleaner().clean(log, NOW)
        return time.perf_counter() - started
    finally:
        log.close()


def _index(directory: Path, aborts: int, per_segment: int = 1000) -> tuple[TxnLogState, int]:
    """A log's aborted transactions as ``.txnindex`` files (10 offsets each), loaded."""
    directory.mkdir(parents=True)
    bases = []
    for start in range(0, aborts, per_segment):
        base = start * 10
        bases.append(base)
        write_index(
            txn_index_path(directory, base),
            [
                AbortedTxn(7, (start + j) * 10, (start + j) * 10 + 9, (start + j) * 10 + 10)
                for j in range(min(per_segment, aborts - start))
            ],
        )
    state = TxnLogState(directory, lambda: bases)
    state.load(bases)
    return state, aborts * 10


def _lookup_seconds(state: TxnLogState, fetch_offset: int, rounds: int = 2000) -> float:
    upper = fetch_offset + 300
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            state.collect(fetch_offset, upper)
        best = min(best, (time.perf_counter() - started) / rounds)
    return best


def measure(workdir: Path | None = None, batches: int = BATCHES) -> dict:
    base = Path(tempfile.mkdtemp(prefix="strom-bench-compaction-", dir=workdir))
    try:
        records = batches * RECORDS_PER_BATCH
        plain = min(_clean_seconds(base / f"p{i}", False, batches) for i in range(2))
        txn = min(_clean_seconds(base / f"t{i}", True, batches) for i in range(2))
        small, small_end = _index(base / "small", 1_000)
        large, large_end = _index(base / "large", 100_000)
        return {
            "records": records,
            "plain_records_per_s": records / plain,
            "txn_records_per_s": records / txn,
            "lookup_small_tail_s": _lookup_seconds(small, small_end - 500),
            "lookup_large_tail_s": _lookup_seconds(large, large_end - 500),
            "lookup_large_old_s": _lookup_seconds(large, 5_000),
            "large_in_memory": len(large.aborted),
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def add_to_report(report, workdir: Path, log, batches: int = BATCHES) -> None:
    """The figures in ``strom bench``'s report (each a ratio to a reference of the same run)."""
    log("compaction: a cleaner pass over transactional vs plain batches; aborted-transaction lookups")
    m = measure(workdir, batches)
    report.details["compaction"] = m
    report.reference(
        "compaction_plain_records_per_s",
        m["plain_records_per_s"],
        "records/s",
        f"one cleaner pass over {m['records']} records in plain batches of 10",
    )
    report.add("compaction_txn_records_per_s", m["txn_records_per_s"], "records/s", "compaction_plain_records_per_s")
    report.reference(
        "txn_lookup_1k_aborts_tail_s",
        m["lookup_small_tail_s"],
        "s",
        "aborted transactions for a read_committed fetch at the end of a log with 1,000",
    )
    report.add("txn_lookup_100k_aborts_tail_s", m["lookup_large_tail_s"], "s", "txn_lookup_1k_aborts_tail_s")
    report.add("txn_lookup_100k_aborts_old_data_s", m["lookup_large_old_s"], "s", "txn_lookup_1k_aborts_tail_s")


def main() -> None:
    m = measure()
    print(
        f"cleaner pass, {m['records']} records: plain {m['plain_records_per_s']:10.0f} records/s, "
        f"transactional (1 in 5 aborted) {m['txn_records_per_s']:10.0f} records/s, "
        f"ratio {m['txn_records_per_s'] / m['plain_records_per_s']:.2f}"
    )
    print(
        f"aborted-transaction lookup: 1k aborts, tail {m['lookup_small_tail_s'] * 1e6:.1f} us; "
        f"100k aborts ({m['large_in_memory']} in memory), tail {m['lookup_large_tail_s'] * 1e6:.1f} us "
        f"(ratio {m['lookup_large_tail_s'] / m['lookup_small_tail_s']:.2f}), "
        f"old data {m['lookup_large_old_s'] * 1e6:.1f} us "
        f"(ratio {m['lookup_large_old_s'] / m['lookup_small_tail_s']:.2f})"
    )


if __name__ == "__main__":
    main()

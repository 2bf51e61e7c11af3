"""A tiny `strom bench` run: every figure and reference is present, finite and has its ratio, and
the JSON report round-trips. Figures are never compared with any speed."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from strom.tools.bench import console as bench_console
from strom.tools.bench import machine as bench_machine
from strom.tools.bench.benchmark import CODECS, PARTITIONS, QUICK, SIZES, Report, bench, format_table, run_benchmark

TINY = replace(
    QUICK,
    small_records=300,
    large_records=60,
    latency_records=50,
    latency_rate=500.0,
    inflight_rounds=1,
    loopback_bytes=4 << 20,
    disk_bytes=4 << 20,
    startup_runs=1,
    rtt_round_trips=50,
    session_partitions=200,
    session_seconds=1.5,
    session_kafka=False,
    console_topics=4,
    console_partitions=2,
    console_rounds=1,
    txn_records=2_000,
    txn_kafka=False,
    file_cache_partitions=40,
    tls_records=300,
    share_records=200,
    share_consumers=(1,),
    share_kafka=False,
    compaction_batches=400,
)

EXPECTED_FIGURES = {
    "startup_to_first_connection_s",
    "startup_to_first_api_versions_s",
    "broker_idle_rss_mib",
    "broker_peak_rss_mib",
    "inflight_1000_requests_round_ms",
    "inflight_max_latency_ms",
    "inflight_stalled_requests",
    *(f"end_to_end_latency_p{p}_ms" for p in ("50", "95", "99", "99.9")),
    *(
        f"produce_{s}B_{p}p_acks{a}_{c}_records_per_s"
        for s in SIZES
        for p in PARTITIONS
        for a in ("1", "all")
        for c in CODECS
    ),
    *(f"consume_{s}B_{p}p_{c}_records_per_s" for s in SIZES for p in PARTITIONS for c in CODECS),
    *(f"acks_all_over_acks1_{s}B_6p_{c}" for s in SIZES for c in CODECS),
    *(f"produce_{s}B_1p_acks1_none_bytes_per_s" for s in SIZES),
    "fetch_idle_session_cpu",
    "fetch_idle_session_vs_full_cpu",
    "produce_cpu_beside_idle_consumers_ms",
    "produce_with_console_polled_ratio",
    "consume_with_console_polled_ratio",
    "kafka_request_worst_ms_while_console_answers_8p",
    *(bench_console.latency_key(path, 8) for path in bench_console.latency_paths(4)),
    "txn_produce_commit_every_1000_records_per_s",
    "file_cache_bounded_appends_per_s",
    "file_cache_bounded_old_reads_per_s",
    "file_cache_old_segment_reads_per_s",
    "tls_produce_100b",
    "tls_consume_100b",
    "compaction_txn_records_per_s",
    "txn_lookup_100k_aborts_tail_s",
    "txn_lookup_100k_aborts_old_data_s",
    "share_consume_1_records_per_s",
    "share_drain_1_records_per_s",
}
EXPECTED_REFERENCES = {
    "loopback_bytes_per_s",
    "loopback_rtt_ms",
    "disk_write_bytes_per_s",
    "python_startup_s",
    "python_broker_imports_rss_bytes",
    *(f"client_alone_{s}B_{c}_records_per_s" for s in SIZES for c in CODECS),
    *(f"client_drain_{s}B_records_per_s" for s in SIZES),
    "strom_fetch_idle_full_cpu",
    "strom_produce_cpu_alone_ms",
    "console_produce_100B_1p_records_per_s",
    "console_consume_100B_1p_records_per_s",
    "console_static_file_ms",
    "strom_plain_idempotent_produce",
    "file_cache_unbounded_appends_per_s",
    "file_cache_unbounded_old_reads_per_s",
    "file_cache_bounded_active_reads_per_s",
    "kafka_request_worst_ms_idle",
    "strom_plaintext_produce",
    "strom_plaintext_consume",
    "compaction_plain_records_per_s",
    "txn_lookup_1k_aborts_tail_s",
    "strom_classic_consume_records_per_s",
    "strom_classic_drain_records_per_s",
}


def test_tiny_run_reports_every_figure_with_a_ratio(tmp_path: Path) -> None:
    report = run_benchmark(TINY, tmp_path, lambda _msg: None)
    doc = json.loads(json.dumps(report.to_json()))

    assert set(doc["references"]) == EXPECTED_REFERENCES
    assert all(ref["value"] > 0 and math.isfinite(ref["value"]) for ref in doc["references"].values())
    figures = {f["key"]: f for f in doc["figures"]}
    assert set(figures) == EXPECTED_FIGURES
    for f in figures.values():
        assert math.isfinite(f["value"]) and math.isfinite(f["ratio"]), f
        assert f["reference"] in doc["references"] or f["reference"] in figures or f["reference"] == "inflight_requests"
    assert figures["inflight_stalled_requests"]["reference"] == "inflight_requests"
    assert doc["details"]["inflight"]["requests"] == 1000 and doc["details"]["inflight"]["errors"] == 0
    runs = doc["details"]["produce_100B_6p_acksall_lz4_runs"]
    assert len(runs) == TINY.rounds
    assert all(run["records"] == 300 * TINY.producers and run["failed"] == 0 for run in runs)
    consumed = doc["details"]["consume_1024B_6p_none_runs"]
    assert len(consumed) == TINY.rounds
    assert all(run["received"] == 60 * TINY.producers * TINY.rounds and run["failed"] == 0 for run in consumed)
    best = max(run["rate"] for run in consumed)
    assert figures["consume_1024B_6p_none_records_per_s"]["value"] == best
    assert figures["produce_100B_1p_acks1_none_records_per_s"]["target"] == ">= 900,000/s"
    assert figures["startup_to_first_api_versions_s"]["value"] >= figures["startup_to_first_connection_s"]["value"]
    sessions = doc["details"]["fetch_sessions_strom"]
    assert sessions["session"]["response_bytes"] < sessions["full"]["response_bytes"] / 10, sessions
    assert sessions["session"]["fetches"] > 0 and sessions["full"]["fetches"] > 0
    assert all(v > 0 for v in sessions["neighbour"].values()), sessions["neighbour"]

    assert set(doc["details"]["transactions_strom"]) == {"plain", "txn"}
    share = doc["details"]["share_groups_strom"]
    assert set(share) == {"classic", "share_1"}
    assert all(0 < run["first_record_s"] <= run["seconds"] for run in share.values()), share
    assert set(doc["details"]["tls"]["strom"]) == {
        "plaintext_produce",
        "plaintext_consume",
        "ssl_produce",
        "ssl_consume",
    }
    assert doc["details"]["console_overhead"]["polled_requests"] > 0
    assert len(doc["details"]["console_overhead"]["runs"]["on"]) == TINY.console_rounds
    assert doc["details"]["console_latency"]["partitions"] == 8

    table = format_table(report)
    assert all(key in table for key in EXPECTED_FIGURES | EXPECTED_REFERENCES)


def test_ratio_divides_by_the_reference() -> None:
    report = Report(settings={})
    report.reference("base", 4.0, "x", "a reference")
    report.add("twice", 8.0, "x", "base", target=("< 10", lambda v: v < 10))
    report.add("own", 3.0, "x", "base", ref_value=6.0)
    twice, own = report.figures
    assert (twice.ratio, twice.met, own.ratio, own.met) == (2.0, True, 0.5, None)


def test_cli_rejects_a_zero_record_count() -> None:
    result = CliRunner().invoke(bench, ["--records", "0"])
    assert result.exit_code == 2 and "--records" in result.output


def test_proc_status_reads_this_process() -> None:
    import os

    assert (
        bench_machine.proc_status_bytes(os.getpid(), "VmHWM")
        >= bench_machine.proc_status_bytes(os.getpid(), "VmRSS")
        > 0
    )


def test_the_baseline_rss_probe_imports_the_installed_broker(tmp_path: Path, monkeypatch) -> None:
    """Run away from the source checkout, as a user runs `strom bench`: the probe once imported
    the pre-namespace `broker.broker` and only worked from the repository's root."""
    monkeypatch.chdir(tmp_path)
    assert bench_machine.baseline_rss() > 10 << 20

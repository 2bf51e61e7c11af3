"""`strom perf produce|consume` with a small number of records."""

from __future__ import annotations

import json

from strom.tools.perf import percentile
from strom.tools.tests.helpers import Strom


def test_perf_produce_then_consume_report(strom: Strom, topic: str) -> None:
    produced = strom.ok(
        "perf",
        "produce",
        "--topic",
        topic,
        "--num-records",
        "500",
        "--record-size",
        "64",
        "--throughput",
        "-1",
        "--producer-props",
        "acks=1",
        "linger.ms=1",
        "--json",
    )
    report = json.loads(produced.stdout)
    assert report["records_delivered"] == 500 and report["records_failed"] == 0
    assert report["max_latency_ms"] >= report["p50_ms"] > 0

    text = strom.ok("perf", "produce", "--topic", topic, "--num-records", "10", "--record-size", "8")
    assert "10 records sent" in text.stdout and "99.9th" in text.stdout

    consumed = json.loads(strom.ok("perf", "consume", "--topic", topic, "--messages", "510", "--json").stdout)
    assert consumed["records"] == 510
    assert consumed["data_consumed_mb"] * 1024 * 1024 == 500 * 64 + 10 * 8


def test_perf_consume_more_than_there_is_fails(strom: Strom, topic: str) -> None:
    strom.ok("perf", "produce", "--topic", topic, "--num-records", "3", "--record-size", "4")
    result = strom("perf", "consume", "--topic", topic, "--messages", "4", "--timeout-ms", "1500")
    assert result.exit_code == 1
    assert "read 3 of 4" in result.output


def test_record_size_or_payload_file_is_required(strom: Strom, topic: str) -> None:
    assert strom("perf", "produce", "--topic", topic, "--num-records", "1").exit_code == 2


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99.9) == 100.0
    assert percentile([], 50) == 0.0

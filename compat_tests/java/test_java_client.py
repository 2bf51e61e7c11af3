"""The Java client 4.0 (Kafka's own producer, consumer and admin client) against Strom.

``StromClientChecks.java`` runs every check in one JVM (a JVM start costs seconds on two cores):
idempotent producers with each codec, consumer groups with the range and cooperative-sticky
assignors, manual and automatic commits, seek by timestamp, and the Admin calls Strom serves. It
is compiled once per run with javac (Debian's openjdk-17-jdk-headless) and run against one broker;
each check becomes one test here (recorded for the README's table by conftest.py).

Skipped without java/javac or Kafka's jars unless STROM_COMPAT_REQUIRE_ALL=1.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.support.jvm import JVM_FLAGS, KAFKA_HOME, java_unavailable, skip_unless_available
from strom.tools.broker_process import BrokerProcess

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "StromClientChecks.java"
CHECKS = (
    ["admin.create_topics"]
    + [f"producer.idempotent.{c}" for c in ("none", "gzip", "snappy", "lz4", "zstd")]
    + [
        "producer.plain_acks_all_to_four_partitions",
        "consumer.group.range_assignor",
        "consumer.group.cooperative_sticky_assignor",
        "consumer.manual_commit_and_resume",
        "consumer.auto_commit",
        "consumer.seek_by_timestamp",
        "admin.describe_cluster",
        "admin.describe_topics",
        "admin.describe_configs",
        "admin.incremental_alter_configs",
        "admin.create_partitions",
        "admin.list_offsets",
        "admin.list_and_describe_consumer_groups",
        "admin.alter_and_delete_consumer_group_offsets",
        "admin.delete_consumer_groups",
        "admin.delete_records",
        "admin.describe_log_dirs",
        "admin.describe_producers",
        "admin.describe_features",
        "admin.describe_acls_security_disabled",
        "admin.list_transactions",
        "admin.elect_leaders_not_needed",
        "admin.delete_topics",
    ]
)


def compile_program(out: Path) -> Path:
    """javac once; the classes land in ``out``."""
    subprocess.run(
        ["javac", "-nowarn", "-d", str(out), "-cp", f"{KAFKA_HOME}/libs/*", str(PROGRAM)],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return out


@pytest.fixture(scope="module")
def java_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    skip_unless_available(java_unavailable(javac=True))
    base = tmp_path_factory.mktemp("java-client")
    classes = compile_program(base / "classes")
    broker = BrokerProcess(
        base / "broker",
        {"num.partitions": "1", "default.replication.factor": "1", "group.initial.rebalance.delay.ms": "0"},
    ).start()
    try:
        t0 = time.monotonic()
        run = subprocess.run(
            ["java", *JVM_FLAGS, "-cp", f"{classes}:{KAFKA_HOME}/libs/*", "StromClientChecks", broker.bootstrap],
            capture_output=True,
            text=True,
            timeout=600,
        )
        seconds = time.monotonic() - t0
    finally:
        broker.stop()
    results: dict[str, str] = {}
    for line in run.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASS", "FAIL"):
            name, _, detail = rest.partition(" ")
            results[name] = "passed" if word == "PASS" else f"failed: {detail}"
    results["_stderr"] = run.stderr[-3000:]
    results["_seconds"] = f"{seconds:.1f}"
    yield results


@pytest.mark.parametrize("check", CHECKS)
def test_java_client(java_results: dict[str, str], check: str) -> None:
    got = java_results.get(check)
    assert got is not None, f"the Java program never reported {check}; its stderr:\n{java_results['_stderr']}"
    assert got == "passed", got


def test_the_program_reports_no_check_this_file_does_not_know(java_results: dict[str, str]) -> None:
    assert set(k for k in java_results if not k.startswith("_")) == set(CHECKS)

"""Transactions with the Java client 4.0, Kafka Streams 4.0 (exactly_once_v2) and `kafka-transactions.sh`.

A transactional producer commits, aborts and commits; read_committed and read_uncommitted
consumers read the topic; a consume-transform-produce loop sends the group's offsets to each
transaction (`compat_tests/features/java/TransactionalRoundTrip.java`). Then `kafka-transactions.sh
list`, `describe` and `describe-producers` show what Kafka's tool shows.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from compat_tests.support.jvm import KAFKA_HOME, java_unavailable

PROGRAM = Path(__file__).parent / "java" / "TransactionalRoundTrip.java"
pytestmark = pytest.mark.skipif(java_unavailable() is not None, reason=str(java_unavailable()))


def _tool(bootstrap: str, *args: str) -> list[list[str]]:
    done = subprocess.run(
        [f"{KAFKA_HOME}/bin/kafka-transactions.sh", "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [[cell.strip() for cell in line.split("\t")] for line in done.stdout.strip().splitlines()]


def run_round_trip(bootstrap: str, topic: str, transactional_id: str) -> None:
    """Kafka 4.0's Java client (java/TransactionalRoundTrip.java) commits 13 records and aborts 5
    on ``topic``, read_committed and read_uncommitted consumers read them, and a
    consume-transform-produce loop sends its offsets to the transaction; checked here."""
    done = subprocess.run(
        [
            "java",
            "-Xshare:auto",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{KAFKA_HOME}/libs/*",
            str(PROGRAM),
            bootstrap,
            topic,
            transactional_id,
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    facts = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    assert facts["committed"] == ",".join(f"c{i}" for i in range(13))
    assert facts["uncommitted"] == "18"
    # 13 records + 5 aborted + 3 markers: the group's next offset is 21 - 1 = 20 (the last marker's)
    assert (facts["transformed"], facts["group-offset"]) == ("13", "20")
    assert facts["output"] == ",".join(f"C{i}" for i in range(13))


def test_java_transactional_producer_consumers_and_kafka_transactions_tool(broker):
    run_round_trip(broker.bootstrap, "jt", "java-tx")

    listed = _tool(broker.bootstrap, "list")
    assert listed[0][:4] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert sorted((row[0], row[3]) for row in listed[1:]) == [
        ("java-tx", "CompleteCommit"),
        ("java-tx-ctp", "CompleteCommit"),
    ]
    # The Java client 4.0 uses transaction version 2, which Strom finalizes as Kafka 4.0 does: each
    # of its three transactions (commit, abort, commit) ended with an epoch bump (EndTxn v5), and
    # the last marker carries epoch 3 (it clears the sequence numbers of epoch 2)
    described = _tool(broker.bootstrap, "describe", "--transactional-id", "java-tx")
    row = dict(zip(described[0], described[1], strict=False))
    assert (row["TransactionalId"], row["ProducerEpoch"], row["TransactionState"], row["TransactionTimeoutMs"]) == (
        "java-tx",
        "3",
        "CompleteCommit",
        "60000",
    )
    producers = _tool(broker.bootstrap, "describe-producers", "--topic", "jt", "--partition", "0")
    row = dict(zip(producers[0], producers[1], strict=False))
    assert (row["ProducerEpoch"], row["LastSequence"], row["CurrentTransactionStartOffset"]) == ("3", "-1", "None")


def test_kafka_streams_exactly_once_v2_word_count(broker, tmp_path):
    """Kafka Streams 4.0 (in-memory stores, processing.guarantee=exactly_once_v2): a repartitioned
    count over 1,000 lines; a read_committed reader of the output sees the exact final counts."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("wc-in", 2, 1), NewTopic("wc-out", 2, 1)]).values():
        future.result(30)
    done = subprocess.run(
        [
            "java",
            "-Xshare:auto",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{KAFKA_HOME}/libs/*",
            str(PROGRAM.with_name("EosWordCount.java")),
            broker.bootstrap,
            "wc-in",
            "wc-out",
            "1000",
            str(tmp_path / "streams-state"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "done", done.stdout
    assert sorted(line for line in lines if "=" in line and not line.startswith("expected=")) == [
        "alpha=600",
        "beta=600",
        "delta=600",
        "epsilon=600",
        "gamma=600",
    ]


def test_kafka_producer_perf_test_with_a_transactional_id(broker):
    done = subprocess.run(
        [
            f"{KAFKA_HOME}/bin/kafka-producer-perf-test.sh",
            "--topic",
            "perf",
            "--num-records",
            "20000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--transactional-id",
            "perf-tx",
            "--transaction-duration-ms",
            "200",
            "--producer-props",
            f"bootstrap.servers={broker.bootstrap}",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "20000 records sent" in done.stdout
    described = _tool(broker.bootstrap, "describe", "--transactional-id", "perf-tx")
    assert dict(zip(described[0], described[1], strict=False))["TransactionState"] == "CompleteCommit"

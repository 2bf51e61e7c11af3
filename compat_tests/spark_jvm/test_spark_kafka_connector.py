"""Spark 4.0's JVM `kafka` connector against Strom, with PySpark 4.0 in its own virtual environment.

The connector (../shared/jvm/spark-kafka-4.0.0) is tied to its Spark version, so the job runs
under the interpreter of a PySpark 4.0 virtual environment (``STROM_SPARK40_PYTHON``, else
``/tmp/strom-spark40-venv/bin/python``, which .ci/run creates where absent), one SparkSession for
every check (``job.py``): batch write and read with headers, minPartitions,
startingOffsetsByTimestamp, kafka.group.id, Structured Streaming resuming from its checkpoint, and
failOnDataLoss after retention deleted records the query had not read. This file creates and seeds
the topics, runs the job once, and turns each check into a test.

Skipped without that interpreter, Java or the connector jars, unless STROM_COMPAT_REQUIRE_ALL=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.support.jvm import skip_unless_available
from strom.tools.broker_process import BrokerProcess

HERE = Path(__file__).resolve().parent
JOB = HERE / "job.py"
JARS_DIR = Path(os.environ.get("STROM_SPARK_KAFKA_JARS", HERE.parents[2] / "shared" / "jvm" / "spark-kafka-4.0.0"))
PYTHON = Path(os.environ.get("STROM_SPARK40_PYTHON", "/tmp/strom-spark40-venv/bin/python"))
BASE_TS = 1_700_000_000_000
LOSS_OLD, LOSS_NEW = 15, 2
CHECKS = [
    "batch_write_and_read_with_headers",
    "min_partitions",
    "starting_offsets_by_timestamp",
    "kafka_group_id",
    "streaming_checkpoint_resume",
    "fail_on_data_loss",
]

pytestmark = pytest.mark.timeout(900)


def unavailable() -> str | None:
    if shutil.which("java") is None:
        return "no java runtime"
    if not PYTHON.exists():
        return f"no PySpark 4.0 interpreter at {PYTHON} (set STROM_SPARK40_PYTHON; .ci/run creates it)"
    if not sorted(JARS_DIR.glob("*.jar")):
        return f"no connector jars in {JARS_DIR}"
    return None


def seed(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic("s-write", 3, 1),
        NewTopic("s-time", 1, 1),
        NewTopic("s-stream", 2, 1),
        NewTopic("s-loss", 1, 1, config={"internal.segment.bytes": "100", "retention.ms": "86400000"}),
    ]
    for f in admin.create_topics(topics).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce("s-time", value=f"t{i}".encode(), partition=0, timestamp=BASE_TS + i * 1000)
    for i in range(20):
        producer.produce("s-stream", value=f"early-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    # s-loss: records ten minutes old, then current ones; one batch (and so one segment) each
    now = int(time.time() * 1000)
    for i in range(LOSS_OLD + LOSS_NEW):
        ts = now - 600_000 if i < LOSS_OLD else now
        producer.produce("s-loss", value=f"loss-{i}".encode(), partition=0, timestamp=ts)
        assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def spark_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    skip_unless_available(unavailable())
    base = tmp_path_factory.mktemp("spark-jvm")
    broker = BrokerProcess(
        base / "broker",
        {
            "num.partitions": "1",
            "default.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.check.interval.ms": "300",
        },
    ).start()
    try:
        seed(broker.bootstrap)
        config = {
            "bootstrap": broker.bootstrap,
            "jars": ",".join(str(p) for p in sorted(JARS_DIR.glob("*.jar"))),
            "workdir": str(base / "work"),
            "base_ts": BASE_TS,
            "loss_old": LOSS_OLD,
            "loss_new": LOSS_NEW,
        }
        (base / "work").mkdir()
        t0 = time.monotonic()
        run = subprocess.run(
            [str(PYTHON), str(JOB), json.dumps(config)],
            capture_output=True,
            text=True,
            timeout=800,
            cwd=base,
            env={**os.environ, "PYSPARK_PYTHON": str(PYTHON)},
        )
        seconds = time.monotonic() - t0
    finally:
        broker.stop()
    results: dict[str, str] = {}
    for line in run.stdout.splitlines():
        if line.startswith("RESULT "):
            _, name, status = line.split(" ", 2)
            results[name] = status
    results["_log"] = f"exit {run.returncode} after {seconds:.1f} s\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    yield results


@pytest.mark.parametrize("check", CHECKS)
def test_spark_kafka_connector(spark_results: dict[str, str], check: str) -> None:
    got = spark_results.get(check)
    assert got is not None, f"the Spark job never reported {check}:\n{spark_results['_log']}"
    assert got == "passed", f"{got}\n{spark_results['_log'][-4000:]}"

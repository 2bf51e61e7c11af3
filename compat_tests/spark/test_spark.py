"""Real PySpark (local[2]) with the ``stromkafka`` data source against a live Strom.

One SparkSession for the module. Skipped where PySpark or Java is missing, unless
STROM_COMPAT_REQUIRE_ALL is set (CI installs both).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.tools.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(600)


def _spark_missing() -> str | None:
    if shutil.which("java") is None:
        return "no java runtime"
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"pyspark not installed ({exc})"
    return None


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    missing = _spark_missing()
    if missing:
        if os.environ.get("STROM_COMPAT_REQUIRE_ALL", "") not in ("", "0"):
            pytest.fail(missing)
        pytest.skip(missing)
    from strom.tools.spark.pipeline import spark_session

    session = spark_session("strom-compat")
    try:
        yield session
    finally:
        session.stop()


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    """Send records; returns {(partition, offset): record} from the delivery reports."""
    from confluent_kafka import Producer

    placed: dict[tuple[int, int], dict[str, Any]] = {}

    def delivered(err: Any, msg: Any, record: dict[str, Any]) -> None:
        assert err is None, err
        placed[(msg.partition(), msg.offset())] = record

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for r in records:
        producer.produce(
            topic,
            value=r["value"],
            key=r.get("key"),
            partition=r.get("partition", -1),
            timestamp=r.get("timestamp", 0),
            headers=r.get("headers"),
            on_delivery=lambda err, msg, r=r: delivered(err, msg, r),
        )
    assert producer.flush(30) == 0
    assert len(placed) == len(records)
    return placed


def _reader(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("stromkafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _values(spark: Any, bootstrap: str, topic: str) -> Counter[bytes]:
    rows = _reader(spark, bootstrap, subscribe=topic).select("value").collect()
    return Counter(bytes(r.value) for r in rows)


BASE_TS = 1_700_000_000_000


def test_batch_read_of_a_six_partition_topic_returns_every_record_with_offsets_timestamps_and_headers(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "spark-six", 6)
    records = [
        {
            "value": f"v{i}".encode(),
            "key": f"k{i}".encode() if i % 5 else None,
            "partition": i % 6,
            "timestamp": BASE_TS + i * 1000,
            "headers": [("n", str(i).encode()), ("empty", None)],
        }
        for i in range(60)
    ]
    placed = _produce(bootstrap, "spark-six", records)
    df = _reader(spark, bootstrap, subscribe="spark-six", includeHeaders="true")
    assert df.rdd.getNumPartitions() == 6
    rows = df.selectExpr(
        "key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType", "headers"
    ).collect()
    got = {(r.partition, r.offset): r for r in rows}
    assert set(got) == set(placed)
    for where, record in placed.items():
        row = got[where]
        assert (row.key, bytes(row.value), row.topic) == (record["key"], record["value"], "spark-six")
        assert row.ts == record["timestamp"] and row.timestampType == 0
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers] == record["headers"]
    assert sorted(o for p, o in placed if p == 0) == list(range(10))


def test_batch_read_honours_json_offsets_timestamps_assign_and_patterns(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "spark-range", 2)
    _produce(
        bootstrap,
        "spark-range",
        [
            {"value": f"{p}-{i}".encode(), "partition": p, "timestamp": BASE_TS + i * 1000}
            for p in (0, 1)
            for i in range(10)
        ],
    )
    part = (
        _reader(
            spark,
            bootstrap,
            subscribe="spark-range",
            startingOffsets='{"spark-range": {"0": 3, "1": -2}}',
            endingOffsets='{"spark-range": {"0": 5, "1": -1}}',
        )
        .select("partition", "offset")
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in part) == [(0, 3), (0, 4)] + [(1, i) for i in range(10)]
    by_time = _reader(
        spark,
        bootstrap,
        subscribe="spark-range",
        startingTimestamp=str(BASE_TS + 7000),
        endingOffsetsByTimestamp=f'{{"spark-range": {{"0": {BASE_TS + 9000}, "1": {BASE_TS + 8000}}}}}',
    )
    assert sorted((r.partition, r.offset) for r in by_time.collect()) == [(0, 7), (0, 8), (1, 7)]
    assigned = _reader(spark, bootstrap, assign='{"spark-range": [1]}').select("partition").collect()
    assert {r.partition for r in assigned} == {1} and len(assigned) == 10
    matched = _reader(spark, bootstrap, subscribePattern="spark-ran.*").count()
    assert matched == 20
    split = _reader(spark, bootstrap, subscribe="spark-range", minPartitions="5")
    assert split.rdd.getNumPartitions() >= 5 and split.count() == 20


def test_batch_write_sends_keys_values_headers_and_partitions(spark: Any, shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "spark-written", 3)
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}", i % 3, [("src", b"spark")]) for i in range(30)],
        "key string, value string, partition int, headers array<struct<key: string, value: binary>>",
    )
    df.write.format("stromkafka").mode("append").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", "spark-written"
    ).save()
    rows = _reader(spark, bootstrap, subscribe="spark-written", includeHeaders="true").collect()
    assert sorted((bytes(r.key).decode(), bytes(r.value).decode(), r.partition) for r in rows) == sorted(
        (f"k{i}", f"v{i}", i % 3) for i in range(30)
    )
    assert all([(h.key, bytes(h.value)) for h in r.headers] == [("src", b"spark")] for r in rows)


def _move(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path, **options: str) -> list[int]:
    stream = (
        spark.readStream.format("stromkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        stream = stream.option(k, v)
    query = (
        stream.load()
        .selectExpr("key", "value")
        .writeStream.format("stromkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress]


def test_available_now_moves_a_topic_exactly_once_and_a_rerun_moves_nothing_twice(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "spark-src", 3)
    _create(bootstrap, "spark-dst", 2)
    first = [{"value": f"a{i}".encode(), "partition": i % 3} for i in range(45)]
    _produce(bootstrap, "spark-src", first)
    checkpoint = tmp_path / "checkpoint"
    batches = _move(spark, bootstrap, "spark-src", "spark-dst", checkpoint, maxOffsetsPerTrigger="20")
    assert sum(batches) == 45 and max(batches) <= 20
    assert _values(spark, bootstrap, "spark-dst") == Counter(r["value"] for r in first)

    assert sum(_move(spark, bootstrap, "spark-src", "spark-dst", checkpoint)) == 0
    assert _values(spark, bootstrap, "spark-dst") == Counter(r["value"] for r in first)

    more = [{"value": f"b{i}".encode(), "partition": i % 3} for i in range(7)]
    _produce(bootstrap, "spark-src", more)
    assert sum(_move(spark, bootstrap, "spark-src", "spark-dst", checkpoint)) == 7
    assert _values(spark, bootstrap, "spark-dst") == Counter(r["value"] for r in first + more)


def test_streaming_assign_and_pattern_start_where_asked(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "spark-assign", 2)
    _produce(
        bootstrap, "spark-assign", [{"value": f"{p}:{i}".encode(), "partition": p} for p in (0, 1) for i in range(5)]
    )
    query = (
        spark.readStream.format("stromkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", '{"spark-assign": [1]}')
        .option("startingOffsets", '{"spark-assign": {"1": 2}}')
        .load()
        .selectExpr("CAST(value AS STRING) AS v")
        .writeStream.format("memory")
        .queryName("assigned")
        .option("checkpointLocation", str(tmp_path / "a"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert sorted(r.v for r in spark.sql("SELECT v FROM assigned").collect()) == ["1:2", "1:3", "1:4"]
    query = (
        spark.readStream.format("stromkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", "spark-assi.*")
        .option("startingOffsets", "latest")
        .load()
        .writeStream.format("memory")
        .queryName("latest")
        .option("checkpointLocation", str(tmp_path / "b"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert spark.sql("SELECT * FROM latest").count() == 0


def test_the_pipelines_counts_equal_the_generators_tally(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    from strom.tools.spark.pipeline import PipelineConfig, run_pipeline

    cfg = PipelineConfig(events=400, clicks_topic="pipe-clicks", counts_topic="pipe-counts")
    result = run_pipeline(spark, shared_broker.bootstrap, cfg, tmp_path / "pipeline")
    assert sum(result.expected.values()) == 400
    assert result.counts == result.expected
    topic_rows = _reader(spark, shared_broker.bootstrap, subscribe="pipe-counts").count()
    assert topic_rows == len(result.expected)

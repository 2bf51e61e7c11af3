"""Spark 4.0's own `kafka` source and sink (the JVM connector, Kafka's Java client 3.9 inside)
against Strom, all in one SparkSession. Run with PySpark 4.0 (its own virtual environment: the
connector is tied to its Spark version) by ``test_spark_kafka_connector.py``, which creates and
seeds the topics first:

    python job.py CONFIG_JSON     # {"bootstrap", "jars", "workdir", "base_ts", "loss_old": n, "loss_new": n}

Prints ``RESULT <check> passed`` or ``RESULT <check> failed: <why>`` per check.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

cfg = json.loads(sys.argv[1])
BOOTSTRAP = cfg["bootstrap"]
WORK = Path(cfg["workdir"])
BASE_TS = cfg["base_ts"]


def result(name: str, fn: Callable[[], None]) -> None:
    try:
        fn()
        print(f"RESULT {name} passed", flush=True)
    except BaseException as exc:
        detail = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:1500]
        print(f"RESULT {name} failed: {detail}", flush=True)
        traceback.print_exc()


def require(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


spark = (
    SparkSession.builder.master("local[2]")
    .appName("strom-spark-kafka-connector")
    .config("spark.jars", cfg["jars"])
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.driver.memory", "512m")
    .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def read(topic: str, **options: str) -> Any:
    r = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def batch_write_and_read_with_headers() -> None:
    rows = [(f"k{i}", f"v{i}", [("h", f"hv{i}".encode())]) for i in range(30)]
    df = spark.createDataFrame(rows, "key string, value string, headers array<struct<key:string,value:binary>>")
    df.write.format("kafka").option("kafka.bootstrap.servers", BOOTSTRAP).option("topic", "s-write").save()
    got = read("s-write", includeHeaders="true").collect()
    require(len(got) == 30, f"read {len(got)} of 30")
    by_key = {bytes(r.key).decode(): r for r in got}
    for i in range(30):
        r = by_key[f"k{i}"]
        require(bytes(r.value).decode() == f"v{i}", f"value of k{i}: {r.value}")
        require(
            [(h.key, bytes(h.value)) for h in r.headers] == [("h", f"hv{i}".encode())], f"headers of k{i}: {r.headers}"
        )
        require(r.topic == "s-write" and r.timestampType == 0, f"row {r}")
    require({r.partition for r in got} == {0, 1, 2}, f"partitions {sorted({r.partition for r in got})}")


def min_partitions() -> None:
    df = read("s-write", minPartitions="6")
    require(df.rdd.getNumPartitions() >= 6, f"{df.rdd.getNumPartitions()} Spark partitions for minPartitions=6")
    require(df.count() == 30, "count")


def starting_offsets_by_timestamp() -> None:
    spec = json.dumps({"s-time": {"0": BASE_TS + 4500}})
    got = read("s-time", startingOffsetsByTimestamp=spec).select("offset", "timestamp").collect()
    require([r.offset for r in got] == [5, 6, 7, 8, 9], f"offsets {[r.offset for r in got]}")
    require(int(got[0].timestamp.timestamp() * 1000) == BASE_TS + 5000, f"timestamp {got[0].timestamp}")


def kafka_group_id() -> None:
    got = read("s-time", **{"kafka.group.id": "spark-fixed-group"}).count()
    require(got == 10, f"read {got} of 10 with kafka.group.id")
    q = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", "s-time")
        .option("startingOffsets", "earliest")
        .option("kafka.group.id", "spark-fixed-stream")
        .load()
        .writeStream.format("memory")
        .queryName("fixed_group")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    require(spark.table("fixed_group").count() == 10, "streaming read with kafka.group.id")


def stream(topic: str, out: Path, checkpoint: Path, **options: str) -> Any:
    r = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        r = r.option(k, v)
    return (
        r.load()
        .select(F.col("partition"), F.col("offset"), F.col("value").cast("string").alias("value"))
        .writeStream.format("json")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )


def rows_in(out: Path) -> list[Any]:
    return spark.read.json(str(out)).collect() if (out / "_spark_metadata").exists() else []


def streaming_checkpoint_resume() -> None:
    out, ck = WORK / "stream-out", WORK / "stream-ck"
    q = stream("s-stream", out, ck).trigger(availableNow=True).start()
    q.awaitTermination(180)
    first = rows_in(out)
    require(len(first) == 20, f"first run wrote {len(first)} of 20")
    more = spark.createDataFrame([(f"late-{i}",) for i in range(10)], "value string")
    more.write.format("kafka").option("kafka.bootstrap.servers", BOOTSTRAP).option("topic", "s-stream").save()
    # a new query on the same checkpoint: what a restarted job does
    q = stream("s-stream", out, ck).trigger(availableNow=True).start()
    q.awaitTermination(180)
    rows = rows_in(out)
    keys = [(r.partition, r.offset) for r in rows]
    require(len(rows) == 30 and len(set(keys)) == 30, f"{len(rows)} rows, {len(set(keys))} distinct after the restart")
    late = sorted(r.value for r in rows if r.value.startswith("late-"))
    require(late == sorted(f"late-{i}" for i in range(10)), f"the restart read {late}")


def admin_call(fn: Callable[[Any, Any], Any]) -> Any:
    """Kafka's AdminClient (from the connector's kafka-clients jar) through py4j."""
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", BOOTSTRAP)
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        return fn(jvm, admin)
    finally:
        admin.close()


def set_retention(jvm: Any, admin: Any) -> None:
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    topic_type = (
        jvm.java.lang.Class.forName("org.apache.kafka.common.config.ConfigResource$Type", True, loader)
        .getField("TOPIC")
        .get(None)
    )
    set_op = (
        jvm.java.lang.Class.forName("org.apache.kafka.clients.admin.AlterConfigOp$OpType", True, loader)
        .getField("SET")
        .get(None)
    )
    resource = jvm.org.apache.kafka.common.config.ConfigResource(topic_type, "s-loss")
    ops = jvm.java.util.ArrayList()
    ops.add(
        jvm.org.apache.kafka.clients.admin.AlterConfigOp(
            jvm.org.apache.kafka.clients.admin.ConfigEntry("retention.ms", "300000"), set_op
        )
    )
    changes = jvm.java.util.HashMap()
    changes.put(resource, ops)
    admin.incrementalAlterConfigs(changes).all().get()


def fail_on_data_loss() -> None:
    out, ck = WORK / "loss-out", WORK / "loss-ck"
    total = cfg["loss_old"] + cfg["loss_new"]
    # 1. a query reads the first 5 records, then stops
    q = stream("s-loss", out, ck, maxOffsetsPerTrigger="5").trigger(processingTime="1 hour").start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any((p.get("numInputRows") or 0) > 0 for p in q.recentProgress):
        time.sleep(0.2)
    q.stop()
    first = sorted(r.offset for r in rows_in(out))
    require(first == [0, 1, 2, 3, 4], f"first query read {first}")
    # 2. retention deletes the older records the query has not read (each is a segment of its own)
    admin_call(set_retention)
    deadline = time.monotonic() + 60
    earliest = 0
    while time.monotonic() < deadline:
        earliest = read("s-loss", failOnDataLoss="false").agg(F.min("offset")).first()[0]
        if earliest == cfg["loss_old"]:
            break
        time.sleep(0.5)
    require(earliest == cfg["loss_old"], f"retention left the log starting at {earliest}")
    # 3. the query restarted with failOnDataLoss=true fails
    saved = WORK / "loss-ck-copy"
    shutil.copytree(ck, saved)
    q = stream("s-loss", out, ck, failOnDataLoss="true").trigger(availableNow=True).start()
    try:
        q.awaitTermination(120)
        raise AssertionError("the query went on although data it had not read was deleted")
    except AssertionError:
        raise
    except Exception as exc:  # StreamingQueryException
        require("lost" in str(exc).lower() or "out of range" in str(exc).lower(), f"failed with {exc}")
    # 4. with failOnDataLoss=false it skips to what is left
    q = stream("s-loss", out, saved, failOnDataLoss="false").trigger(availableNow=True).start()
    q.awaitTermination(120)
    offsets = sorted(r.offset for r in rows_in(out))
    require(offsets == [0, 1, 2, 3, 4] + list(range(cfg["loss_old"], total)), f"offsets read {offsets}")


result("batch_write_and_read_with_headers", batch_write_and_read_with_headers)
result("min_partitions", min_partitions)
result("starting_offsets_by_timestamp", starting_offsets_by_timestamp)
result("kafka_group_id", kafka_group_id)
result("streaming_checkpoint_resume", streaming_checkpoint_resume)
result("fail_on_data_loss", fail_on_data_loss)
spark.stop()

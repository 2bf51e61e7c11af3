"""`strom pipeline`: the real-time click-stream pipeline on local Spark.

1. uses the broker at ``--bootstrap-server``, or starts a standalone one (a child process on
   127.0.0.1, OS-chosen port, data in the work dir) and stops it at the end;
2. generates a click stream of JSON events (``{"event_id", "user", "page", "action", "ts"}``, ``ts``
   in epoch milliseconds, slightly out of order) into the clicks topic, keeping its own tally of
   events per page per window, then one ``heartbeat`` event later than every window so the
   watermark closes them all;
3. runs a Structured Streaming job (``Trigger.AvailableNow``) that parses the events, counts them
   per page per tumbling window with a watermark (append mode: a window is written once, final),
   and writes each micro-batch's closed windows to the counts topic (JSON values keyed by page)
   and to Parquet, while a progress line shows batches and rows;
4. prints a summary and whether Spark's counts equal the generator's tally.

``--format kafka`` runs the same job on Spark's own kafka connector instead of ``stromkafka``.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

PAGES = ("/home", "/search", "/products", "/product/42", "/cart", "/checkout", "/help", "/about")
ACTIONS = ("view", "click", "scroll")
HEARTBEAT_PAGE = "heartbeat"
BASE_TIME_MS = 1_700_000_000_000
BROKER_READY_S = 20.0
PROGRESS_EVERY_S = 0.5

WindowKey = tuple[int, str]  # (window start in epoch ms, page)


@dataclass(frozen=True)
class PipelineConfig:
    """Sizes and names of one run."""

    events: int = 2000
    pages: int = 6
    users: int = 50
    window_s: int = 10
    watermark_s: int = 5
    span_s: int = 120
    jitter_s: int = 3
    clicks_topic: str = "clicks"
    counts_topic: str = "page-counts"
    partitions: int = 3
    seed: int = 7
    source_format: str = "stromkafka"


# --------------------------------------------------------------------------- generator (pure)


def generate_events(cfg: PipelineConfig) -> list[dict[str, Any]]:
    """Click events spread over ``span_s`` seconds, each up to ``jitter_s`` out of order."""
    rng = random.Random(cfg.seed)
    pages = PAGES[: max(1, min(cfg.pages, len(PAGES)))]
    step = cfg.span_s * 1000 / max(1, cfg.events)
    events = []
    for i in range(cfg.events):
        ts = BASE_TIME_MS + int(i * step) - rng.randint(0, cfg.jitter_s * 1000)
        events.append(
            {
                "event_id": i,
                "user": f"user-{rng.randrange(cfg.users)}",
                "page": rng.choice(pages),
                "action": rng.choice(ACTIONS),
                "ts": max(BASE_TIME_MS, ts),
            }
        )
    return events


def heartbeat(cfg: PipelineConfig) -> dict[str, Any]:
    """An event far enough past the last one that the watermark closes every counted window."""
    ts = BASE_TIME_MS + (cfg.span_s + 2 * cfg.window_s + cfg.watermark_s) * 1000
    return {"event_id": -1, "user": "-", "page": HEARTBEAT_PAGE, "action": "heartbeat", "ts": ts}


def tally(events: list[dict[str, Any]], window_s: int) -> Counter[WindowKey]:
    """The generator's own count of events per (window start, page)."""
    width = window_s * 1000
    return Counter((e["ts"] - e["ts"] % width, e["page"]) for e in events if e["page"] != HEARTBEAT_PAGE)


# --------------------------------------------------------------------------- broker


def _local_broker(workdir: Path):
    """A standalone Strom for the pipeline, stopped on exit (its log: `<workdir>/broker/broker.err`)."""
    from strom.tools.broker_process import BrokerProcess, BrokerProcessError

    broker = BrokerProcess(workdir / "broker")
    try:
        return broker.start(timeout=BROKER_READY_S)
    except BrokerProcessError as exc:
        raise click.ClickException(f"the broker did not start: {exc}") from None


# --------------------------------------------------------------------------- producing


def create_topics(bootstrap: str, cfg: PipelineConfig) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(cfg.clicks_topic, cfg.partitions, 1), NewTopic(cfg.counts_topic, 1, 1)])
    for topic, future in futures.items():
        try:
            future.result(30)
        except Exception as exc:  # an existing topic is fine: the run reuses it
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise click.ClickException(f"creating {topic}: {exc}") from None


def produce_events(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10})
    for event in events:
        payload = json.dumps(event).encode()
        while True:
            try:
                producer.produce(
                    topic,
                    key=event["user"].encode(),
                    value=payload,
                    timestamp=event["ts"],
                    on_delivery=lambda err, _msg: err and errors.append(err.str()),
                )
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(60)
    if errors or left:
        raise click.ClickException(f"producing clicks failed: {errors[:1] or f'{left} unacknowledged'}")


# --------------------------------------------------------------------------- Spark job

EVENT_SCHEMA = "event_id long, user string, page string, action string, ts long"


def counts_frame(spark: Any, bootstrap: str, cfg: PipelineConfig) -> Any:
    """The streaming DataFrame of closed (window, page) counts."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format(cfg.source_format)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", cfg.clicks_topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    # The heartbeat is counted too (a filter here would be pushed below the watermark and hide
    # it from it); its window ends past the watermark it sets, so it is never written.
    return (
        events.withWatermark("event_time", f"{cfg.watermark_s} seconds")
        .groupBy(F.window("event_time", f"{cfg.window_s} seconds"), "page")
        .count()
        .select(
            F.unix_millis(F.col("window.start")).alias("window_start_ms"),
            F.unix_millis(F.col("window.end")).alias("window_end_ms"),
            "page",
            "count",
        )
    )


def batch_writer(bootstrap: str, cfg: PipelineConfig, parquet_dir: Path) -> Callable[[Any, int], None]:
    """foreachBatch body: the batch's closed windows to Parquet and to the counts topic."""
    from pyspark.sql import functions as F

    def write(batch: Any, batch_id: int) -> None:
        batch = batch.persist()
        try:
            batch.write.mode("append").parquet(str(parquet_dir))
            (
                batch.select(F.col("page").alias("key"), F.to_json(F.struct("*")).alias("value"))
                .write.format(cfg.source_format)
                .mode("append")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", cfg.counts_topic)
                .save()
            )
        finally:
            batch.unpersist()

    return write


@dataclass
class PipelineResult:
    """What a run produced: Spark's counts read back from Parquet, and the generator's tally."""

    counts: Counter[WindowKey]
    expected: Counter[WindowKey]
    batches: int
    input_rows: int
    parquet_dir: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def matches(self) -> bool:
        return self.counts == self.expected


def run_job(
    spark: Any,
    bootstrap: str,
    cfg: PipelineConfig,
    workdir: Path,
    progress: Callable[[dict[str, Any]], None] = lambda p: None,
) -> tuple[int, int]:
    """Run the streaming query to the end of the available data; (batches, input rows)."""
    parquet_dir, checkpoint = workdir / "counts.parquet", workdir / "checkpoint"
    query = (
        counts_frame(spark, bootstrap, cfg)
        .writeStream.outputMode("append")
        .foreachBatch(batch_writer(bootstrap, cfg, parquet_dir))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    shown = None
    while query.isActive:
        latest = query.lastProgress
        if latest and latest.get("timestamp") != shown:
            shown = latest.get("timestamp")
            progress(latest)
        query.awaitTermination(PROGRESS_EVERY_S)
    query.awaitTermination()
    history = query.recentProgress
    return len(history), sum(p.get("numInputRows", 0) for p in history)


def read_counts(spark: Any, parquet_dir: Path) -> Counter[WindowKey]:
    if not parquet_dir.exists():
        return Counter()
    rows = spark.read.parquet(str(parquet_dir)).collect()
    return Counter({(r["window_start_ms"], r["page"]): r["count"] for r in rows})


def run_pipeline(
    spark: Any,
    bootstrap: str,
    cfg: PipelineConfig,
    workdir: Path,
    progress: Callable[[dict[str, Any]], None] = lambda p: None,
) -> PipelineResult:
    """Generate, produce, stream, read back: everything but the broker and the Spark session."""
    workdir.mkdir(parents=True, exist_ok=True)
    events = generate_events(cfg)
    create_topics(bootstrap, cfg)
    produce_events(bootstrap, cfg.clicks_topic, events + [heartbeat(cfg)])
    batches, rows = run_job(spark, bootstrap, cfg, workdir, progress)
    parquet_dir = workdir / "counts.parquet"
    return PipelineResult(read_counts(spark, parquet_dir), tally(events, cfg.window_s), batches, rows, parquet_dir)


def spark_session(app: str = "strom-pipeline") -> Any:
    """A local[2] session with the stromkafka source registered."""
    from pyspark.sql import SparkSession

    from strom.tools.spark.source import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


# --------------------------------------------------------------------------- command


def _progress_line(p: dict[str, Any]) -> None:
    state = sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators", []))
    rate = p.get("processedRowsPerSecond") or 0.0
    click.echo(
        f"\r  batch {p.get('batchId', 0):>3}  input rows {p.get('numInputRows', 0):>6}  "
        f"{rate:>9.0f} rows/s  open windows {state:>4}",
        err=True,
        nl=False,
    )


def summarize(result: PipelineResult, cfg: PipelineConfig) -> Iterator[str]:
    per_page: Counter[str] = Counter()
    for (_, page), n in result.counts.items():
        per_page[page] += n
    yield f"events generated: {cfg.events} on {cfg.partitions} partitions of {cfg.clicks_topic!r}"
    yield f"micro-batches: {result.batches}, rows read by Spark: {result.input_rows}"
    yield (
        f"windows written: {len(result.counts)} ({cfg.window_s}s windows, {cfg.watermark_s}s watermark) "
        f"to {cfg.counts_topic!r} and {result.parquet_dir}"
    )
    for page, n in per_page.most_common():
        yield f"  {page:<14} {n:>7}"
    verdict = "yes" if result.matches else f"NO ({sum(result.counts.values())} vs {sum(result.expected.values())})"
    yield f"counts equal the generator's tally: {verdict}"


@click.command("pipeline")
@click.option(
    "--bootstrap-server",
    "bootstrap_server",
    metavar="HOST:PORT",
    help="Use this cluster [default: start a standalone Strom for the run].",
)
@click.option("--events", default=PipelineConfig.events, show_default=True, type=click.IntRange(1))
@click.option("--pages", default=PipelineConfig.pages, show_default=True, type=click.IntRange(1, len(PAGES)))
@click.option(
    "--window",
    "window_s",
    default=PipelineConfig.window_s,
    show_default=True,
    type=click.IntRange(1),
    help="Window length in seconds.",
)
@click.option(
    "--watermark",
    "watermark_s",
    default=PipelineConfig.watermark_s,
    show_default=True,
    type=click.IntRange(0),
    help="Watermark delay in seconds (events are at most 3s late).",
)
@click.option("--clicks-topic", default=PipelineConfig.clicks_topic, show_default=True)
@click.option("--counts-topic", default=PipelineConfig.counts_topic, show_default=True)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Checkpoint, Parquet output and broker data [default: a new temporary directory].",
)
@click.option(
    "--format",
    "source_format",
    default="stromkafka",
    show_default=True,
    type=click.Choice(["stromkafka", "kafka"]),
    help="Spark data source: the pure-Python one, or Spark's kafka connector (needs its jars).",
)
def pipeline(
    bootstrap_server: str | None,
    events: int,
    pages: int,
    window_s: int,
    watermark_s: int,
    clicks_topic: str,
    counts_topic: str,
    work_dir: Path | None,
    source_format: str,
) -> None:
    """Click stream -> Kafka -> Spark Structured Streaming (counts per page per window) -> Kafka + Parquet."""
    cfg = PipelineConfig(
        events=events,
        pages=pages,
        window_s=window_s,
        watermark_s=watermark_s,
        jitter_s=min(PipelineConfig.jitter_s, watermark_s),
        clicks_topic=clicks_topic,
        counts_topic=counts_topic,
        source_format=source_format,
    )
    workdir = work_dir or Path(tempfile.mkdtemp(prefix="strom-pipeline-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with _local_broker(workdir) if bootstrap_server is None else _Given(bootstrap_server) as broker:
        click.echo(f"broker {broker.bootstrap}; work dir {workdir}; starting Spark (local[2])", err=True)
        spark = spark_session()
        try:
            result = run_pipeline(spark, broker.bootstrap, cfg, workdir, _progress_line)
        finally:
            click.echo("", err=True)
            spark.stop()
    for line in summarize(result, cfg):
        click.echo(line)
    if not result.matches:
        raise SystemExit(1)


class _Given:
    """A cluster the user already runs: nothing to start or stop."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __enter__(self) -> _Given:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

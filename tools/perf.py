"""`strom perf produce|consume`: throughput and latency tests, as kafka-producer-perf-test and
kafka-consumer-perf-test, on confluent-kafka's Producer and Consumer.

Numbers describe the whole path (client library, network, broker) on this machine; they are
reported, never asserted.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from strom.tools.common import (
    ClusterError,
    client_config,
    cluster_errors,
    connection_options,
    describe_kafka_error,
    emit_json,
    ensure_reachable,
    import_confluent,
    parse_kv,
    read_properties,
    remember_connection,
    resolve_connection,
    stderr,
)

MB = 1024 * 1024
PERCENTILES = (50.0, 95.0, 99.0, 99.9)
POLL_S = 0.1
CONSUME_BATCH = 500


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, int(round(pct / 100.0 * len(sorted_values))) - 1))
    return sorted_values[rank]


@dataclass
class ProduceStats:
    """Delivery latencies (ms) and errors, fed from delivery callbacks."""

    record_size: int
    latencies: list[float] = field(default_factory=list)
    failed: int = 0
    first_error: str | None = None
    window_start: float = field(default_factory=time.monotonic)
    window_count: int = 0
    window_latency: float = 0.0
    window_max: float = 0.0

    def callback(self, sent_at: float):
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.failed += 1
                self.first_error = self.first_error or describe_kafka_error(err, "delivery failed")
                return
            latency = (time.monotonic() - sent_at) * 1000.0
            self.latencies.append(latency)
            self.window_count += 1
            self.window_latency += latency
            self.window_max = max(self.window_max, latency)

        return on_delivery

    def report_window(self) -> None:
        now = time.monotonic()
        elapsed = max(now - self.window_start, 1e-9)
        if self.window_count:
            rate = self.window_count / elapsed
            stderr(
                f"{self.window_count} records sent, {rate:.1f} records/sec "
                f"({rate * self.record_size / MB:.2f} MB/sec), "
                f"{self.window_latency / self.window_count:.1f} ms avg latency, "
                f"{self.window_max:.1f} ms max latency."
            )
        self.window_start, self.window_count, self.window_latency, self.window_max = now, 0, 0.0, 0.0

    def summary(self, sent: int, elapsed_s: float) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        done = len(ordered)
        rate = done / max(elapsed_s, 1e-9)
        return {
            "records_sent": sent,
            "records_delivered": done,
            "records_failed": self.failed,
            "records_per_sec": rate,
            "mb_per_sec": rate * self.record_size / MB,
            "avg_latency_ms": sum(ordered) / done if done else 0.0,
            "max_latency_ms": ordered[-1] if done else 0.0,
            **{f"p{p:g}_ms": percentile(ordered, p) for p in PERCENTILES},
        }


def _payloads(record_size: int | None, payload_file: Path | None, delimiter: str) -> list[bytes]:
    if (record_size is None) == (payload_file is None):
        raise click.UsageError("give exactly one of --record-size and --payload-file")
    if payload_file is not None:
        items = [p.encode("utf-8") for p in payload_file.read_text().split(delimiter) if p]
        if not items:
            raise click.BadParameter(f"{payload_file} holds no payloads", param_hint="--payload-file")
        return items
    alphabet = bytes(range(ord("A"), ord("Z") + 1))
    return [bytes(random.choice(alphabet) for _ in range(record_size))]


class Throttle:
    """Keeps the send rate at or below ``per_second`` (no limit when it is negative)."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.start = time.monotonic()

    def wait(self, sent: int, producer: Any) -> None:
        if self.per_second <= 0:
            return
        ahead = sent / self.per_second - (time.monotonic() - self.start)
        if ahead > 0:
            producer.poll(ahead)


def _props(
    values: tuple[str, ...], extra_args: tuple[str, ...], config_file: Path | None, option: str
) -> dict[str, str]:
    """Props from a file, then ``--x-props k=v`` (repeatable, or followed by more k=v words as Kafka allows)."""
    stray = [a for a in extra_args if "=" not in a]
    if stray:
        raise click.UsageError(f"unexpected argument(s) {' '.join(stray)}; {option} takes KEY=VALUE items")
    return {**(read_properties(config_file) if config_file else {}), **parse_kv(values + extra_args, option)}


@click.group("perf")
@connection_options
@click.pass_context
def perf(ctx: click.Context, bootstrap_server: str | None, command_config: Path | None) -> None:
    """Producer and consumer performance tests (as kafka-producer-perf-test / kafka-consumer-perf-test)."""
    remember_connection(ctx, bootstrap_server, command_config)


@perf.command("produce")
@connection_options
@click.argument("extra_props", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--topic", required=True)
@click.option("--num-records", type=click.IntRange(min=1), required=True, help="How many records to send.")
@click.option("--record-size", type=click.IntRange(min=0), help="Bytes per record value.")
@click.option(
    "--payload-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Send values picked at random from this file instead.",
)
@click.option("--payload-delimiter", default="\n", show_default=True, help="Separates payloads in --payload-file.")
@click.option("--throughput", type=float, default=-1, show_default=True, help="Max records/s; -1 for no limit.")
@click.option(
    "--producer-props",
    "producer_props",
    multiple=True,
    metavar="KEY=VALUE",
    help="librdkafka producer settings, e.g. acks=1 linger.ms=5 (repeatable).",
)
@click.option("--producer.config", "producer_config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--reporting-interval-ms", type=click.IntRange(min=100), default=5000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
@cluster_errors
def perf_produce(
    bootstrap_server: str | None,
    command_config: Path | None,
    extra_props: tuple[str, ...],
    topic: str,
    num_records: int,
    record_size: int | None,
    payload_file: Path | None,
    payload_delimiter: str,
    throughput: float,
    producer_props: tuple[str, ...],
    producer_config: Path | None,
    reporting_interval_ms: int,
    as_json: bool,
) -> None:
    """Send records as fast as allowed; report records/s, MB/s and latency percentiles."""
    payloads = _payloads(record_size, payload_file, payload_delimiter)
    props = _props(producer_props, extra_props, producer_config, "--producer-props")
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    ck = import_confluent()
    ensure_reachable(bootstrap)
    producer = ck.Producer(client_config(bootstrap, {**extra, **props}))
    stats = ProduceStats(record_size if record_size is not None else sum(map(len, payloads)) // len(payloads))
    started = time.monotonic()
    sent = _send_all(producer, topic, payloads, num_records, Throttle(throughput), stats, reporting_interval_ms / 1000)
    producer.flush()
    summary = stats.summary(sent, time.monotonic() - started)
    _print_produce_summary(summary, as_json)
    if stats.failed:
        raise ClusterError(f"{stats.failed} of {sent} records failed: {stats.first_error}")


def _send_all(
    producer: Any,
    topic: str,
    payloads: list[bytes],
    count: int,
    throttle: Throttle,
    stats: ProduceStats,
    interval_s: float,
) -> int:
    next_report = time.monotonic() + interval_s
    for i in range(count):
        value = payloads[i % len(payloads)] if len(payloads) == 1 else random.choice(payloads)
        while True:
            try:
                producer.produce(topic, value, on_delivery=stats.callback(time.monotonic()))
                break
            except BufferError:
                producer.poll(POLL_S)
        producer.poll(0)
        throttle.wait(i + 1, producer)
        if time.monotonic() >= next_report:
            stats.report_window()
            next_report = time.monotonic() + interval_s
    return count


def _print_produce_summary(s: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(s)
        return
    pcts = ", ".join(f"{s[f'p{p:g}_ms']:.0f} ms {p:g}th" for p in PERCENTILES)
    click.echo(
        f"{s['records_delivered']} records sent, {s['records_per_sec']:.1f} records/sec "
        f"({s['mb_per_sec']:.2f} MB/sec), {s['avg_latency_ms']:.2f} ms avg latency, "
        f"{s['max_latency_ms']:.2f} ms max latency, {pcts}."
    )


# --------------------------------------------------------------------------- consume


@dataclass
class ConsumeStats:
    messages: int = 0
    bytes: int = 0
    first_at: float | None = None  # monotonic time of the first and the last record
    last_at: float | None = None

    @property
    def fetch_seconds(self) -> float:
        """Time from the first record to the last: the transfer, without start-up or assignment."""
        if self.first_at is None or self.last_at is None:
            return 0.0
        return self.last_at - self.first_at


def _consume_until(consumer: Any, ck: Any, wanted: int, idle_timeout_s: float) -> ConsumeStats:
    stats = ConsumeStats()
    last_seen = time.monotonic()
    while stats.messages < wanted and time.monotonic() - last_seen < idle_timeout_s:
        batch = consumer.consume(min(CONSUME_BATCH, wanted - stats.messages), timeout=POLL_S)
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() != ck.KafkaError._PARTITION_EOF:
                    raise ClusterError(describe_kafka_error(err, "consume failed"))
                continue
            last_seen = time.monotonic()
            stats.first_at = stats.first_at or last_seen
            stats.last_at = last_seen
            stats.messages += 1
            stats.bytes += len(msg.value() or b"") + len(msg.key() or b"")
    return stats


def _assign_all(consumer: Any, ck: Any, topic: str) -> None:
    meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise ClusterError(f"cannot read {topic}: no such topic (list the topics with `strom topics list`)")
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in sorted(meta.partitions)])


@perf.command("consume")
@connection_options
@click.argument("extra_props", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--topic", required=True)
@click.option("--messages", type=click.IntRange(min=1), required=True, help="How many records to read.")
@click.option("--group", help="Read as this consumer group (subscribe) instead of assigning every partition.")
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Give up (exit 1) when no record arrives for this long.",
)
@click.option("--consumer-props", "consumer_props", multiple=True, metavar="KEY=VALUE")
@click.option("--consumer.config", "consumer_config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True)
@cluster_errors
def perf_consume(
    bootstrap_server: str | None,
    command_config: Path | None,
    extra_props: tuple[str, ...],
    topic: str,
    messages: int,
    group: str | None,
    timeout_ms: int,
    consumer_props: tuple[str, ...],
    consumer_config: Path | None,
    as_json: bool,
) -> None:
    """Read records from the beginning; report MB/s and records/s."""
    props = _props(consumer_props, extra_props, consumer_config, "--consumer-props")
    bootstrap, extra = resolve_connection(bootstrap_server, command_config)
    ck = import_confluent()
    ensure_reachable(bootstrap)
    consumer = ck.Consumer(
        client_config(
            bootstrap,
            {
                "group.id": group or f"strom-perf-consumer-{os.getpid()}",
                "enable.auto.commit": group is not None,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                **extra,
                **props,
            },
        )
    )
    started = time.time()
    try:
        if group:
            consumer.subscribe([topic])
        else:
            _assign_all(consumer, ck, topic)
        stats = _consume_until(consumer, ck, messages, timeout_ms / 1000)
    finally:
        consumer.close()
    summary = _consume_summary(stats, started, time.time())
    _print_consume_summary(summary, as_json)
    if stats.messages < messages:
        raise ClusterError(
            f"read {stats.messages} of {messages} records: nothing arrived for {timeout_ms} ms "
            f"(does the topic hold that many? check with `strom topics describe --topic {topic}`)"
        )


def _consume_summary(stats: ConsumeStats, started: float, ended: float) -> dict[str, Any]:
    elapsed = max(ended - started, 1e-9)
    fetch_s = max(stats.fetch_seconds, 1e-9)
    mb = stats.bytes / MB
    return {
        "start_time_ms": int(started * 1000),
        "end_time_ms": int(ended * 1000),
        "data_consumed_mb": mb,
        "mb_per_sec": mb / elapsed,
        "records": stats.messages,
        "records_per_sec": stats.messages / elapsed,
        "fetch_time_ms": int(stats.fetch_seconds * 1000),
        "fetch_mb_per_sec": mb / fetch_s,
        "fetch_records_per_sec": stats.messages / fetch_s,
    }


def _print_consume_summary(s: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(s)
        return
    click.echo(
        "start.time.ms, end.time.ms, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    click.echo(
        f"{s['start_time_ms']}, {s['end_time_ms']}, {s['data_consumed_mb']:.4f}, {s['mb_per_sec']:.4f}, "
        f"{s['records']}, {s['records_per_sec']:.4f}, {s['fetch_time_ms']}, {s['fetch_mb_per_sec']:.4f}, "
        f"{s['fetch_records_per_sec']:.4f}"
    )

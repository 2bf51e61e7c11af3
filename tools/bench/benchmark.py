"""`strom bench` / `python -m strom.tools.bench.benchmark`: Strom's throughput, latency, start-up and memory,
each also as a ratio to a limit of this machine measured in the same run.

One run, in order:

1. machine limits, with no broker running: loopback TCP throughput and round-trip time, sequential
   write + fsync on the log dir's filesystem, ``python -c pass`` start-up, the resident memory of an
   interpreter that imported the broker, and the producing client's own rate (queueing to a
   listener that never answers) for every record size and codec;
2. broker start-up, run as an installed strom runs (compiled bytecode kept): spawn to first
   accepted TCP connection and to the answer of an ApiVersions request sent on it, median of
   several starts;
3. one broker (``BrokerProcess``): idle memory; produce throughput for 100-byte and 1 KiB records,
   1 and 6 partitions, acks=1 and acks=all, without and with lz4 (``--producers`` processes at
   once; ``rounds`` runs per setting, acks=1 and acks=all alternating, best kept); the
   consuming client's own drain rate (records it has already fetched, per record size); streaming
   consume throughput of the acks=1 topics (one process, ``consume`` of 500, timed from the first
   record, ``rounds`` runs, best kept); end-to-end latency at a fixed modest rate; 50
   connections x 20 one-record Produce requests in flight; peak memory (VmHWM); then broker CPU
   with consumers of 1,000 idle partitions, full fetches vs incremental fetch sessions, and the
   same against the reference Kafka 4.0 when it can run here (``bench_sessions``); transactions
   (``bench_txn``); share-group consume with 1, 2 and 4 share consumers and a classic consumer of
   the same records, against the reference Kafka 4.3.1 (``bench_share``); produce and consume over
   an SSL listener against the PLAINTEXT one, and against the reference Kafka 4.0 over SSL
   (``bench_tls``).

Clients are confluent-kafka with linger.ms=5, batch.num.messages=10000, consumer
fetch.queue.backoff.ms=1. Figures are reported, never asserted. The output is a table on stdout
and, with ``--json PATH``, the same report as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from strom.tools.bench import client as bench_client
from strom.tools.bench import compaction as bench_compaction
from strom.tools.bench import console as bench_console
from strom.tools.bench import files as bench_files
from strom.tools.bench import inflight as bench_inflight
from strom.tools.bench import machine as bench_machine
from strom.tools.bench import sessions as bench_sessions
from strom.tools.bench import share as bench_share
from strom.tools.bench import tls as bench_tls
from strom.tools.bench import txn as bench_txn

MIB = 1 << 20
SIZES = (100, 1024)
PARTITIONS = (1, 6)
ACKS = ("1", "all")
CODECS = ("none", "lz4")
PERCENTILES = (50.0, 95.0, 99.0, 99.9)
STARTUP_TIMEOUT_S = 15.0
IDLE_SETTLE_S = 1.0
ALONE_TRIES = 2

Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchSettings:
    """How much work each part of the run does (``full``, ``quick``, or a tiny smoke run)."""

    small_records: int = 1_000_000
    large_records: int = 200_000
    producers: int = 2
    rounds: int = 2
    latency_records: int = 20_000
    latency_rate: float = 5_000.0
    inflight_rounds: int = 5
    loopback_bytes: int = 1024 * MIB
    disk_bytes: int = 512 * MIB
    startup_runs: int = 5
    rtt_round_trips: int = 5_000
    session_partitions: int = 1000
    session_consumers: int = 4
    session_seconds: float = 10.0
    session_kafka: bool = True
    console_topics: int = 1_000
    console_partitions: int = 10
    console_rounds: int = 3
    txn_records: int = 200_000
    txn_kafka: bool = True
    tls_records: int = 300_000
    file_cache_partitions: int = 1000
    share_records: int = 100_000
    share_consumers: tuple[int, ...] = bench_share.CONSUMERS
    share_kafka: bool = True
    compaction_batches: int = bench_compaction.BATCHES

    def records(self, size: int) -> int:
        return self.small_records if size <= 100 else self.large_records


FULL = BenchSettings()
QUICK = BenchSettings(
    small_records=100_000,
    large_records=20_000,
    latency_records=5_000,
    inflight_rounds=2,
    loopback_bytes=256 * MIB,
    disk_bytes=128 * MIB,
    startup_runs=3,
    rtt_round_trips=2_000,
    session_seconds=5.0,
    console_topics=100,
    console_rounds=2,
    txn_records=50_000,
    tls_records=50_000,
    file_cache_partitions=300,
    share_records=20_000,
)


@dataclass
class Figure:
    """One measured figure, the machine reference it is divided by, and the issue's target if any."""

    key: str
    value: float
    unit: str
    reference: str
    ratio: float
    target: str | None = None
    met: bool | None = None


@dataclass
class Report:
    """Everything one run measured: the references, the figures, and the raw run details."""

    settings: dict[str, Any]
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def reference(self, key: str, value: float, unit: str, what: str) -> None:
        self.references[key] = {"value": value, "unit": unit, "what": what}

    def add(
        self,
        key: str,
        value: float,
        unit: str,
        reference: str,
        *,
        ref_value: float | None = None,
        target: tuple[str, Callable[[float], bool]] | None = None,
    ) -> None:
        base = self.references[reference]["value"] if ref_value is None else ref_value
        ratio = value / base if base else 0.0
        text, check = target if target else (None, None)
        self.figures.append(Figure(key, value, unit, reference, ratio, text, check(value) if check else None))

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "references": self.references,
            "figures": [asdict(f) for f in self.figures],
            "details": self.details,
        }


# --------------------------------------------------------------------------- machine limits


def measure_machine(report: Report, settings: BenchSettings, log_dir: Path, log: Log) -> None:
    # the client-alone rates go first: the disk test leaves dirty pages that steal CPU for a while
    for size in SIZES:
        for codec in CODECS:
            log(f"machine: client-alone produce rate, {size} B, {codec} (best of {ALONE_TRIES})")
            rate = max(
                bench_client.client_alone_rate(settings.records(size), size, codec, settings.producers)["rate"]
                for _ in range(ALONE_TRIES)
            )
            report.reference(
                _alone_key(size, codec),
                rate,
                "records/s",
                f"{settings.producers} confluent-kafka producer process(es) queueing "
                f"{size} B records ({codec}) with no broker answering, best of {ALONE_TRIES}",
            )
    log("machine: loopback throughput, round trip, interpreter start-up, baseline RSS, disk write")
    report.reference(
        "loopback_bytes_per_s",
        bench_machine.loopback_throughput(settings.loopback_bytes),
        "B/s",
        "one TCP stream through 127.0.0.1 (thread to thread)",
    )
    report.reference(
        "loopback_rtt_ms",
        bench_machine.loopback_rtt(settings.rtt_round_trips) * 1000,
        "ms",
        "64-byte ping/echo round trip over 127.0.0.1, median",
    )
    report.reference(
        "python_startup_s",
        bench_machine.interpreter_startup(settings.startup_runs),
        "s",
        "python -c pass, spawn to exit, median",
    )
    report.reference(
        "python_broker_imports_rss_bytes",
        bench_machine.baseline_rss(),
        "B",
        "resident memory of python after importing the broker's modules",
    )
    report.reference(
        "disk_write_bytes_per_s",
        bench_machine.disk_write(log_dir, settings.disk_bytes),
        "B/s",
        "sequential 1 MiB writes + fsync in the log dir's filesystem",
    )


def _alone_key(size: int, codec: str) -> str:
    return f"client_alone_{size}B_{codec}_records_per_s"


# --------------------------------------------------------------------------- start-up


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


def _connect(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=0.05)
    except OSError:
        return None


def installed_env(pycache: Path) -> dict[str, str]:
    """The environment of an installed strom: compiled bytecode kept (pip compiles on install; an
    editable checkout run with PYTHONDONTWRITEBYTECODE=1 would recompile every module per start).
    The bytecode goes under ``pycache``, not into the source tree."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def startup_seconds(workdir: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawning ``python -m strom.broker serve`` to its first accepted TCP connection, and
    to the answer to an ApiVersions request sent on that connection at once (what a client that
    starts together with the broker sees)."""
    from strom.tools.common import api_versions

    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "strom.broker",
        "serve",
        "--override",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
        "--override",
        f"log.dirs={workdir}",
        "--log-level",
        "WARNING",
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while (sock := _connect(port)) is None:
            if proc.poll() is not None or time.perf_counter() - start > STARTUP_TIMEOUT_S:
                raise bench_client.WorkloadError(f"broker did not accept on port {port} (exit {proc.poll()})")
            time.sleep(0.001)
        with sock:
            accepted = time.perf_counter() - start
            sock.settimeout(STARTUP_TIMEOUT_S)
            try:
                api_versions(sock)
            except (OSError, ValueError) as exc:
                raise bench_client.WorkloadError(f"broker accepted but did not answer ApiVersions: {exc}") from None
            return accepted, time.perf_counter() - start
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure_startup(report: Report, settings: BenchSettings, workdir: Path, log: Log) -> None:
    log(f"start-up: {settings.startup_runs} starts (after one that compiles the bytecode)")
    env = installed_env(workdir / "pycache")
    startup_seconds(workdir / "startup-warm", env)
    samples = [startup_seconds(workdir / f"startup-{i}", env) for i in range(settings.startup_runs)]
    report.details["startup_samples_s"] = samples
    report.add(
        "startup_to_first_connection_s",
        statistics.median(s[0] for s in samples),
        "s",
        "python_startup_s",
        target=("< 0.3 s", lambda v: v < 0.3),
    )
    report.add("startup_to_first_api_versions_s", statistics.median(s[1] for s in samples), "s", "python_startup_s")


# --------------------------------------------------------------------------- throughput


def _topic(size: int, partitions: int, acks: str, codec: str) -> str:
    return f"bench-{size}B-{partitions}p-acks{acks}-{codec}"


def _matrix() -> Iterator[tuple[int, int, str, str]]:
    for size in SIZES:
        for partitions in PARTITIONS:
            for acks in ACKS:
                for codec in CODECS:
                    yield size, partitions, acks, codec


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": bench_client._quiet()})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()], operation_timeout=30)
    for future in futures.values():
        future.result(60)


def _check(run: dict[str, Any], what: str) -> dict[str, Any]:
    if run["failed"]:
        raise bench_client.WorkloadError(f"{what}: {run['failed']} records failed ({run['first_error']})")
    return run


def measure_produce(report: Report, settings: BenchSettings, bootstrap: str, log: Log) -> None:
    """Each setting runs ``rounds`` times, acks=1 and acks=all taking turns, and keeps its
    best run: a disturbance (the kernel writing back the previous run's pages, say) only ever slows
    a run down, and alternating keeps it from landing on one side of the acks comparison."""
    for size in SIZES:
        for partitions in PARTITIONS:
            for codec in CODECS:
                best: dict[str, dict[str, Any]] = {}
                for round_ in range(settings.rounds):
                    for acks in ACKS:
                        count = settings.records(size)
                        log(
                            f"produce: {count} x {size} B, {partitions} partition(s), acks={acks}, {codec}, "
                            f"round {round_ + 1}/{settings.rounds}"
                        )
                        jobs = [
                            bench_client.ProduceJob(
                                bootstrap, _topic(size, partitions, acks, codec), count, size, acks, codec
                            )
                            for _ in range(settings.producers)
                        ]
                        run = _check(bench_client.run_producers(bench_client.produce_worker, jobs), "produce")
                        report.details.setdefault(f"produce_{size}B_{partitions}p_acks{acks}_{codec}_runs", []).append(
                            run
                        )
                        if acks not in best or run["rate"] > best[acks]["rate"]:
                            best[acks] = run
                for acks in ACKS:
                    target = (
                        (">= 900,000/s", lambda v: v >= 900_000)
                        if (size, partitions, acks, codec) == (100, 1, "1", "none")
                        else None
                    )
                    report.add(
                        f"produce_{size}B_{partitions}p_acks{acks}_{codec}_records_per_s",
                        best[acks]["rate"],
                        "records/s",
                        _alone_key(size, codec),
                        target=target,
                    )
    for size in SIZES:
        # uncompressed, the payload bytes land in the page cache as they came: set them against
        # the machine's own sequential write rate
        rate = _value(report, f"produce_{size}B_1p_acks1_none_records_per_s")
        report.add(f"produce_{size}B_1p_acks1_none_bytes_per_s", rate * size, "B/s", "disk_write_bytes_per_s")
    for size in SIZES:
        for codec in CODECS:
            key = f"produce_{size}B_6p_acks%s_{codec}_records_per_s"
            one, every = _value(report, key % "1"), _value(report, key % "all")
            target = (">= 0.9", lambda v: v >= 0.9) if (size, codec) == (100, "none") else None
            report.add(
                f"acks_all_over_acks1_{size}B_6p_{codec}",
                every / one if one else 0.0,
                "x",
                key % "1",
                ref_value=1.0,
                target=target,
            )


def _value(report: Report, key: str) -> float:
    return next(f.value for f in report.figures if f.key == key)


def measure_consume(report: Report, settings: BenchSettings, bootstrap: str, log: Log) -> None:
    """Streaming consume rates, each as a ratio to the consuming client's own rate for that record
    size: how fast it hands records to Python when they are all fetched already. Like produce,
    each setting runs ``rounds`` times and the best run counts."""
    for size in SIZES:
        expected = settings.records(size) * settings.producers * settings.rounds
        log(f"consume: client drain rate, {expected} x {size} B prefetched")
        drain = _check(bench_client.client_drain_rate(bootstrap, _topic(size, 1, "1", "none"), 1, expected), "drain")
        report.reference(
            _drain_key(size),
            drain["rate"],
            "records/s",
            f"one confluent-kafka consumer taking {size} B records it has already fetched "
            f"(consume of {bench_client.CONSUME_BATCH}), no fetching while timed",
        )
        for partitions in PARTITIONS:
            for codec in CODECS:
                name = f"consume_{size}B_{partitions}p_{codec}"
                runs = []
                for round_ in range(settings.rounds):
                    log(
                        f"consume: {expected} x {size} B, {partitions} partition(s), {codec}, "
                        f"round {round_ + 1}/{settings.rounds}"
                    )
                    runs.append(
                        _check(
                            bench_client.run_consumer(
                                bootstrap, _topic(size, partitions, "1", codec), partitions, expected
                            ),
                            "consume",
                        )
                    )
                report.details[f"{name}_runs"] = runs
                run = report.details[name] = max(runs, key=lambda r: r["rate"])
                target = (
                    (">= 1,300,000/s", lambda v: v >= 1_300_000)
                    if (size, partitions, codec) == (100, 1, "none")
                    else None
                )
                report.add(f"{name}_records_per_s", run["rate"], "records/s", _drain_key(size), target=target)


def _drain_key(size: int) -> str:
    return f"client_drain_{size}B_records_per_s"


# --------------------------------------------------------------------------- latency, in-flight, memory


def measure_latency(report: Report, settings: BenchSettings, bootstrap: str, log: Log) -> None:
    log(f"latency: {settings.latency_records} records at {settings.latency_rate:.0f}/s")
    create_topics(bootstrap, {"bench-latency": 1})
    ordered = bench_client.measure_latency(
        bootstrap, "bench-latency", settings.latency_records, settings.latency_rate, 100
    )
    for pct in PERCENTILES:
        value = ordered[max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered)) - 1))]
        report.add(f"end_to_end_latency_p{pct:g}_ms", value, "ms", "loopback_rtt_ms")


def measure_inflight(report: Report, settings: BenchSettings, port: int, log: Log) -> None:
    log(f"in flight: 50 connections x 20 one-record Produce requests, {settings.inflight_rounds} rounds")
    create_topics(f"127.0.0.1:{port}", {"bench-inflight": 6})
    result = bench_inflight.run_inflight(port, "bench-inflight", 6, rounds=settings.inflight_rounds)
    facts = bench_inflight.summary(result)
    report.details["inflight"] = facts
    if facts["errors"]:
        raise bench_client.WorkloadError(f"in-flight produce: {facts['errors']} error responses")
    rtt = report.references["loopback_rtt_ms"]["value"]
    report.add("inflight_1000_requests_round_ms", facts["round_seconds_median"] * 1000, "ms", "loopback_rtt_ms")
    report.add("inflight_max_latency_ms", facts["max_latency_s"] * 1000, "ms", "loopback_rtt_ms", ref_value=rtt)
    report.add(
        "inflight_stalled_requests",
        facts["stalls"],
        "requests",
        "inflight_requests",
        ref_value=float(facts["requests"]),
        target=("0 over 1 s", lambda v: v == 0),
    )


def _memory(report: Report, key: str, value: int, target: tuple[str, Callable[[float], bool]] | None) -> None:
    report.add(
        key,
        value / MIB,
        "MiB",
        "python_broker_imports_rss_bytes",
        ref_value=report.references["python_broker_imports_rss_bytes"]["value"] / MIB,
        target=target,
    )


# --------------------------------------------------------------------------- the run


class Profiler:
    """``py-spy record`` attached to the broker while the load runs (``--py-spy PATH``)."""

    def __init__(self, pid: int, out: Path | None) -> None:
        self.proc = None
        if out is not None:
            self.proc = subprocess.Popen(
                ["py-spy", "record", "-p", str(pid), "-f", "raw", "-o", str(out), "--nonblocking", "-r", "200"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_console_benchmark(settings: BenchSettings, workdir: Path, log: Log, report: Report | None = None) -> Report:
    """The console's figures (``bench_console``): client throughput with the console polled, and
    page/API latency with ``console_topics`` x ``console_partitions`` partitions."""
    report = report if report is not None else Report(settings=asdict(settings))
    bench_console.measure_overhead(report, settings, workdir, log)
    bench_console.measure_latency(report, settings, workdir, log)
    return report


def run_benchmark(settings: BenchSettings, workdir: Path, log: Log, profile: Path | None = None) -> Report:
    """Measure everything into one ``Report``; the broker runs under ``workdir``."""
    from strom.tools.broker_process import BrokerProcess

    report = Report(settings=asdict(settings))
    measure_machine(report, settings, workdir, log)
    measure_startup(report, settings, workdir, log)
    # no initial rebalance delay, as the reference Kafkas run (the share section times a group's join)
    broker = BrokerProcess(
        workdir / "broker", {"auto.create.topics.enable": "true", "group.initial.rebalance.delay.ms": "0"}
    ).start()
    profiler = None
    try:
        time.sleep(IDLE_SETTLE_S)
        _memory(
            report,
            "broker_idle_rss_mib",
            bench_machine.proc_status_bytes(broker.pid, "VmRSS"),
            ("< 60 MiB", lambda v: v < 60),
        )
        create_topics(broker.bootstrap, {_topic(s, p, a, c): p for s, p, a, c in _matrix()})
        profiler = Profiler(broker.pid, profile)
        measure_produce(report, settings, broker.bootstrap, log)
        measure_consume(report, settings, broker.bootstrap, log)
        measure_latency(report, settings, broker.bootstrap, log)
        measure_inflight(report, settings, broker.port, log)
        _memory(report, "broker_peak_rss_mib", bench_machine.proc_status_bytes(broker.pid, "VmHWM"), None)
        bench_sessions.measure_fetch_sessions(
            report,
            broker.pid,
            broker.port,
            log,
            partitions=settings.session_partitions,
            consumers=settings.session_consumers,
            seconds=settings.session_seconds,
            workdir=workdir,
            kafka=settings.session_kafka,
        )
        bench_txn.measure_transactions(
            report, broker.bootstrap, log, records=settings.txn_records, kafka=settings.txn_kafka, workdir=workdir
        )
        bench_share.measure_share_groups(
            report,
            broker.bootstrap,
            log,
            records=settings.share_records,
            consumers=settings.share_consumers,
            kafka=settings.share_kafka,
            workdir=workdir,
        )
    finally:
        if profiler is not None:
            profiler.stop()
        broker.stop()
    bench_tls.measure_tls(report, log, records=settings.tls_records, workdir=workdir, kafka=settings.txn_kafka)
    run_console_benchmark(settings, workdir, log, report)
    bench_files.add_to_report(report, settings.file_cache_partitions, workdir, log)
    bench_compaction.add_to_report(report, workdir, log, settings.compaction_batches)
    return report


def _number(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value < 100 else f"{value:.1f}"


def format_table(report: Report) -> str:
    """The figures as an aligned text table, then the references they are divided by."""
    figures = [["figure", "value", "unit", "ratio", "reference", "target", "met"]]
    for f in report.figures:
        met = "" if f.met is None else ("yes" if f.met else "NO")
        figures.append([f.key, _number(f.value), f.unit, f"{f.ratio:.3g}", f.reference, f.target or "", met])
    references = [["reference", "value", "unit", "what"]]
    for key, ref in report.references.items():
        references.append([key, _number(ref["value"]), ref["unit"], ref["what"]])
    return _aligned(figures) + "\n\n" + _aligned(references)


def _aligned(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows)


@click.command("bench")
@click.option("--quick", is_flag=True, help="Smaller counts: about 30 s instead of about 5 min.")
@click.option(
    "--records", type=click.IntRange(min=1), help="100-byte records per produce run (1 KiB runs send a fifth)."
)
@click.option(
    "--producers",
    type=click.IntRange(min=1),
    help="Producer processes per produce run (default 2: one Python producer cannot reach the target alone).",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write the report as JSON here."
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the broker's data (default: a temporary directory, removed after).",
)
@click.option(
    "--py-spy",
    "profile",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Record the broker with py-spy (raw format) during the load into this file.",
)
@click.option(
    "--console-only",
    is_flag=True,
    help="Only the console's figures: throughput with it polled, page latency with many partitions.",
)
def bench(
    quick: bool,
    records: int | None,
    producers: int | None,
    json_path: Path | None,
    workdir: Path | None,
    profile: Path | None,
    console_only: bool = False,
) -> None:
    """Benchmark a local Strom broker against this machine's own limits."""
    from strom.tools.broker_process import BrokerProcessError

    settings = QUICK if quick else FULL
    if records is not None:
        settings = replace(settings, small_records=records, large_records=max(1, records // 5))
    if producers is not None:
        settings = replace(settings, producers=producers)

    def log(message: str) -> None:
        click.echo(message, err=True)

    try:

        def run(directory: Path) -> Report:
            if console_only:
                return run_console_benchmark(settings, directory, log)
            return run_benchmark(settings, directory, log, profile)

        if workdir is not None:
            report = run(workdir)
        else:
            with tempfile.TemporaryDirectory(prefix="strom-bench-") as tmp:
                report = run(Path(tmp))
    except (
        bench_client.WorkloadError,
        bench_machine.MeasurementError,
        bench_inflight.InflightError,
        bench_sessions.SessionBenchError,
        bench_txn.TxnBenchError,
        bench_share.ShareBenchError,
        BrokerProcessError,
    ) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_table(report))
    if json_path is not None:
        json_path.write_text(json.dumps(report.to_json(), indent=2))


if __name__ == "__main__":
    bench()

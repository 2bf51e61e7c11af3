"""`strom bench-testbroker`: a typical integration test timed end to end, against the embedded
broker, `strom serve` as a process and the reference Kafka 4.0, in one run; and the idle memory
of an embedded broker.

The test, the same for all three: start the broker, create a topic (AdminClient), produce 100
records of 100 bytes (confluent-kafka, flush), consume them in a new consumer group, commit
synchronously, close the clients, stop the broker. Each run is a fresh interpreter that has
imported confluent-kafka and strom.testing (what a test session has loaded); the embedded broker
is timed twice in it: ``cold`` is the first broker of the process (the broker's own modules load
then), ``warm`` the second (every later test of a session). The `strom serve` process is timed
from spawn to its ready file, the reference Kafka from ``kafka-reference.sh start`` (which
formats its storage and waits for its port) to ``stop`` returning.

Children run as an installed strom runs, with compiled bytecode kept (``installed_env`` of
`strom bench`: pip compiles on install), after one run that compiles it; ``--no-bytecode`` runs
them as a checkout under PYTHONDONTWRITEBYTECODE=1 would, compiling every module at each start.

Figures are medians of ``--runs`` runs (the reference Kafka: ``--kafka-runs``), reported with
their ratio to the reference Kafka's time in the same run; never asserted.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import click

RECORDS = 100
RECORD_BYTES = 100
IDLE_S = 2.0
TARGET_S = 0.5


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def workload(bootstrap: str) -> dict[str, float]:
    """create a topic, produce 100, consume them in a new group, commit; seconds per phase."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    quiet = {"log_level": 0}
    topic = f"it-{uuid.uuid4().hex[:8]}"
    phases = {}
    t = time.perf_counter()
    admin = AdminClient({"bootstrap.servers": bootstrap, **quiet})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    phases["create_s"] = time.perf_counter() - t
    t = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **quiet})
    value = b"x" * RECORD_BYTES
    for _ in range(RECORDS):
        producer.produce(topic, value)
    if producer.flush(30):
        raise RuntimeError("records not delivered")
    phases["produce_s"] = time.perf_counter() - t
    t = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **quiet,
        }
    )
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 60
    while seen < RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(0.05)
        if msg is not None and not msg.error():
            seen += 1
    if seen < RECORDS:
        raise RuntimeError(f"consumed {seen} of {RECORDS}")
    consumer.commit(asynchronous=False)
    consumer.close()
    phases["consume_commit_s"] = time.perf_counter() - t
    return phases


def run_embedded() -> dict:
    import confluent_kafka  # noqa: F401  (loaded by a test session before its first broker)

    from strom.testing import StromBroker

    out = {}
    for name in ("cold", "warm"):
        start = time.perf_counter()
        broker = StromBroker()
        broker.start()
        started = time.perf_counter()
        phases = workload(broker.bootstrap_servers)
        before_stop = time.perf_counter()
        broker.close()
        end = time.perf_counter()
        out[name] = {"total_s": end - start, "start_s": started - start, "stop_s": end - before_stop, **phases}
    return out


RESET_ROUNDS = 5


def run_reset() -> dict:
    """The reset between tests on a shared broker: each round leaves what a test leaves (two topics
    with records, a consumer group with committed offsets, a fault rule), then ``reset()`` is timed.
    Beside it, what a fresh broker per test costs instead (start and close). Run in the bench's own
    process: a reset happens in a session whose broker is warm."""
    import confluent_kafka  # noqa: F401

    from strom.testing import StromBroker

    resets, fresh = [], []
    with StromBroker() as broker:
        broker.snapshot()
        for _ in range(RESET_ROUNDS):
            workload(broker.bootstrap_servers)  # a topic with 100 records, a group with its commit
            broker.create_topic(f"extra-{uuid.uuid4().hex[:8]}", 3)
            broker.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=None)
            start = time.perf_counter()
            done = broker.reset()
            resets.append(time.perf_counter() - start)
            if len(done["deleted_topics"]) != 2 or len(done["deleted_groups"]) != 1 or done["kept"]:
                raise RuntimeError(f"reset left something behind: {done}")
    for _ in range(RESET_ROUNDS):
        start = time.perf_counter()
        with StromBroker():
            pass
        fresh.append(time.perf_counter() - start)
    return {"reset_s": statistics.median(resets), "fresh_broker_s": statistics.median(fresh)}


def format_reset(reset: dict) -> str:
    return (
        f"reset between tests on a shared embedded broker: {reset['reset_s'] * 1000:.1f} ms "
        f"(two topics, one group with commits, a fault rule; a fresh broker per test instead: "
        f"{reset['fresh_broker_s'] * 1000:.1f} ms to start and close)"
    )


def run_idle() -> dict:
    """Memory an idle embedded broker adds to a test process (its modules, loop, logs)."""
    import confluent_kafka  # noqa: F401

    from strom.testing import StromBroker

    base = _rss()
    with StromBroker():
        time.sleep(IDLE_S)
        return {"idle_rss_bytes": _rss() - base, "process_rss_bytes": _rss(), "base_rss_bytes": base}


def run_process(workdir: Path) -> dict:
    import confluent_kafka  # noqa: F401

    ready = workdir / "ready.json"
    start = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom.broker",
            "serve",
            "--dev",
            "--log-level",
            "WARNING",
            "--override",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--override",
            f"log.dirs={workdir / 'data'}",
            "--ready-file",
            str(ready),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("strom serve did not start")
            time.sleep(0.005)
        doc = json.loads(ready.read_text())
        started = time.perf_counter()
        phases = workload(doc["bootstrap_servers"])
        before_stop = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        end = time.perf_counter()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {"total_s": end - start, "start_s": started - start, "stop_s": end - before_stop, **phases}


def kafka_script() -> Path | None:
    here = Path(__file__).resolve()
    candidates = [Path(os.environ["STROM_JVM"]) / "kafka-reference.sh"] if os.environ.get("STROM_JVM") else []
    candidates += [p / "shared" / "jvm" / "kafka-reference.sh" for p in here.parents]
    return next((c for c in candidates if c.is_file()), None)


def run_kafka(workdir: Path) -> dict:
    import confluent_kafka  # noqa: F401

    script = kafka_script()
    if script is None:
        raise RuntimeError("kafka-reference.sh not found (set STROM_JVM to shared/jvm)")
    start = time.perf_counter()
    result = subprocess.run(
        ["bash", str(script), "start", str(workdir)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode != 0:
        raise RuntimeError(f"reference Kafka did not start: {result.stderr[-2000:]}")
    try:
        port = int(result.stdout.split()[0])
        started = time.perf_counter()
        phases = workload(f"127.0.0.1:{port}")
        before_stop = time.perf_counter()
    finally:
        subprocess.run(
            ["bash", str(script), "stop", str(workdir)], capture_output=True, timeout=120, stdin=subprocess.DEVNULL
        )
    end = time.perf_counter()
    return {"total_s": end - start, "start_s": started - start, "stop_s": end - before_stop, **phases}


def _run_cluster() -> dict:
    from strom.tools.bench.cluster_bench import run_cluster

    return run_cluster()


def _child(kind: str, workdir: Path, env: dict[str, str] | None = None) -> dict:
    """One run in a fresh interpreter, as a test session would start."""
    result = subprocess.run(
        [sys.executable, "-m", "strom.tools.bench.testbroker", "--child", kind, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    if result.returncode != 0:
        raise click.ClickException(f"{kind} run failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(runs: int, kafka_runs: int, workdir: Path, log, bytecode: bool = True) -> dict:
    results: dict[str, list[dict]] = {
        "embedded_cold": [],
        "embedded_warm": [],
        "serve_process": [],
        "kafka_reference": [],
    }
    idle = []
    clusters: list[dict] = []  # the in-process cluster's rows (cluster_bench)
    if bytecode:
        from strom.tools.bench.benchmark import installed_env

        env = installed_env(workdir / "pycache")
        log("compiling the bytecode (one embedded and one process run, not counted)")
        _child("embedded", workdir / "compile-e", env)
        _child("process", workdir / "compile-p", env)
    else:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for i in range(runs):
        log(f"run {i + 1}/{runs}: embedded broker (cold and warm), strom serve process")
        embedded = _child("embedded", workdir / f"e{i}", env)
        results["embedded_cold"].append(embedded["cold"])
        results["embedded_warm"].append(embedded["warm"])
        idle.append(_child("idle", workdir / f"i{i}", env)["idle_rss_bytes"])
        results["serve_process"].append(_child("process", workdir / f"p{i}", env))
        log(f"run {i + 1}/{runs}: in-process 3-broker cluster (start, failover test)")
        clusters.append(_child("cluster", workdir / f"c{i}", env))
    for i in range(kafka_runs):
        log(f"reference Kafka run {i + 1}/{kafka_runs}")
        results["kafka_reference"].append(_child("kafka", workdir / f"k{i}", env))
    summary = {
        kind: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for kind, rs in results.items() if rs
    }
    summary["embedded_idle_rss_bytes"] = statistics.median(idle)
    return {"median": summary, "runs": results, "bytecode_cached": bytecode, "cluster_runs": clusters}


def format_report(report: dict) -> str:
    median = report["median"]
    kafka = median.get("kafka_reference", {}).get("total_s")
    rows = [["broker", "total s", "start", "create", "produce", "consume+commit", "stop", "vs Kafka", "target"]]
    for kind in ("embedded_cold", "embedded_warm", "serve_process", "kafka_reference"):
        if kind not in median:
            continue
        m = median[kind]
        target = ""
        if kind.startswith("embedded"):
            target = f"< {TARGET_S} s: " + ("yes" if m["total_s"] < TARGET_S else "NO")
        rows.append(
            [
                kind,
                f"{m['total_s']:.3f}",
                f"{m['start_s']:.3f}",
                f"{m['create_s']:.3f}",
                f"{m['produce_s']:.3f}",
                f"{m['consume_commit_s']:.3f}",
                f"{m['stop_s']:.3f}",
                f"{m['total_s'] / kafka:.3f}" if kafka else "-",
                target,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows)
    cached = report.get("bytecode_cached", True)
    table += "\n\nbytecode: " + (
        "compiled and kept, as an installed strom runs"
        if cached
        else "not kept (PYTHONDONTWRITEBYTECODE=1): every cold start compiles strom's modules"
    )
    if report.get("cluster_runs"):
        from strom.tools.bench.cluster_bench import format_rows

        table += "\n\n" + format_rows(report["cluster_runs"])
    return (
        table + f"\n\nembedded broker idle memory: {median['embedded_idle_rss_bytes'] / 2**20:.1f} MiB "
        f"(RSS of a test process with an idle broker minus before it started: the broker's modules, loop and logs)"
    )


@click.command("bench-testbroker")
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Runs of the embedded and the process broker (median reported).",
)
@click.option(
    "--kafka-runs",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Runs against the reference Kafka (0: skip it).",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write every run as JSON here."
)
@click.option(
    "--bytecode/--no-bytecode",
    default=True,
    show_default=True,
    help="Keep compiled bytecode as an installed strom does, or compile at every start.",
)
@click.option("--child", type=click.Choice(["embedded", "idle", "process", "kafka", "cluster"]), hidden=True)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), hidden=True)
def bench_testbroker(
    runs: int, kafka_runs: int, json_path: Path | None, bytecode: bool, child: str | None, workdir: Path | None
) -> None:
    """Time a typical integration test against the embedded broker, strom serve and Kafka."""
    if child is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        result = {
            "embedded": run_embedded,
            "idle": run_idle,
            "process": lambda: run_process(workdir),
            "kafka": lambda: run_kafka(workdir),
            "cluster": _run_cluster,
        }[child]()
        click.echo(json.dumps(result))
        return
    if kafka_runs and kafka_script() is None:
        click.echo("reference Kafka not found (kafka-reference.sh): its column is left out", err=True)
        kafka_runs = 0
    with tempfile.TemporaryDirectory(prefix="strom-bench-tb-") as tmp:
        report = measure(runs, kafka_runs, Path(tmp), lambda m: click.echo(m, err=True), bytecode)
    click.echo("reset between tests (in this process, on a warm broker)", err=True)
    report["reset"] = run_reset()
    click.echo(format_report(report))
    click.echo("\n" + format_reset(report["reset"]))
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    bench_testbroker()

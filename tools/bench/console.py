"""The console's part of `strom bench`: what polling the console costs Kafka clients, and how fast
its pages and API answer on a broker with many partitions.

1. Overhead: one broker with the console on; produce and then consume the same workload as the
   main benchmark's 100-byte, 1-partition, acks=1 setting, once with nobody looking and once with
   a poller fetching the overview, topics, groups and clients pages and their JSON every second
   and scraping /metrics every second. ``console_rounds`` pairs, the order alternating, best of
   each kept (other load on the machine only ever slows a run down);
   the figures are the ratios with/without (target >= 0.95).
2. Latency: a broker with ``console_topics`` topics of ``console_partitions`` partitions (1,000 x
   10 in the full run) and a consumer group with committed offsets on 100 of them; every page and
   endpoint is fetched ``LATENCY_TRIES`` times; the median and the worst are reported
   (target: the worst under 200 ms). Meanwhile a Kafka connection sends ApiVersions back to back:
   its worst round trip while the console answers, against its worst with the console idle, is
   how long Kafka requests waited behind the console on the event loop.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom.protocol.schema import ApiKey
from strom.tools.bench import client as bench_client
from strom.tools.common import KafkaSocket

POLLED = (
    "/",
    "/api/overview",
    "/topics",
    "/api/topics",
    "/groups",
    "/api/groups",
    "/clients",
    "/api/clients",
    "/metrics",
)
LATENCY_TRIES = 5
CREATE_BATCH = 100
PROBE_IDLE_S = 2.0
GROUP = "bench-console-group"

Log = Callable[[str], None]


def latency_paths(topics: int) -> list[str]:
    middle = f"bench-console-{topics // 2:04d}"
    return list(POLLED) + [f"/topics/{middle}", f"/api/topics/{middle}", f"/groups/{GROUP}", f"/api/groups/{GROUP}"]


def latency_key(path: str, partitions: int) -> str:
    """The figure's name: ``console_api_topics_ms_worst_10000p``, ``console_topics_page_...``."""
    if path.startswith("/api/topics/") or path.startswith("/topics/"):
        path = path.rsplit("/", 1)[0] + "/one"
    if path.startswith("/api/groups/") or path.startswith("/groups/"):
        path = path.rsplit("/", 1)[0] + "/one"
    name = path.strip("/").replace("/", "_") or "overview"
    if not path.startswith("/api") and path != "/metrics":
        name += "_page"
    return f"console_{name}_ms_worst_{partitions}p"


def _get(url: str, timeout: float = 30.0) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        size = len(response.read())
        if response.status != 200:
            raise bench_client.WorkloadError(f"{url}: HTTP {response.status}")
    return time.perf_counter() - started, size


class Poller:
    """Fetches every polled page and /metrics once a second until stopped."""

    def __init__(self, base: str):
        self.base = base
        self.stop_event = threading.Event()
        self.requests = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            tick = time.monotonic()
            for path in POLLED:
                try:
                    _get(self.base + path)
                    self.requests += 1
                except Exception as exc:  # reported, never fatal to the measured workload
                    self.errors.append(f"{path}: {exc}")
            self.stop_event.wait(max(0.0, 1.0 - (time.monotonic() - tick)))

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(30)


class KafkaProbe:
    """ApiVersions round trips on one connection, back to back, until stopped: the worst one
    shows how long a Kafka request waited behind the console on the broker's event loop."""

    def __init__(self, port: int):
        self.port = port
        self.stop_event = threading.Event()
        self.latencies: list[float] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            wire = KafkaSocket(sock, None)
            while not self.stop_event.is_set():
                started = time.perf_counter()
                try:
                    wire.request(ApiKey.API_VERSIONS, 0, {})
                except ValueError as exc:
                    raise bench_client.WorkloadError(f"probe connection: {exc}") from None
                self.latencies.append((time.perf_counter() - started) * 1000)
                time.sleep(0.002)

    def __enter__(self) -> KafkaProbe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(30)


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "median": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max": ordered[-1],
    }


def _console(broker) -> str:
    return json.loads(Path(broker.ready_file).read_text())["console"]


def _commit(bootstrap: str, offsets: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "logger": bench_client._quiet(),
        }
    )
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def measure_overhead(report, settings, workdir: Path, log: Log) -> None:
    from strom.tools.bench.benchmark import create_topics
    from strom.tools.broker_process import BrokerProcess

    broker = BrokerProcess(workdir / "console-overhead", {"console.listeners": "http://127.0.0.1:0"}).start()
    try:
        base = _console(broker)
        count = settings.small_records
        best: dict[str, dict[str, float]] = {"off": {}, "on": {}}
        runs: dict[str, list] = {"off": [], "on": []}
        polled = 0
        rounds = settings.console_rounds
        for round_ in range(rounds):
            for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                topic = f"bench-console-{round_}-{mode}"
                create_topics(broker.bootstrap, {topic: 1})
                _commit(broker.bootstrap, {(topic, 0): 0})
                log(
                    f"console overhead: {count * settings.producers} x 100 B produced and consumed, console "
                    f"{'polled every second' if mode == 'on' else 'not polled'}, round {round_ + 1}/{rounds}"
                )
                poller = Poller(base) if mode == "on" else None
                if poller is not None:
                    poller.__enter__()
                try:
                    jobs = [
                        bench_client.ProduceJob(broker.bootstrap, topic, count, 100, "1", "none")
                        for _ in range(settings.producers)
                    ]
                    produced = bench_client.run_producers(bench_client.produce_worker, jobs)
                    consumed = bench_client.run_consumer(broker.bootstrap, topic, 1, count * settings.producers)
                finally:
                    if poller is not None:
                        poller.__exit__()
                        polled += poller.requests
                        if poller.errors:
                            raise bench_client.WorkloadError(f"console polling failed: {poller.errors[:3]}")
                runs[mode].append({"produce": produced["rate"], "consume": consumed["rate"]})
                for what, run in (("produce", produced), ("consume", consumed)):
                    if run["failed"]:
                        raise bench_client.WorkloadError(f"{what}: {run['failed']} records failed")
                    best[mode][what] = max(best[mode].get(what, 0.0), run["rate"])
        report.details["console_overhead"] = {**best, "runs": runs, "polled_requests": polled}
        for what in ("produce", "consume"):
            key = f"console_{what}_100B_1p_records_per_s"
            report.reference(
                key,
                best["off"][what],
                "records/s",
                f"{what} rate of the same broker with its console not polled (best of {rounds})",
            )
            report.add(
                f"{what}_with_console_polled_ratio",
                best["on"][what] / best["off"][what],
                "x",
                key,
                ref_value=1.0,
                target=(">= 0.95", lambda v: v >= 0.95),
            )
    finally:
        broker.stop()


def measure_latency(report, settings, workdir: Path, log: Log) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    from strom.tools.broker_process import BrokerProcess

    topics, partitions = settings.console_topics, settings.console_partitions
    broker = BrokerProcess(workdir / "console-latency", {"console.listeners": "http://127.0.0.1:0"}).start(timeout=120)
    try:
        base = _console(broker)
        log(f"console latency: creating {topics} topics x {partitions} partitions")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": bench_client._quiet()})
        names = [f"bench-console-{i:04d}" for i in range(topics)]
        for start in range(0, topics, CREATE_BATCH):
            futures = admin.create_topics(
                [NewTopic(n, partitions, 1) for n in names[start : start + CREATE_BATCH]], operation_timeout=120
            )
            for future in futures.values():
                future.result(300)
        _commit(broker.bootstrap, {(n, p): 0 for n in names[: min(100, topics)] for p in range(partitions)})
        paths = latency_paths(topics)
        static = []
        for _ in range(20):
            static.append(_get(base + "/static/console.css")[0] * 1000)
        report.reference(
            "console_static_file_ms",
            statistics.median(static),
            "ms",
            "GET of a small static file from the same console (the HTTP stack alone), median",
        )
        with KafkaProbe(broker.port) as idle_probe:
            time.sleep(PROBE_IDLE_S)
        details: dict[str, Any] = {}
        worst_all = 0.0
        with KafkaProbe(broker.port) as probe:
            for path in paths:
                _get(base + path)  # warm
                times, size = [], 0
                for _ in range(LATENCY_TRIES):
                    elapsed, size = _get(base + path)
                    times.append(elapsed * 1000)
                details[path] = {"median_ms": statistics.median(times), "max_ms": max(times), "bytes": size}
                worst_all = max(worst_all, max(times))
                log(
                    f"console latency: {path} median {statistics.median(times):.1f} ms, worst {max(times):.1f} ms, "
                    f"{size} bytes"
                )
        report.details["console_latency"] = {
            "topics": topics,
            "partitions": topics * partitions,
            "paths": details,
            "kafka_probe_idle_ms": _spread(idle_probe.latencies),
            "kafka_probe_during_ms": _spread(probe.latencies),
        }
        report.reference(
            "kafka_request_worst_ms_idle",
            max(idle_probe.latencies),
            "ms",
            f"worst of {len(idle_probe.latencies)} back-to-back ApiVersions round trips to the same "
            f"broker, console idle",
        )
        report.add(
            f"kafka_request_worst_ms_while_console_answers_{topics * partitions}p",
            max(probe.latencies),
            "ms",
            "kafka_request_worst_ms_idle",
        )
        for path, facts in details.items():
            report.add(
                latency_key(path, topics * partitions),
                facts["max_ms"],
                "ms",
                "console_static_file_ms",
                target=("< 200 ms", lambda v: v < 200),
            )
    finally:
        broker.stop()

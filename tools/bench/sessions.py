"""Broker CPU spent on consumers of many idle partitions, with and without fetch sessions (KIP-227).

Each consumer is a raw-frame Fetch v12 client (a thread with a blocking socket) that assigns
itself every partition of a topic where nothing is produced and long-polls as the Java client
does by default (max wait 500 ms, min bytes 1). In `full` mode every request names all
partitions with session epoch -1 (as librdkafka does, and as a client does when the broker's
session cache is full); in `session` mode the first request opens a session (epoch 0) and the
following ones carry only the session id and the next epoch. The figure is the broker process's
CPU time (user + system, every thread, from /proc/PID/stat) per second of wall time while the
consumers poll, minus nothing: the same window with no consumers is measured too.

A second figure asks what those idle consumers cost a producer of another topic: one connection
sends one-record Produce requests (acks=1) back to back to a one-partition topic for a while,
first with no consumers, then while the consumers long-poll their idle partitions in sessions.
The figure is the broker's CPU per Produce request with the idle consumers over that without them
(1.0: an append wakes no fetch but those of its own partition).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey
from strom.tools.common import KafkaSocket

FETCH_VERSION = 12
MAX_WAIT_MS = 500
IDLE_TOPIC = "bench-idle-partitions"
BUSY_TOPIC = "bench-busy-neighbour"
TICKS = os.sysconf("SC_CLK_TCK")


class SessionBenchError(RuntimeError):
    """A consumer got an error answer or lost its connection."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far, all threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class IdleResult:
    cpu_per_s: float  # broker CPU seconds per wall second (1.0 = one core busy)
    fetches: int  # fetch responses the consumers got in the window
    request_bytes: int  # bytes of one steady-state request
    response_bytes: int  # bytes of one steady-state response


def receive(wire: KafkaSocket):
    """The next response (a ``strom.protocol.connection.Response``)."""
    try:
        return wire.receive()
    except ValueError as exc:
        raise SessionBenchError(f"broker closed the connection or answered nonsense: {exc}") from None


class IdleConsumer(threading.Thread):
    def __init__(self, host: str, port: int, topic: str, partitions: int, session: bool, stop: threading.Event):
        super().__init__(daemon=True)
        self.wire = KafkaSocket(socket.create_connection((host, port), timeout=30), "strom-bench")
        self.topic, self.partitions, self.session, self.stop = topic, partitions, session, stop
        self.fetches = 0
        self.last_request = self.last_response = 0
        self.error: str | None = None
        self.session_id, self.epoch = 0, 0 if session else -1

    def _body(self, everything: bool) -> dict:
        parts = (
            [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in range(self.partitions)]
            if everything
            else []
        )
        return {
            "replica_id": -1,
            "max_wait_ms": MAX_WAIT_MS,
            "min_bytes": 1,
            "max_bytes": 50 << 20,
            "isolation_level": 0,
            "session_id": self.session_id,
            "session_epoch": self.epoch,
            "topics": [{"topic": self.topic, "partitions": parts}] if parts else [],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    def fetch_once(self) -> None:
        everything = not self.session or self.session_id == 0
        frame = self.wire.conn.send_request(ApiKey.FETCH, FETCH_VERSION, self._body(everything))
        self.wire.sock.sendall(frame)
        answer = receive(self.wire)
        response = answer.body
        if response.error_code != ErrorCode.NONE:
            raise SessionBenchError(f"fetch answered {ErrorCode(response.error_code).name}")
        for topic in response.responses:
            for p in topic.partitions:
                if p.error_code != ErrorCode.NONE:
                    raise SessionBenchError(f"partition {p.partition_index}: {ErrorCode(p.error_code).name}")
        if self.session:
            if response.session_id == 0:
                raise SessionBenchError("the broker opened no fetch session")
            self.session_id, self.epoch = response.session_id, (self.epoch + 1 if self.epoch else 1)
        self.last_request, self.last_response = len(frame), answer.size + 4

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.fetch_once()
                self.fetches += 1
        except Exception as exc:  # reported by the caller
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.wire.close()


class NeighbourProducer(threading.Thread):
    """One connection sending one-record Produce v9 requests (acks=1) back to back to partition 0."""

    def __init__(self, host: str, port: int, topic: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.wire = KafkaSocket(socket.create_connection((host, port), timeout=30), "strom-bench")
        self.topic, self.stop = topic, stop
        self.requests = 0
        self.error: str | None = None

    def run(self) -> None:
        from strom.protocol.records.batch import Record, build_batch

        records = build_batch([Record(0, 0, b"k", b"v" * 100)])
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [{"name": self.topic, "partition_data": [{"index": 0, "records": records}]}],
        }
        try:
            while not self.stop.is_set():
                self.wire.send(ApiKey.PRODUCE, 9, body)
                response = receive(self.wire).body
                code = response.responses[0].partition_responses[0].error_code
                if code != ErrorCode.NONE:
                    raise SessionBenchError(f"produce answered {ErrorCode(code).name}")
                self.requests += 1
        except Exception as exc:  # reported by the caller
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.wire.close()


def produce_cpu(pid: int, host: str, port: int, topic: str, seconds: float) -> float:
    """Broker CPU seconds per Produce request while one connection produces for `seconds`."""
    stop = threading.Event()
    producer = NeighbourProducer(host, port, topic, stop)
    producer.start()
    try:
        time.sleep(min(1.0, seconds))
        start_cpu, before = cpu_seconds(pid), producer.requests
        time.sleep(seconds)
        cpu, requests = cpu_seconds(pid) - start_cpu, producer.requests - before
    finally:
        stop.set()
        producer.join(30)
    if producer.error:
        raise SessionBenchError(f"the neighbour producer failed: {producer.error}")
    if requests == 0:
        raise SessionBenchError("the neighbour producer got no answer in the window")
    return cpu / requests


def neighbour_cpu(pid: int, host: str, port: int, partitions: int, consumers: int, seconds: float) -> dict:
    """CPU per Produce request to another topic, alone and beside idle consumers in sessions."""
    alone = produce_cpu(pid, host, port, BUSY_TOPIC, seconds)
    with polling(host, port, IDLE_TOPIC, partitions, consumers, True):
        time.sleep(min(2.0, seconds))
        beside = produce_cpu(pid, host, port, BUSY_TOPIC, seconds)
    return {"produce_cpu_alone_s": alone, "produce_cpu_beside_idle_consumers_s": beside}


@contextmanager
def polling(host: str, port: int, topic: str, partitions: int, consumers: int, session: bool):
    """`consumers` IdleConsumer threads polling while the block runs; stopped after it, and their
    first error raised."""
    stop = threading.Event()
    threads = [IdleConsumer(host, port, topic, partitions, session, stop) for _ in range(consumers)]
    for t in threads:
        t.start()
    try:
        yield threads
    finally:
        stop.set()
        for t in threads:
            t.join(MAX_WAIT_MS / 1000 + 30)
    errors = [t.error for t in threads if t.error]
    if errors:
        raise SessionBenchError(f"{len(errors)} consumer(s) failed: {errors[0]}")


def idle_cpu(pid: int, seconds: float) -> float:
    start_cpu, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - start_cpu) / (time.monotonic() - start)


def measure(
    pid: int,
    host: str,
    port: int,
    topic: str,
    partitions: int,
    consumers: int,
    session: bool,
    seconds: float,
    warmup: float | None = None,
) -> IdleResult:
    """Broker CPU per second while `consumers` poll `partitions` idle partitions of `topic`."""
    with polling(host, port, topic, partitions, consumers, session) as threads:
        time.sleep(min(2.0, seconds) if warmup is None else warmup)
        before = sum(t.fetches for t in threads)
        cpu = idle_cpu(pid, seconds)
        fetches = sum(t.fetches for t in threads) - before
    return IdleResult(cpu, fetches, threads[0].last_request, threads[0].last_response)


# --------------------------------------------------------------------------- in `strom bench`


def reference_script() -> Path | None:
    """The reference Kafka's start script (`STROM_KAFKA_REFERENCE`, else ../shared/jvm beside the repo)."""
    env = os.environ.get("STROM_KAFKA_REFERENCE")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[3] / "shared" / "jvm" / "kafka-reference.sh")
    for path in candidates:
        if path.is_file() and shutil.which("java"):
            return path
    return None


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(120)


def _wait_answerable(host: str, port: int, partitions: int, timeout: float = 60.0) -> None:
    """Until a full fetch of every partition comes back without errors (leaders elected)."""
    deadline = time.monotonic() + timeout
    while True:
        probe = IdleConsumer(host, port, IDLE_TOPIC, partitions, False, threading.Event())
        try:
            probe.fetch_once()
            return
        except SessionBenchError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        finally:
            probe.wire.close()


def _run_pair(report, key: str, pid: int, port: int, partitions: int, consumers: int, seconds: float, log) -> dict:
    host = "127.0.0.1"
    _create(f"{host}:{port}", IDLE_TOPIC, partitions)
    _wait_answerable(host, port, partitions)
    log(
        f"fetch sessions ({key}): warm-up, then {consumers} consumers x {partitions} idle partitions, "
        f"{seconds:g} s full fetches, {seconds:g} s in sessions"
    )
    measure(pid, host, port, IDLE_TOPIC, partitions, consumers, False, min(seconds, 3.0))  # warm-up (JIT, caches)
    baseline = idle_cpu(pid, min(seconds, 5.0))
    full = measure(pid, host, port, IDLE_TOPIC, partitions, consumers, False, seconds)
    session = measure(pid, host, port, IDLE_TOPIC, partitions, consumers, True, seconds)
    _create(f"{host}:{port}", BUSY_TOPIC, 1)
    log(f"fetch sessions ({key}): a producer of another topic, alone and beside the idle consumers")
    neighbour = neighbour_cpu(pid, host, port, partitions, consumers, min(seconds, 5.0))
    facts = {"baseline_cpu_per_s": baseline, "full": asdict(full), "session": asdict(session), "neighbour": neighbour}
    report.details[f"fetch_sessions_{key}"] = facts
    return facts


def measure_fetch_sessions(
    report,
    pid: int,
    port: int,
    log,
    *,
    partitions: int = 1000,
    consumers: int = 4,
    seconds: float = 10.0,
    workdir: Path | None = None,
    kafka: bool = True,
) -> None:
    """Broker CPU with consumers of `partitions` idle partitions, full fetches vs sessions, Strom
    (the broker `pid` on `port`) and, when it can run here, the reference Kafka 4.0 in the same run."""
    strom = _run_pair(report, "strom", pid, port, partitions, consumers, seconds, log)
    script = reference_script() if kafka else None
    kafka = None
    if script is None:
        log("fetch sessions: no reference Kafka here (java or kafka-reference.sh missing); Strom's figures only")
    else:
        work = Path(tempfile.mkdtemp(prefix="strom-bench-kafka-", dir=workdir))
        try:
            out = subprocess.run([str(script), "start", str(work)], capture_output=True, text=True, timeout=180)
            if out.returncode != 0:
                log(f"fetch sessions: the reference Kafka did not start: {out.stderr.strip()[-300:]}")
            else:
                kport, kpid = map(int, out.stdout.split()[-2:])
                kafka = _run_pair(report, "kafka", kpid, kport, partitions, consumers, seconds, log)
        finally:
            subprocess.run([str(script), "stop", str(work)], capture_output=True, timeout=120)
            shutil.rmtree(work, ignore_errors=True)
    what = f"{consumers} Fetch v12 consumers x {partitions} idle partitions, max wait {MAX_WAIT_MS} ms"
    report.reference(
        "strom_fetch_idle_full_cpu",
        strom["full"]["cpu_per_s"],
        "CPU s/s",
        f"Strom's CPU with {what}, every request naming every partition (no session)",
    )
    session_ref = "strom_fetch_idle_full_cpu"
    if kafka is not None:
        report.reference(
            "kafka_fetch_idle_full_cpu",
            kafka["full"]["cpu_per_s"],
            "CPU s/s",
            f"reference Kafka 4.0's CPU with {what}, no session (its idle CPU: {kafka['baseline_cpu_per_s']:.3f})",
        )
        report.reference(
            "kafka_fetch_idle_session_cpu",
            kafka["session"]["cpu_per_s"],
            "CPU s/s",
            f"reference Kafka 4.0's CPU with {what}, in incremental fetch sessions",
        )
        report.add("fetch_idle_full_cpu", strom["full"]["cpu_per_s"], "CPU s/s", "kafka_fetch_idle_full_cpu")
        session_ref = "kafka_fetch_idle_session_cpu"
    report.add("fetch_idle_session_cpu", strom["session"]["cpu_per_s"], "CPU s/s", session_ref)
    report.add("fetch_idle_session_vs_full_cpu", strom["session"]["cpu_per_s"], "CPU s/s", "strom_fetch_idle_full_cpu")
    ms = 1000.0
    report.reference(
        "strom_produce_cpu_alone_ms",
        strom["neighbour"]["produce_cpu_alone_s"] * ms,
        "CPU ms",
        "Strom's CPU per one-record Produce request (acks=1) with no consumers connected",
    )
    report.add(
        "produce_cpu_beside_idle_consumers_ms",
        strom["neighbour"]["produce_cpu_beside_idle_consumers_s"] * ms,
        "CPU ms",
        "strom_produce_cpu_alone_ms",
        target=("< 1.2 of alone", lambda v: v < 1.2 * strom["neighbour"]["produce_cpu_alone_s"] * ms),
    )
    if kafka is not None:
        report.reference(
            "kafka_produce_cpu_alone_ms",
            kafka["neighbour"]["produce_cpu_alone_s"] * ms,
            "CPU ms",
            "reference Kafka 4.0's CPU per one-record Produce request with no consumers",
        )
        report.reference(
            "kafka_produce_cpu_beside_idle_consumers_ms",
            kafka["neighbour"]["produce_cpu_beside_idle_consumers_s"] * ms,
            "CPU ms",
            f"reference Kafka 4.0's CPU per Produce request beside {what}, in sessions",
        )

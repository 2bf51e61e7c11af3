"""Client-side workloads of the benchmark: confluent-kafka producers and consumers run in child
processes (``spawn``), so several can load the broker at once and none shares the benchmark's GIL.

Every worker returns a plain dict through a queue: record counts and wall-clock start/end
(``time.time()``, comparable across processes). A ``Barrier`` lines the producers up so that they
start together. The client-alone reference produces exactly as the throughput runs do, to a
bootstrap address that accepts TCP connections and never answers, so records only get queued.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PRODUCER_BASE = {
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 10_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    "delivery.report.only.error": True,
}
CONSUMER_BASE = {
    "group.id": "strom-bench",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.queue.backoff.ms": 1,
}
CONSUME_BATCH = 500  # messages per consume() call: larger batches measured slower here
POLL_EVERY = 20_000
IDLE_TIMEOUT_S = 30.0
WORKER_TIMEOUT_S = 600.0
STAMP = struct.Struct(">q")
WARMUP = b"W"


class WorkloadError(RuntimeError):
    """A benchmark workload failed: a child died, timed out, or records went missing."""


@dataclass(frozen=True)
class ProduceJob:
    """What one producer process sends: ``count`` records of ``size`` bytes to ``topic``."""

    bootstrap: str
    topic: str
    count: int
    size: int
    acks: str
    compression: str


def _quiet() -> Any:
    import logging

    logger = logging.getLogger("strom.bench.librdkafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def _producer(job: ProduceJob, errors: list[str]) -> Any:
    from confluent_kafka import Producer

    def on_delivery(err: Any, _msg: Any) -> None:
        errors.append(str(err))

    return Producer(
        {
            **PRODUCER_BASE,
            "bootstrap.servers": job.bootstrap,
            "acks": job.acks,
            "compression.type": job.compression,
            "on_delivery": on_delivery,
            "logger": _quiet(),
        }
    )


def _produce_all(producer: Any, topic: str, value: bytes, count: int) -> None:
    produce, poll = producer.produce, producer.poll
    sent = 0
    while sent < count:
        try:
            for _ in range(min(POLL_EVERY, count - sent)):
                produce(topic, value)
                sent += 1
        except BufferError:
            poll(0.01)
        poll(0)


def produce_worker(job: ProduceJob, barrier: Any, results: Any) -> None:
    """Send ``job.count`` records, wait for every acknowledgement; report start, end, failures."""
    errors: list[str] = []
    producer = _producer(job, errors)
    value = b"x" * job.size
    barrier.wait()
    start = time.time()
    _produce_all(producer, job.topic, value, job.count)
    left = producer.flush(WORKER_TIMEOUT_S)
    end = time.time()
    results.put(
        {
            "records": job.count - len(errors) - left,
            "failed": len(errors) + left,
            "first_error": errors[0] if errors else None,
            "start": start,
            "end": end,
        }
    )


def client_alone_worker(job: ProduceJob, barrier: Any, results: Any) -> None:
    """Queue ``job.count`` records to a broker that never answers; report how fast they queued."""
    errors: list[str] = []
    producer = _producer(job, errors)
    value = b"x" * job.size
    barrier.wait()
    start = time.time()
    _produce_all(producer, job.topic, value, job.count)
    end = time.time()
    producer.purge()
    producer.flush(0)
    results.put({"records": job.count, "failed": 0, "first_error": None, "start": start, "end": end})


def _consume_until(consumer: Any, count: int, expected: int) -> tuple[int, float | None, int]:
    """Take batches until ``expected`` records in all (``count`` already taken) or nothing comes for
    ``IDLE_TIMEOUT_S``: (records taken in all, when the first batch arrived, its size)."""
    first_at, first_size, idle_since = None, 0, time.monotonic()
    while count < expected and time.monotonic() - idle_since < IDLE_TIMEOUT_S:
        # consume() returns at num_messages or the timeout: never ask for more than is left
        batch = consumer.consume(num_messages=min(CONSUME_BATCH, expected - count), timeout=0.5)
        if batch:
            if first_at is None:
                first_at, first_size = time.time(), len(batch)
            count += len(batch)
            idle_since = time.monotonic()
    return count, first_at, first_size


def consume_worker(bootstrap: str, topic: str, partitions: int, expected: int, results: Any) -> None:
    """Read ``expected`` records from the start of every partition with batched ``consume``.

    The rate is the streaming rate, from the first record received to the last: the time before
    the first record is the client's own set-up (librdkafka retries the offset lookup of a
    partition assigned before its metadata arrived after 500 ms) and is reported apart.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**CONSUMER_BASE, "bootstrap.servers": bootstrap, "logger": _quiet()})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    assigned = time.time()
    try:
        # the clock starts after the first batch: its records are not counted
        count, start, first = _consume_until(consumer, 0, expected)
        end = time.time()
    finally:
        consumer.close()
    if start is None:  # nothing came: no rate
        start = end
    results.put(
        {
            "records": count - first,
            "received": count,
            "failed": max(0, expected - count),
            "start": start,
            "end": end,
            "first_record_s": start - assigned,
            "first_error": None if count >= expected else f"read {count} of {expected}",
        }
    )


def drain_worker(bootstrap: str, topic: str, partitions: int, expected: int, results: Any) -> None:
    """The consuming client's own rate: time how fast ``consume`` hands records to Python once
    librdkafka has fetched the whole topic into its local queue (its statistics say when: every
    partition's fetch position has reached the high watermark).

    The statistics callback is served by ``consume`` calls, so a record is taken now and then
    while waiting; only the records left when everything is local are timed.
    """
    import json

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    fetched = {"all": False}

    def on_stats(text: str) -> None:
        parts = json.loads(text).get("topics", {}).get(topic, {}).get("partitions", {})
        ends = [(p.get("next_offset", -1), p.get("hi_offset", -1)) for key, p in parts.items() if key != "-1"]
        total = sum(high for _, high in ends)
        fetched["all"] = len(ends) == partitions and total >= expected and all(nxt >= high for nxt, high in ends)

    consumer = Consumer(
        {
            **CONSUMER_BASE,
            "bootstrap.servers": bootstrap,
            "logger": _quiet(),
            "queued.min.messages": 10_000_000,
            "queued.max.messages.kbytes": 2_097_151,
            "statistics.interval.ms": 100,
            "stats_cb": on_stats,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    count, deadline = 0, time.monotonic() + WORKER_TIMEOUT_S
    try:
        while not fetched["all"] and count < expected and time.monotonic() < deadline:
            count += len(consumer.consume(num_messages=1, timeout=0.05))
            time.sleep(0.02)
        start, timed_from = time.time(), count
        count, _, _ = _consume_until(consumer, count, expected)
        end = time.time()
    finally:
        consumer.close()
    results.put(
        {
            "records": count - timed_from,
            "failed": max(0, expected - count),
            "start": start,
            "end": end,
            "first_error": None if count >= expected else f"read {count} of {expected}",
        }
    )


def client_drain_rate(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[str, Any]:
    """One consumer process's rate from its own prefetched queue (see ``drain_worker``)."""
    ctx = _context()
    results = ctx.Queue()
    proc = ctx.Process(target=drain_worker, args=(bootstrap, topic, partitions, expected, results), daemon=True)
    proc.start()
    return _aggregate(_collect([proc], results, WORKER_TIMEOUT_S))


def latency_consumer_worker(bootstrap: str, topic: str, expected: int, ready: Any, results: Any) -> None:
    """Wait for the warm-up record, signal ``ready``, then collect ``expected`` end-to-end latencies.

    Each measured value starts with the producer's ``time.time_ns()`` (8 bytes, big-endian).
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**CONSUMER_BASE, "bootstrap.servers": bootstrap, "logger": _quiet()})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    latencies: list[float] = []
    idle_since = time.monotonic()
    try:
        while len(latencies) < expected and time.monotonic() - idle_since < IDLE_TIMEOUT_S:
            # poll, not consume(): a batch call waits for its count or timeout and would add that wait
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            now = time.time_ns()
            value = msg.value() if msg.error() is None else None
            idle_since = time.monotonic()
            if value is None or value[:1] == WARMUP:
                ready.set()
                continue
            latencies.append((now - STAMP.unpack_from(value)[0]) / 1e6)
    finally:
        consumer.close()
    results.put({"latencies_ms": latencies, "records": len(latencies), "failed": max(0, expected - len(latencies))})


# --------------------------------------------------------------------------- running children


def _context() -> Any:
    return mp.get_context("spawn")


def _collect(procs: list[Any], results: Any, timeout: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < len(procs):
            try:
                out.append(results.get(timeout=0.5))
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    raise WorkloadError(f"workers did not finish within {timeout:.0f}s") from None
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise WorkloadError(f"worker exited with code {dead[0].exitcode}") from None
    finally:
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return out


def run_producers(worker: Callable[..., None], jobs: list[ProduceJob]) -> dict[str, Any]:
    """Run one process per job at once; aggregate records over (last end - first start)."""
    ctx = _context()
    barrier, results = ctx.Barrier(len(jobs)), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(job, barrier, results), daemon=True) for job in jobs]
    for proc in procs:
        proc.start()
    parts = _collect(procs, results, WORKER_TIMEOUT_S)
    return _aggregate(parts)


def _aggregate(parts: list[dict[str, Any]]) -> dict[str, Any]:
    start = min(p["start"] for p in parts)
    end = max(p["end"] for p in parts)
    records = sum(p["records"] for p in parts)
    errors = [p["first_error"] for p in parts if p["first_error"]]
    return {
        "records": records,
        "failed": sum(p["failed"] for p in parts),
        "seconds": end - start,
        "rate": records / max(end - start, 1e-9),
        "first_error": errors[0] if errors else None,
    }


def run_consumer(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[str, Any]:
    """One consumer process reading a whole topic from the beginning."""
    ctx = _context()
    results = ctx.Queue()
    proc = ctx.Process(target=consume_worker, args=(bootstrap, topic, partitions, expected, results), daemon=True)
    proc.start()
    (part,) = _collect([proc], results, WORKER_TIMEOUT_S)
    return {**_aggregate([part]), "received": part["received"], "first_record_s": part["first_record_s"]}


class SilentBroker:
    """A TCP listener on 127.0.0.1 that accepts connections (in the kernel backlog) and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)

    @property
    def bootstrap(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def __enter__(self) -> SilentBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def client_alone_rate(count: int, size: int, compression: str, processes: int) -> dict[str, Any]:
    """The producing client's own rate: ``processes`` producers queueing ``count`` records each."""
    with SilentBroker() as silent:
        jobs = [ProduceJob(silent.bootstrap, "bench-alone", count, size, "1", compression) for _ in range(processes)]
        return run_producers(client_alone_worker, jobs)


def measure_latency(bootstrap: str, topic: str, count: int, rate: float, size: int) -> list[float]:
    """Produce ``count`` time-stamped records at ``rate``/s to partition 0; return latencies in ms."""
    from confluent_kafka import Producer

    ctx = _context()
    ready, results = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=latency_consumer_worker, args=(bootstrap, topic, count, ready, results), daemon=True)
    proc.start()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000, "acks": "1", "logger": _quiet()}
    )
    try:
        _warm_up(producer, topic, ready)
        _produce_paced(producer, topic, count, rate, size)
        producer.flush(WORKER_TIMEOUT_S)
        part = _collect([proc], results, WORKER_TIMEOUT_S)[0]
    finally:
        producer.flush(5)
    if part["failed"]:
        raise WorkloadError(f"latency run received {part['records']} of {count} records")
    return sorted(part["latencies_ms"])


def _warm_up(producer: Any, topic: str, ready: Any) -> None:
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while not ready.is_set():
        if time.monotonic() > deadline:
            raise WorkloadError("latency consumer never saw the warm-up record")
        producer.produce(topic, WARMUP, partition=0)
        producer.flush(5)
        ready.wait(0.5)


def _produce_paced(producer: Any, topic: str, count: int, rate: float, size: int) -> None:
    pad = b"l" * max(0, size - STAMP.size)
    start = time.monotonic()
    for i in range(count):
        while (ahead := i / rate - (time.monotonic() - start)) > 0:
            producer.poll(ahead)
        producer.produce(topic, STAMP.pack(time.time_ns()) + pad, partition=0)

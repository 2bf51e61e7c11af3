"""Share-group consume in `strom bench`: 1, 2 and 4 share consumers, and a classic-group consumer
of the same records, against Strom and the reference Kafka 4.3.1 in the same run.

``records`` 100-byte records are produced over 4 partitions before any clock runs. Each share run
uses a new share group (group config ``share.auto.offset.reset=earliest``, set before timing) and
that many confluent-kafka ``ShareConsumer`` processes (implicit acknowledgement: a poll accepts
what the previous poll returned). The clock starts when every process has built its consumer and
is told to subscribe, and stops when the records delivered add up to ``records`` and every process
has acknowledged its last ones (``commit_sync`` answered without error). The records delivered are
checked after: each exactly once over all consumers of the run, or the benchmark fails. The classic
consumer (one ``Consumer`` in a new group, ``subscribe``) is timed the same way: from subscribe
until it has read every record (the group coordinator found once before). Both include the
group's join: a share group's first assignment comes one heartbeat (5 s by default) after its
partitions are initialized, as in Kafka 4.3; the drain figures count from the first record on.

Kafka 4.3.1 (``kafka-reference-4.3.sh`` beside ``kafka-reference.sh``; ``STROM_KAFKA_REFERENCE_43``
elsewhere) runs the same steps when java is here; Strom's figures are then divided by its figures.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom.tools.bench import client as bench_client
from strom.tools.bench.sessions import reference_script

RECORD_BYTES = 100
PARTITIONS = 4
CONSUMERS = (1, 2, 4)
RUN_TIMEOUT_S = 300.0
POLL_S = 0.1
Log = Callable[[str], None]


class ShareBenchError(RuntimeError):
    """A consumer failed, timed out, or a record was delivered twice or not at all."""


def reference_43_script() -> Path | None:
    """The reference Kafka 4.3.1's start script (`STROM_KAFKA_REFERENCE_43`, else beside 4.0's)."""
    env = os.environ.get("STROM_KAFKA_REFERENCE_43")
    if env:
        return Path(env) if Path(env).is_file() and shutil.which("java") else None
    script = reference_script()
    if script is None:
        return None
    newer = script.with_name("kafka-reference-4.3.sh")
    return newer if newer.is_file() else None


def reference_43_env(script: Path) -> dict[str, str]:
    """The environment to start 4.3.1 in: its client jar put first on CLASSPATH, since some copies of
    shared/jvm keep ``libs/kafka-clients-4.3.1.jar`` (a symlink) as a small file naming its target.
    The same workaround as compat_tests/support/reference.py, which the installed package cannot import."""
    env = dict(os.environ)
    jar = script.parent / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
    if jar.is_file():
        env["CLASSPATH"] = os.pathsep.join(p for p in (str(jar), env.get("CLASSPATH", "")) if p)
    return env


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "logger": bench_client._quiet()})


def _prepare(bootstrap: str, records: int) -> str:
    """A new topic of PARTITIONS partitions holding ``records`` records, spread evenly."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    topic = f"bench-share-{uuid.uuid4().hex[:8]}"
    admin = _admin(bootstrap)  # kept while its futures run: a collected client cancels them
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(120)
    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
            "error_cb": errors.append,
            "logger": bench_client._quiet(),
        }
    )
    failed: list[Any] = []
    payload = b"x" * RECORD_BYTES
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic, payload, partition=i % PARTITIONS, on_delivery=lambda e, _m: e and failed.append(e)
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) or failed:
        raise ShareBenchError(f"{topic}: producing failed: {failed[:1] or 'records left unsent after 120 s'}")
    # a broker's first group lookup creates __consumer_offsets (Kafka: 50 partitions, seconds here):
    # done before any clock, so the classic consumer's time is its join and reads only
    _find_coordinator(admin)
    return topic


def _find_coordinator(admin: Any, timeout_s: float = 120.0) -> None:
    """Until a group lookup is answered (Kafka answers NOT_COORDINATOR while the offsets topic loads)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            for future in admin.describe_consumer_groups([f"bench-warm-{uuid.uuid4().hex[:8]}"]).values():
                future.result(timeout_s)
            return
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise ShareBenchError(f"no group coordinator within {timeout_s:.0f} s: {exc}") from None
            time.sleep(0.2)  # the broker's loading has nothing to wait on from here


def _share_group(bootstrap: str) -> str:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = _admin(bootstrap)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)
    return group


def _share_worker(bootstrap: str, group: str, topic: str, events: Any, start: Any, stop: Any) -> None:
    """One share consumer (its own process): ready, subscribe on ``start``, count what each poll
    brings, and at ``stop`` acknowledge the last poll's records; then the offsets it got."""
    from confluent_kafka import ShareConsumer

    got: dict[int, list[int]] = {}
    try:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "logger": bench_client._quiet()})
        events.put(("ready", None))
        start.wait()
        consumer.subscribe([topic])
        while not stop.is_set():
            n = 0
            for message in consumer.poll(POLL_S):
                if message.error() is not None:
                    raise ShareBenchError(str(message.error()))
                got.setdefault(message.partition(), []).append(message.offset())
                n += 1
            if n:
                events.put(("delivered", n))
        failures = [str(e) for e in consumer.commit_sync(60).values() if e is not None]
        if failures:
            raise ShareBenchError(f"acknowledging failed: {failures[0]}")
        events.put(("done", got))
        consumer.close()
    except Exception as exc:  # reported to the parent, which fails the run
        events.put(("error", f"{type(exc).__name__}: {exc}"))


def _check_once(records: int, topic: str, got: dict[int, list[int]], who: str) -> None:
    delivered = sum(len(offsets) for offsets in got.values())
    distinct = sum(len(set(offsets)) for offsets in got.values())
    if delivered != records or distinct != records:
        raise ShareBenchError(
            f"{who}: {topic}: {delivered} records delivered, {distinct} distinct, expected {records} once each"
        )


def _timings(records: int, seconds: float, first_record_s: float) -> dict[str, float]:
    """The run's rate from subscribe, and its drain rate: from the first record delivered on."""
    drain = seconds - first_record_s
    return {
        "seconds": seconds,
        "first_record_s": first_record_s,
        "rate": records / seconds,
        "drain_rate": records / drain if drain > 0 else records / seconds,
    }


def share_consume(bootstrap: str, topic: str, records: int, consumers: int) -> dict[str, float]:
    """Seconds for ``consumers`` share consumers of a new group to receive and accept all ``records``."""
    group = _share_group(bootstrap)
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    start, stop = ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(target=_share_worker, args=(bootstrap, group, topic, events, start, stop), daemon=True)
        for _ in range(consumers)
    ]
    for proc in procs:
        proc.start()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S

        def event() -> tuple[str, Any]:
            while True:
                try:
                    kind, value = events.get(timeout=0.5)
                    break
                except queue.Empty:
                    if time.monotonic() > deadline:
                        raise ShareBenchError(f"share x{consumers}: not done within {RUN_TIMEOUT_S:.0f} s") from None
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead:
                        raise ShareBenchError(f"share x{consumers}: a consumer exited with code {dead[0]}") from None
            if kind == "error":
                raise ShareBenchError(f"share x{consumers}: {value}")
            return kind, value

        ready = 0
        while ready < consumers:
            ready += event()[0] == "ready"
        started = time.monotonic()
        start.set()
        delivered, first = 0, None
        while delivered < records:
            kind, value = event()
            if kind == "delivered":
                first = first if first is not None else time.monotonic()
                delivered += value
        stop.set()
        got: dict[int, list[int]] = {}
        done = 0
        while done < consumers:
            kind, value = event()
            if kind == "done":
                done += 1
                for partition, offsets in value.items():
                    got.setdefault(partition, []).extend(offsets)
        elapsed = time.monotonic() - started
        _check_once(records, topic, got, f"share x{consumers}")
        return _timings(records, elapsed, (first or started) - started)
    finally:
        stop.set()
        start.set()
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()


def classic_consume(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """Seconds for one consumer of a new classic group to subscribe and read all ``records``."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-classic-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 1,
            "logger": bench_client._quiet(),
        }
    )
    got: dict[int, list[int]] = {}
    try:
        started = time.monotonic()
        consumer.subscribe([topic])
        deadline = started + RUN_TIMEOUT_S
        delivered, first = 0, None
        while delivered < records:
            if time.monotonic() > deadline:
                raise ShareBenchError(f"classic: {delivered}/{records} records within {RUN_TIMEOUT_S:.0f} s")
            for message in consumer.consume(500, POLL_S):
                if message.error() is not None:
                    raise ShareBenchError(f"classic: {message.error()}")
                got.setdefault(message.partition(), []).append(message.offset())
                delivered += 1
                first = first if first is not None else time.monotonic()
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    _check_once(records, topic, got, "classic")
    return _timings(records, elapsed, (first or started) - started)


def _runs(bootstrap: str, records: int, consumers: tuple[int, ...], log: Log, who: str) -> dict[str, dict[str, float]]:
    log(f"share groups ({who}): producing {records} x {RECORD_BYTES} B over {PARTITIONS} partitions")
    topic = _prepare(bootstrap, records)
    out: dict[str, dict[str, float]] = {}
    for name in ["classic", *(f"share_{n}" for n in consumers)]:
        if name == "classic":
            run = classic_consume(bootstrap, topic, records)
        else:
            run = share_consume(bootstrap, topic, records, int(name.removeprefix("share_")))
        out[name] = run
        log(
            f"share groups ({who}): {name}: {run['rate']:,.0f} records/s from subscribe, first record after "
            f"{run['first_record_s']:.2f} s, {run['drain_rate']:,.0f} records/s from there"
        )
    return out


def _kafka_runs(
    records: int, consumers: tuple[int, ...], log: Log, workdir: Path | None
) -> dict[str, dict[str, float]] | None:
    script = reference_43_script()
    if script is None:
        log("share groups: no reference Kafka 4.3.1 here (java or kafka-reference-4.3.sh missing); Strom only")
        return None
    work = Path(tempfile.mkdtemp(prefix="strom-bench-kafka43-share-", dir=workdir))
    try:
        out = subprocess.run(
            ["bash", str(script), "start", str(work)],
            capture_output=True,
            text=True,
            timeout=180,
            env=reference_43_env(script),
        )
        if out.returncode != 0:
            log(f"share groups: the reference Kafka 4.3.1 did not start: {out.stderr.strip()[-300:]}")
            return None
        return _runs(f"127.0.0.1:{int(out.stdout.split()[-2])}", records, consumers, log, "kafka 4.3.1")
    finally:
        subprocess.run(["bash", str(script), "stop", str(work)], capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)


def measure_share_groups(
    report: Any,
    bootstrap: str,
    log: Log,
    *,
    records: int = 100_000,
    consumers: tuple[int, ...] = CONSUMERS,
    kafka: bool = True,
    workdir: Path | None = None,
) -> None:
    """Figures ``share_consume_{n}_records_per_s`` and ``classic_consume_records_per_s`` (from
    subscribe until every record is acknowledged or read), and ``share_drain_{n}_records_per_s`` and
    ``classic_drain_records_per_s`` (from the first record delivered on: without the group's join),
    each divided by Kafka 4.3.1's same figure (``kafka43_...``). When the reference cannot run here,
    Strom's classic consumer is the reference (``strom_classic_...``) the share figures divide by."""
    strom = _runs(bootstrap, records, consumers, log, "strom")
    report.details["share_groups_strom"] = strom
    theirs = _kafka_runs(records, consumers, log, workdir) if kafka else None
    if not kafka:
        log("share groups: the reference Kafka 4.3.1 is not run (settings); Strom's figures only")
    what = f"{records} x {RECORD_BYTES} B records over {PARTITIONS} partitions"
    for kind, field, when in (("consume", "rate", "from subscribe"), ("drain", "drain_rate", "from the first record")):
        if theirs is None:
            base = f"strom_classic_{kind}_records_per_s"
            report.reference(base, strom["classic"][field], "records/s", f"Strom, one classic consumer, {what}, {when}")
            for n in consumers:
                report.add(f"share_{kind}_{n}_records_per_s", strom[f"share_{n}"][field], "records/s", base)
            continue
        base = f"kafka43_classic_{kind}_records_per_s"
        ref = f"the reference Kafka 4.3.1, same clients, {what}, {when}"
        report.reference(base, theirs["classic"][field], "records/s", f"{ref}, one classic consumer")
        report.add(f"classic_{kind}_records_per_s", strom["classic"][field], "records/s", base)
        for n in consumers:
            key = f"kafka43_share_{kind}_{n}_records_per_s"
            report.reference(key, theirs[f"share_{n}"][field], "records/s", f"{ref}, {n} share consumer(s)")
            report.add(f"share_{kind}_{n}_records_per_s", strom[f"share_{n}"][field], "records/s", key)
    if theirs is not None:
        report.details["share_groups_kafka43"] = theirs

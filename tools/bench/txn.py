"""Transactional produce in `strom bench`: a commit every 1,000 records against plain produce.

One confluent-kafka producer (in this process; librdkafka does the work on its own threads) sends
100-byte records to one partition, idempotent (what a transactional producer is underneath), with
linger.ms=5: once without transactions, once committing a transaction every 1,000 records. Each
runs twice and the best run is kept. The ratio transactional/plain is Strom's cost of
transactions; the same two runs against the reference Kafka 4.0 (when it can run here, in the
same run) give Kafka's ratio and Strom's transactional rate as a fraction of Kafka's.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from strom.tools.bench.sessions import reference_script

RECORD_BYTES = 100
COMMIT_EVERY = 1_000
ROUNDS = 2


class TxnBenchError(RuntimeError):
    """A producer failed during the transaction benchmark."""


def _create(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(120)


def produce_rate(bootstrap: str, topic: str, records: int, transactional: bool) -> float:
    """Records/s of one producer sending ``records`` (committing every COMMIT_EVERY if transactional)."""
    from confluent_kafka import KafkaException, Producer

    conf = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "enable.idempotence": True,
        "queue.buffering.max.messages": 200_000,
    }
    if transactional:
        conf["transactional.id"] = f"bench-{uuid.uuid4()}"
    errors: list = []
    conf["error_cb"] = errors.append
    p = Producer(conf)
    payload = b"x" * RECORD_BYTES
    try:
        if transactional:
            p.init_transactions(60)
            p.begin_transaction()
        p.produce(topic, payload, partition=0)  # connections, metadata and producer id before the clock
        if transactional:
            p.commit_transaction(60)
        p.flush(60)
        start = time.perf_counter()
        if transactional:
            p.begin_transaction()
        for i in range(records):
            while True:
                try:
                    p.produce(topic, payload, partition=0)
                    break
                except BufferError:
                    p.poll(0.005)
            if transactional and (i + 1) % COMMIT_EVERY == 0:
                p.commit_transaction(60)
                if i + 1 < records:
                    p.begin_transaction()
        if transactional and records % COMMIT_EVERY:
            p.commit_transaction(60)
        if p.flush(60):
            raise TxnBenchError(f"{topic}: records left unsent after 60 s")
        elapsed = time.perf_counter() - start
    except KafkaException as exc:
        raise TxnBenchError(f"{topic}: {exc}") from None
    if any(e.fatal() for e in errors):
        raise TxnBenchError(f"{topic}: {errors[0]}")
    return records / elapsed


def _pair(bootstrap: str, records: int, log: Callable[[str], None], who: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for kind, transactional in (("plain", False), ("txn", True)):
        topic = f"bench-txn-{kind}-{uuid.uuid4().hex[:8]}"
        _create(bootstrap, topic)
        produce_rate(bootstrap, topic, min(records, 5 * COMMIT_EVERY), transactional)  # warm-up
        best = 0.0
        for round_ in range(ROUNDS):
            log(
                f"transactions ({who}): {records} x {RECORD_BYTES} B, "
                f"{f'a commit every {COMMIT_EVERY}' if transactional else 'no transaction'}, "
                f"round {round_ + 1}/{ROUNDS}"
            )
            best = max(best, produce_rate(bootstrap, topic, records, transactional))
        out[kind] = best
    return out


def measure_transactions(
    report,
    bootstrap: str,
    log: Callable[[str], None],
    *,
    records: int = 200_000,
    kafka: bool = True,
    workdir: Path | None = None,
) -> None:
    strom = _pair(bootstrap, records, log, "strom")
    report.details["transactions_strom"] = strom
    report.reference(
        "strom_plain_idempotent_produce",
        strom["plain"],
        "records/s",
        f"Strom, one idempotent confluent-kafka producer, {RECORD_BYTES} B records, 1 partition, no transaction",
    )
    report.add(
        "txn_produce_commit_every_1000_records_per_s", strom["txn"], "records/s", "strom_plain_idempotent_produce"
    )
    script = reference_script() if kafka else None
    if script is None:
        log("transactions: no reference Kafka here (java or kafka-reference.sh missing); Strom's figures only")
        return
    work = Path(tempfile.mkdtemp(prefix="strom-bench-kafka-txn-", dir=workdir))
    try:
        out = subprocess.run([str(script), "start", str(work)], capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            log(f"transactions: the reference Kafka did not start: {out.stderr.strip()[-300:]}")
            return
        kport = int(out.stdout.split()[-2])
        theirs = _pair(f"127.0.0.1:{kport}", records, log, "kafka")
    finally:
        subprocess.run([str(script), "stop", str(work)], capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)
    report.details["transactions_kafka"] = theirs
    report.reference(
        "kafka_plain_idempotent_produce",
        theirs["plain"],
        "records/s",
        "the reference Kafka 4.0, same producer and records, no transaction",
    )
    report.reference(
        "kafka_txn_produce_commit_every_1000",
        theirs["txn"],
        "records/s",
        "the reference Kafka 4.0, same producer, a commit every 1,000 records",
    )
    report.add(
        "kafka_txn_produce_commit_every_1000_records_per_s",
        theirs["txn"],
        "records/s",
        "kafka_plain_idempotent_produce",
    )
    report.add("strom_txn_produce_over_kafka_txn", strom["txn"], "records/s", "kafka_txn_produce_commit_every_1000")

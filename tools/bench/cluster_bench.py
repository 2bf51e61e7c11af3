"""The in-process cluster's rows of `strom bench-testbroker`: how long ``strom.testing.cluster(3,
mode="thread")`` takes to start (three brokers over the in-memory ZooKeeper, cold: the first of a
process, warm: a later one), and a failover test end to end, as a user writes it: start the
cluster, create a 3-replica topic (min.insync.replicas=2), produce with an idempotent acks=all
producer, kill the partition's leader mid-stream, produce on, restart the killed broker and wait
until it is back in the ISR, read every record back and check none was lost or duplicated, close
the cluster."""

from __future__ import annotations

import time
import uuid
from typing import Any

RECORDS_BEFORE = 200
RECORDS_AFTER = 200


def failover_workload(cluster: Any) -> dict[str, float]:
    """The failover test on a started cluster; seconds per phase. Raises if a record is lost or
    duplicated."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    quiet = {"log_level": 0}
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    phases: dict[str, float] = {}
    t = time.perf_counter()
    cluster.brokers[0].create_topic(topic, partitions=1, replication_factor=3, min_insync_replicas=2)
    cluster.wait_for_isr(topic, 0)
    phases["create_s"] = time.perf_counter() - t
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True, **quiet}
    )
    acked: list[bytes] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())

    t = time.perf_counter()
    for i in range(RECORDS_BEFORE):
        producer.produce(topic, b"%08d" % i, on_delivery=delivered)
    if producer.flush(30):
        raise RuntimeError("records not acknowledged before the kill")
    leader = cluster.leader_of(topic, 0)
    cluster.broker(leader).kill()
    for i in range(RECORDS_BEFORE, RECORDS_BEFORE + RECORDS_AFTER):
        producer.produce(topic, b"%08d" % i, on_delivery=delivered)
    if producer.flush(60):
        raise RuntimeError("records not acknowledged after the kill")
    phases["failover_produce_s"] = time.perf_counter() - t
    t = time.perf_counter()
    cluster.broker(leader).start()
    cluster.wait_for_isr(topic, 0)
    phases["rejoin_s"] = time.perf_counter() - t
    t = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{topic}", **quiet})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < len(acked) and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(1000, 0.2) if not m.error()]
    consumer.close()
    phases["read_back_s"] = time.perf_counter() - t
    if len(values) != len(set(values)) or set(acked) - set(values):
        raise RuntimeError(f"lost or duplicated records: {len(acked)} acknowledged, {len(values)} read")
    return phases


def run_cluster() -> dict[str, Any]:
    """In a fresh interpreter (as a test session): cold and warm cluster starts, then the
    failover test end to end on a third cluster."""
    import confluent_kafka  # noqa: F401  (loaded by a test session before its first cluster)

    from strom.testing.zkcluster import StromCluster

    out: dict[str, Any] = {}
    for name in ("cold", "warm"):
        t = time.perf_counter()
        c = StromCluster(3, mode="thread").start()
        out[f"start_{name}_s"] = time.perf_counter() - t
        c.close()
    t = time.perf_counter()
    with StromCluster(3, mode="thread") as c:
        started = time.perf_counter()
        phases = failover_workload(c)
        before_close = time.perf_counter()
    end = time.perf_counter()
    out["failover"] = {"total_s": end - t, "start_s": started - t, "close_s": end - before_close, **phases}
    return out


def format_rows(runs: list[dict[str, Any]]) -> str:
    """The medians of the cluster runs as report lines."""
    import statistics

    cold = statistics.median(r["start_cold_s"] for r in runs)
    warm = statistics.median(r["start_warm_s"] for r in runs)
    failover = {k: statistics.median(r["failover"][k] for r in runs) for k in runs[0]["failover"]}
    return (
        f"in-process 3-broker cluster start (in-memory ZooKeeper, no Java): cold {cold:.3f} s, warm {warm:.3f} s\n"
        f"failover test end to end (start, 3-replica topic, {RECORDS_BEFORE}+{RECORDS_AFTER} idempotent acks=all "
        f"records with the leader killed between, old leader back, read back, close): {failover['total_s']:.3f} s "
        f"(start {failover['start_s']:.3f}, create {failover['create_s']:.3f}, "
        f"produce through the failover {failover['failover_produce_s']:.3f}, "
        f"old leader back in the ISR {failover['rejoin_s']:.3f}, read back {failover['read_back_s']:.3f}, "
        f"close {failover['close_s']:.3f})"
    )

"""A leader that lost its ZooKeeper session while an acks=all Produce waited must not acknowledge it
once it returns (issue 21), on three real brokers and a real ZooKeeper.

The leader's followers are kept from fetching (the leader's fault injection drops their Fetch
connections), a raw acks=all Produce is sent to the leader and waits, the leader is
SIGSTOPped past its ZooKeeper session, a follower is elected and takes new records, and the old
leader is resumed. It follows the new leader, truncates the record it appended and copies the new
leader's record into the same offset, its follower high watermark beyond it. The waiting Produce
must then fail (NOT_LEADER_OR_FOLLOWER); it was answered NONE with that offset, although the record
existed nowhere. Every record acknowledged in the run is read back at the end.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.support.cluster import (
    SESSION_TIMEOUT_MS,
    bootstrap,
    cluster_fixture,
    create,
    wait,
    wait_full_isr,
)
from compat_tests.support.wire import Raw
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.schema import ApiKey
from strom.testing.control import ControlClient, Faults

cluster = cluster_fixture(**{"control.listener": "127.0.0.1:0"})

TOPIC = "zombie"


def _produce_all(servers: str, values: list[bytes]) -> list[bytes]:
    """acks=all; the values acknowledged."""
    acked: list[bytes] = []
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 30000,
            "log_level": 0,
        }
    )
    for v in values:
        producer.produce(
            TOPIC, v, partition=0, on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None
        )
    producer.flush(40)
    return acked


def _leader(servers: str) -> int:
    try:
        metadata = AdminClient({"bootstrap.servers": servers}).list_topics(TOPIC, timeout=5)
        return metadata.topics[TOPIC].partitions[0].leader
    except Exception:
        return -1


def _read_all(servers: str, expected: int) -> dict[int, bytes]:
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "zombie-check", "enable.auto.commit": False, "log_level": 0}
    )
    out: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            for m in consumer.consume(1000, 1):
                if not m.error():
                    out[m.offset()] = m.value()
    finally:
        consumer.close()
    return out


def test_a_resumed_old_leader_does_not_acknowledge_a_record_it_lost(cluster):
    create(cluster, TOPIC, 1, configs={"min.insync.replicas": "2"})
    wait_full_isr(cluster, TOPIC)
    acked = _produce_all(bootstrap(cluster), [b"before-%d" % i for i in range(5)])
    assert len(acked) == 5
    old = wait(lambda: [x] if (x := _leader(bootstrap(cluster))) >= 0 else None, 15, "a leader")[0]
    followers = [n for n in range(3) if n != old]
    others = ",".join(cluster[n].bootstrap for n in followers)
    faults = Faults(ControlClient(cluster[old].info.control))
    answer: dict = {}
    stopped = False
    try:
        for n in followers:  # the followers' fetches are dropped from now on: nothing replicates
            faults.drop("Fetch", "before", count=None, client_id=f"strom-replica-{n}")
        time.sleep(1.0)  # long polls the followers had in flight are answered (they wait at most 0.5 s)
        raw = Raw(cluster[old].port)
        raw.sock.settimeout(120)

        def produce() -> None:
            try:
                answer["p"] = (
                    raw.request(
                        ApiKey.PRODUCE,
                        9,
                        {
                            "transactional_id": None,
                            "acks": -1,
                            "timeout_ms": 90_000,
                            "topic_data": [
                                {
                                    "name": TOPIC,
                                    "partition_data": [
                                        {"index": 0, "records": build_batch([Record(0, 0, b"k", b"zombie")])}
                                    ],
                                }
                            ],
                        },
                    )
                    .responses[0]
                    .partition_responses[0]
                )
            except Exception as exc:
                answer["error"] = exc

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        time.sleep(0.5)
        assert not answer, f"the produce did not wait for the followers: {answer}"
        # the leader pauses well before replica.lag.time.max.ms (5 s) could shrink its ISR
        os.kill(cluster[old].pid, signal.SIGSTOP)
        stopped = True
        new = wait(
            lambda: [x] if (x := _leader(others)) not in (-1, old) else None,
            SESSION_TIMEOUT_MS / 1000 + 30,
            "a new leader",
        )[0]
        taken = _produce_all(others, [b"after-%d" % i for i in range(5)])
        assert len(taken) == 5, "the new leader took no records"
        acked += taken
        os.kill(cluster[old].pid, signal.SIGCONT)
        stopped = False
        thread.join(100)
        raw.close()
    finally:
        if stopped:
            os.kill(cluster[old].pid, signal.SIGCONT)
    assert "error" not in answer, answer.get("error")
    p = answer["p"]
    records = _read_all(bootstrap(cluster), len(acked) + 1)
    if p.error_code == ErrorCode.NONE:
        acked.append(b"zombie")
        assert records.get(p.base_offset) == b"zombie", (
            f"acknowledged at offset {p.base_offset} by the old leader {old}, which holds "
            f"{records.get(p.base_offset)!r} on the new leader {new}"
        )
    else:  # as Kafka's DelayedProduce answers (a timeout only if the old leader took 90 s to follow)
        assert p.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT), p
    missing = set(acked) - set(records.values())
    assert not missing, f"acknowledged records lost: {sorted(missing)}"

"""Issue 21: transactional offset commits of a librdkafka producer survive a restart and a coordinator move.

librdkafka (transaction version 1) keeps one producer epoch across all its transactions. The group
coordinator writes each send_offsets_to_transaction as a transactional batch of that producer; taken
for a client append, every one after the first looked like a duplicate of it and was not written,
so after a restart (or on the replica that took over) the group went back to its first commit.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from compat_tests.support.cluster import (
    bootstrap,
    cluster_fixture,
    create,
    partition_meta,
    wait,
    wait_full_isr,
)
from strom.protocol.internal_records import partition_for

GROUP = "eos-offsets"
TIMEOUT_S = 30
ROUNDS = (100, 200, 300)

cluster = cluster_fixture(
    **{
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "3",
    }
)


def _commit_rounds(servers: str, topic: str, partitions: int, tid: str) -> None:
    """One transaction per round: a record to ``topic``-out and the group's offsets (round + partition)."""
    producer = Producer({"bootstrap.servers": servers, "transactional.id": tid, "linger.ms": 0})
    group = Consumer({"bootstrap.servers": servers, "group.id": GROUP})
    try:
        producer.init_transactions(TIMEOUT_S)
        for offset in ROUNDS:
            producer.begin_transaction()
            producer.produce(topic + "-out", b"round-%d" % offset, partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, p, offset + p) for p in range(partitions)],
                group.consumer_group_metadata(),
                TIMEOUT_S,
            )
            producer.commit_transaction(TIMEOUT_S)
    finally:
        group.close()


_errors: list[KafkaException] = []


def _committed(servers: str, topic: str, partitions: int) -> list[int] | None:
    """The group's committed offsets (read_committed: pending ones are waited for), None if not answered."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": GROUP, "isolation.level": "read_committed"})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)]
    except KafkaException as exc:
        _errors.append(exc)
        return None
    finally:
        consumer.close()


def _last_round(partitions: int) -> list[int]:
    return [ROUNDS[-1] + p for p in range(partitions)]


@pytest.mark.parametrize("crash", [False, True], ids=["stop", "kill-9"])
def test_every_transactional_offset_commit_survives_a_restart(broker, crash):
    topic = f"eos-in-{int(crash)}"
    seed = Producer({"bootstrap.servers": broker.bootstrap})
    for t in (topic, topic + "-out"):  # auto-created
        seed.produce(t, b"x")
    assert seed.flush(TIMEOUT_S) == 0
    del seed  # no client left retrying the broker while it restarts
    _commit_rounds(broker.bootstrap, topic, 1, f"eos-tx-{int(crash)}")
    assert _committed(broker.bootstrap, topic, 1) == _last_round(1)
    broker.restart(crash=crash)
    assert wait(lambda: _committed(broker.bootstrap, topic, 1), 30, "committed offsets") == _last_round(1)


@pytest.mark.parametrize("crash", [False, True], ids=["stop", "kill-9"])
def test_every_transactional_offset_commit_survives_a_coordinator_move(cluster, crash):
    topic, partitions = "eos-in", 3
    create(cluster, topic, partitions)
    create(cluster, topic + "-out", 1)
    wait_full_isr(cluster, topic, partitions)
    servers = bootstrap(cluster)
    wait(lambda: _committed(servers, topic, partitions) is not None, 30, "the group coordinator")  # makes the topic
    offsets_partition = partition_for(GROUP, 3)
    wait(
        lambda: sorted(partition_meta(cluster, "__consumer_offsets", offsets_partition).isrs) == [0, 1, 2],
        30,
        "full ISR of the group's __consumer_offsets partition",
    )
    _commit_rounds(servers, topic, partitions, "eos-cluster-tx")
    assert _committed(servers, topic, partitions) == _last_round(partitions)
    # every replica must have every commit before the coordinator goes
    wait(
        lambda: sorted(partition_meta(cluster, "__consumer_offsets", offsets_partition).isrs) == [0, 1, 2],
        30,
        "full ISR after the commits",
    )
    coordinator = partition_meta(cluster, "__consumer_offsets", offsets_partition).leader
    if crash:
        cluster[coordinator].kill()
    else:
        cluster[coordinator].stop()
    survivors = [b for b in cluster if b.running]
    wait(
        lambda: partition_meta(survivors, "__consumer_offsets", offsets_partition).leader not in (-1, coordinator),
        30,
        "a new group coordinator",
    )
    _errors.clear()
    try:
        got = wait(lambda: _committed(bootstrap(survivors), topic, partitions), 60, "committed offsets after the move")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last errors: {_errors[-3:]}") from None
    assert got == _last_round(partitions)
    # the old coordinator comes back as a follower of what the new one has: still the last round
    cluster[coordinator].start()
    assert wait(lambda: _committed(bootstrap(cluster), topic, partitions), 60, "committed offsets") == _last_round(
        partitions
    )

"""Three Strom brokers and a real ZooKeeper on 127.0.0.1: replication, failover, controller loss."""

from __future__ import annotations

import time
from collections import defaultdict

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.support.cluster import (
    SESSION_TIMEOUT_MS,
    AckedProducer,
    admin,
    bootstrap,
    cluster_fixture,
    create,
    partition_meta,
    read_back,
    wait,
)
from strom.broker.coordinator.group.records import partition_for

cluster = cluster_fixture(**{"offsets.topic.num.partitions": "6"})


def test_metadata_lists_every_broker_and_replicas(cluster):
    create(cluster, "replicated", 3)
    # Like Kafka's, the other brokers learn a new topic's leaders a moment after CreateTopics answers.
    metadata = wait(
        lambda: (lambda m: m if all(p.leader >= 0 for p in m.topics["replicated"].partitions.values()) else None)(
            admin(cluster).list_topics("replicated", timeout=10)
        ),
        15,
        "leaders everywhere",
    )
    assert sorted(metadata.brokers) == [0, 1, 2]
    assert metadata.controller_id in (0, 1, 2)
    for p in metadata.topics["replicated"].partitions.values():
        assert sorted(p.replicas) == [0, 1, 2]
        assert p.leader in (0, 1, 2)
    wait(
        lambda: all(
            sorted(p.isrs) == [0, 1, 2]
            for p in admin(cluster).list_topics("replicated", timeout=10).topics["replicated"].partitions.values()
        ),
        15,
        "full ISRs",
    )
    for b in cluster:  # any broker answers for the whole cluster
        single = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("replicated", timeout=10)
        assert sorted(single.brokers) == [0, 1, 2]


def test_acks_all_survives_leader_kill_and_the_old_leader_catches_up(cluster):
    topic = "failover"
    create(cluster, topic, 1, configs={"min.insync.replicas": "2"})
    wait(lambda: sorted(partition_meta(cluster, topic).isrs) == [0, 1, 2], 15, "full ISR")
    with AckedProducer(bootstrap(cluster), topic) as producer:
        producer.wait_acked(3000, 30, "records acknowledged before the kill")
        leader = partition_meta(cluster, topic).leader
        killed_at = time.monotonic()
        cluster[leader].kill()
        survivors = [b for b in cluster if b.running]
        new_leader = wait(
            lambda: (lambda p: [p.leader] if p.leader not in (-1, leader) else None)(partition_meta(survivors, topic)),
            30,
            "a new leader",
        )[0]  # a list: broker id 0 is falsy
        moved_after = time.monotonic() - killed_at
        producer.wait_acked(3000, 60, "acknowledgements from the new leader")
        cluster[leader].start()
        wait(
            lambda: sorted(partition_meta(cluster, topic).isrs) == [0, 1, 2], 40, "the restarted broker back in the ISR"
        )
    assert new_leader != leader and moved_after < SESSION_TIMEOUT_MS / 1000 + 10
    producer.check(read_back(bootstrap(cluster), topic, 1, producer.count))


def test_controller_failover_then_topic_creation_works(cluster):
    controller = admin(cluster).list_topics(timeout=10).controller_id
    cluster[controller].kill()
    survivors = [b for b in cluster if b.running]
    wait(
        lambda: admin(survivors).list_topics(timeout=10).controller_id not in (-1, controller),
        SESSION_TIMEOUT_MS / 1000 + 15,
        "a new controller",
    )
    create(survivors, "after-controller-loss", 2, rf=2)
    alive = [b_id for b_id in range(3) if b_id != controller]
    wait(
        lambda: all(
            p.leader in alive
            for p in admin(survivors)
            .list_topics("after-controller-loss", timeout=10)
            .topics["after-controller-loss"]
            .partitions.values()
        ),
        15,
        "leaders of the new topic on surviving brokers",
    )


def test_not_enough_replicas_when_the_isr_is_too_small(cluster):
    create(cluster, "strict", 1, configs={"min.insync.replicas": "3"})
    wait(lambda: sorted(partition_meta(cluster, "strict").isrs) == [0, 1, 2], 15, "full ISR")
    leader = partition_meta(cluster, "strict").leader
    victim = next(i for i in range(3) if i != leader)
    cluster[victim].kill()
    # Asked of the leader itself: the other brokers may learn of the shrink before the leader does,
    # and a leader that still counts the dead follower appends and waits for it.
    wait(
        lambda: len(partition_meta([cluster[leader]], "strict").isrs) == 2,
        SESSION_TIMEOUT_MS / 1000 + 15,
        "the leader to shrink the ISR",
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap(cluster), "acks": "all", "message.timeout.ms": 5000, "retries": 0}
    )
    errors = []
    producer.produce("strict", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].name() == "NOT_ENOUGH_REPLICAS"


def test_consumer_group_survives_coordinator_failover(cluster):
    create(cluster, "grouped", 3)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all"})
    for i in range(3000):
        producer.produce("grouped", b"%06d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    config = {
        "bootstrap.servers": bootstrap(cluster),
        "group.id": "survivor",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
    }
    consumer = Consumer(config)
    consumer.subscribe(["grouped"])
    seen = defaultdict(list)
    while sum(len(v) for v in seen.values()) < 1500:
        for m in consumer.consume(500, 1):
            if not m.error():
                seen[m.partition()].append(m.offset())
    consumer.commit(asynchronous=False)
    committed = {
        tp.partition: tp.offset
        for tp in consumer.committed([TopicPartition("grouped", p) for p in range(3)], timeout=10)
    }
    consumer.close()
    # kill the group's coordinator: the leader of its __consumer_offsets partition
    offsets_topic = admin(cluster).list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    leaders = {p.id: p.leader for p in offsets_topic.partitions.values()}
    victim = leaders[partition_for("survivor", len(leaders))]
    cluster[victim].kill()
    survivors = [b for b in cluster if b.running]
    consumer = Consumer({**config, "bootstrap.servers": bootstrap(survivors)})
    consumer.subscribe(["grouped"])
    first_offsets = {}
    deadline = time.monotonic() + 60
    while len(first_offsets) < 3 and time.monotonic() < deadline:
        for m in consumer.consume(500, 1):
            if not m.error():
                first_offsets.setdefault(m.partition(), m.offset())
    consumer.close()
    # no commit for a partition (-1001): it starts from the earliest offset, auto.offset.reset
    unfinished = {p: max(offset, 0) for p, offset in committed.items() if offset < 1000}
    assert unfinished, "the first consumer should have left records to read"
    assert first_offsets == unfinished, "the group did not resume from its committed offsets"


def test_offsets_are_committed_for_partitions_the_coordinator_has_no_replica_of(cluster):
    # One replica per partition: the group's coordinator hosts one of the three partitions at most.
    # Kafka's coordinator takes commits for any partition of the cluster (Strom's answered the others
    # UNKNOWN_TOPIC_OR_PARTITION).
    create(cluster, "spread", 3, rf=1)
    wait(lambda: all(partition_meta(cluster, "spread", p).leader >= 0 for p in range(3)), 20, "spread's leaders")
    # the metadata can list `__consumer_offsets` before its partitions (being created): wait for them
    offsets_topic = wait(
        lambda: [
            t
            for t in [admin(cluster).list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]]
            if t.partitions and all(p.leader >= 0 for p in t.partitions.values())
        ],
        20,
        "__consumer_offsets' leaders",
    )[0]
    coordinator = offsets_topic.partitions[partition_for("spread-group", len(offsets_topic.partitions))].leader
    hosts = {p: partition_meta(cluster, "spread", p).replicas for p in range(3)}
    assert any(coordinator not in replicas for replicas in hosts.values()), hosts
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "spread-group", "enable.auto.commit": False}
    )
    try:
        done = consumer.commit(offsets=[TopicPartition("spread", p, 10 + p) for p in range(3)], asynchronous=False)
        assert [(tp.partition, tp.error) for tp in done] == [(0, None), (1, None), (2, None)]
        committed = consumer.committed([TopicPartition("spread", p) for p in range(3)], timeout=10)
        assert [tp.offset for tp in committed] == [10, 11, 12]
    finally:
        consumer.close()

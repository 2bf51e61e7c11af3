"""Three Strom brokers and a real ZooKeeper on 127.0.0.1: replication, failover, controller loss."""
from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.broker.group.records import partition_for

from strom.tools.broker_process import BrokerProcess
from .zookeeper import zookeeper_fixture

zookeeper = pytest.fixture(scope="module")(zookeeper_fixture)

SESSION_TIMEOUT_MS = 4000


@pytest.fixture
def cluster(zookeeper, tmp_path, request):
    chroot = "/strom-" + request.node.name.replace("[", "-").replace("]", "")
    brokers = []
    try:
        for node in range(3):
            b = BrokerProcess(tmp_path / f"b{node}", {
                "node.id": str(node), "zookeeper.connect": zookeeper.connect_string + chroot,
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "replica.lag.time.max.ms": "5000", "offsets.topic.replication.factor": "3",
                "offsets.topic.num.partitions": "6", "group.initial.rebalance.delay.ms": "0",
                "default.replication.factor": "3", "min.insync.replicas": "2"})
            brokers.append(b.start())
        yield brokers
    finally:
        for b in brokers:
            b.stop()


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers if b.running)


def _admin(brokers) -> AdminClient:
    return AdminClient({"bootstrap.servers": _bootstrap(brokers)})


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _partition_meta(brokers, topic: str, partition: int = 0):
    metadata = _admin(brokers).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition]


def _create(brokers, name: str, partitions: int, rf: int = 3, configs: dict | None = None) -> None:
    admin = _admin(brokers)  # kept alive until its futures complete
    futures = admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})])
    for future in futures.values():
        future.result(timeout=30)


def test_metadata_lists_every_broker_and_replicas(cluster):
    _create(cluster, "replicated", 3)
    # Like Kafka's, the other brokers learn a new topic's leaders a moment after CreateTopics answers.
    metadata = _wait(lambda: (lambda m: m if all(p.leader >= 0 for p in m.topics["replicated"].partitions.values())
                              else None)(_admin(cluster).list_topics("replicated", timeout=10)), 15, "leaders everywhere")
    assert sorted(metadata.brokers) == [0, 1, 2]
    assert metadata.controller_id in (0, 1, 2)
    for p in metadata.topics["replicated"].partitions.values():
        assert sorted(p.replicas) == [0, 1, 2]
        assert p.leader in (0, 1, 2)
    _wait(lambda: all(sorted(p.isrs) == [0, 1, 2] for p in
                      _admin(cluster).list_topics("replicated", timeout=10).topics["replicated"].partitions.values()),
          15, "full ISRs")
    for b in cluster:  # any broker answers for the whole cluster
        single = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics("replicated", timeout=10)
        assert sorted(single.brokers) == [0, 1, 2]


def test_acks_all_survives_leader_kill_and_the_old_leader_catches_up(cluster):
    topic = "failover"
    _create(cluster, topic, 1, configs={"min.insync.replicas": "2"})
    _wait(lambda: sorted(_partition_meta(cluster, topic).isrs) == [0, 1, 2], 15, "full ISR")
    producer = Producer({"bootstrap.servers": _bootstrap(cluster), "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60000})
    acked: list[bytes] = []
    lock = threading.Lock()

    def delivered(err, msg):
        if err is None:
            with lock:
                acked.append(msg.value())

    stop = threading.Event()

    def produce():
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, b"%08d" % i, on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0.001 if i % 100 else 0.01)

    worker = threading.Thread(target=produce)
    worker.start()
    try:
        _wait(lambda: len(acked) > 3000, 30, "records acknowledged before the kill")
        leader = _partition_meta(cluster, topic).leader
        killed_at = time.monotonic()
        cluster[leader].kill()
        survivors = [b for b in cluster if b.running]
        new_leader = _wait(lambda: (lambda p: [p.leader] if p.leader not in (-1, leader) else None)(
            _partition_meta(survivors, topic)), 30, "a new leader")[0]  # a list: broker id 0 is falsy
        moved_after = time.monotonic() - killed_at
        count = len(acked)
        _wait(lambda: len(acked) > count + 3000, 60, "acknowledgements from the new leader")
        cluster[leader].start()
        _wait(lambda: sorted(_partition_meta(cluster, topic).isrs) == [0, 1, 2], 40,
              "the restarted broker back in the ISR")
    finally:
        stop.set()
        worker.join(30)
    assert producer.flush(60) == 0
    assert new_leader != leader and moved_after < SESSION_TIMEOUT_MS / 1000 + 10
    consumer = Consumer({"bootstrap.servers": _bootstrap(cluster), "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 60
    with lock:
        expected = list(acked)
    while len(values) < len(expected) and time.monotonic() < deadline:
        values.extend(m.value() for m in consumer.consume(10000, 1) if not m.error())
    consumer.close()
    assert len(values) == len(set(values)), "a record was consumed twice"
    assert values == sorted(values), "records out of order"
    missing = set(expected) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost"


def test_controller_failover_then_topic_creation_works(cluster):
    controller = _admin(cluster).list_topics(timeout=10).controller_id
    cluster[controller].kill()
    survivors = [b for b in cluster if b.running]
    _wait(lambda: _admin(survivors).list_topics(timeout=10).controller_id not in (-1, controller),
          SESSION_TIMEOUT_MS / 1000 + 15, "a new controller")
    _create(survivors, "after-controller-loss", 2, rf=2)
    alive = [b_id for b_id in range(3) if b_id != controller]
    _wait(lambda: all(p.leader in alive for p in _admin(survivors).list_topics(
        "after-controller-loss", timeout=10).topics["after-controller-loss"].partitions.values()),
        15, "leaders of the new topic on surviving brokers")


def test_not_enough_replicas_when_the_isr_is_too_small(cluster):
    _create(cluster, "strict", 1, configs={"min.insync.replicas": "3"})
    _wait(lambda: sorted(_partition_meta(cluster, "strict").isrs) == [0, 1, 2], 15, "full ISR")
    leader = _partition_meta(cluster, "strict").leader
    victim = next(i for i in range(3) if i != leader)
    cluster[victim].kill()
    # Asked of the leader itself: the other brokers may learn of the shrink before the leader does,
    # and a leader that still counts the dead follower appends and waits for it.
    _wait(lambda: len(_partition_meta([cluster[leader]], "strict").isrs) == 2,
          SESSION_TIMEOUT_MS / 1000 + 15, "the leader to shrink the ISR")
    producer = Producer({"bootstrap.servers": _bootstrap(cluster), "acks": "all", "message.timeout.ms": 5000,
                         "retries": 0})
    errors = []
    producer.produce("strict", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None and errors[0].name() == "NOT_ENOUGH_REPLICAS"


def test_consumer_group_survives_coordinator_failover(cluster):
    _create(cluster, "grouped", 3)
    producer = Producer({"bootstrap.servers": _bootstrap(cluster), "acks": "all"})
    for i in range(3000):
        producer.produce("grouped", b"%06d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    config = {"bootstrap.servers": _bootstrap(cluster), "group.id": "survivor", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 6000}
    consumer = Consumer(config)
    consumer.subscribe(["grouped"])
    seen = defaultdict(list)
    while sum(len(v) for v in seen.values()) < 1500:
        for m in consumer.consume(500, 1):
            if not m.error():
                seen[m.partition()].append(m.offset())
    consumer.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in
                 consumer.committed([TopicPartition("grouped", p) for p in range(3)], timeout=10)}
    consumer.close()
    # kill the group's coordinator: the leader of its __consumer_offsets partition
    offsets_topic = _admin(cluster).list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    leaders = {p.id: p.leader for p in offsets_topic.partitions.values()}
    victim = leaders[partition_for("survivor", len(leaders))]
    cluster[victim].kill()
    survivors = [b for b in cluster if b.running]
    consumer = Consumer({**config, "bootstrap.servers": _bootstrap(survivors)})
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

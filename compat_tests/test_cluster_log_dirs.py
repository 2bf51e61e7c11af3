"""A log dir removed under the partition leader of a 3-broker cluster: the broker takes the dir
offline and tells the controller (/log_dir_event_notification), leadership moves to an in-sync
replica, producers carry on, and nothing acknowledged is lost."""
from __future__ import annotations

import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.tools.broker_process import BrokerProcess
from .test_cluster import _bootstrap, _create, _partition_meta, _wait
from .zookeeper import zookeeper_fixture

zookeeper = pytest.fixture(scope="module")(zookeeper_fixture)


@pytest.fixture
def cluster(zookeeper, tmp_path, request):
    chroot = "/strom-" + request.node.name
    brokers = []
    try:
        for node in range(3):
            b = BrokerProcess(tmp_path / f"b{node}", {
                "node.id": str(node), "zookeeper.connect": zookeeper.connect_string + chroot,
                "zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "5000",
                "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
                "default.replication.factor": "3", "min.insync.replicas": "2",
                "log.flush.offset.checkpoint.interval.ms": "300"})
            brokers.append(b.start())
        yield brokers
    finally:
        for b in brokers:
            b.stop()


def test_removed_log_dir_moves_leadership_and_loses_nothing_acknowledged(cluster):
    topic = "dir-loss"
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
        _wait(lambda: len(acked) > 2000, 30, "records acknowledged before the dir is removed")
        leader = _partition_meta(cluster, topic).leader
        shutil.rmtree(cluster[leader].log_dir)  # the disk is gone under the running broker
        new_leader = _wait(lambda: (lambda p: [p.leader] if p.leader not in (-1, leader) else None)(
            _partition_meta(cluster, topic)), 30, "leadership moved off the failed dir")[0]
        _wait(lambda: leader not in _partition_meta(cluster, topic).isrs, 15, "the failed replica out of the ISR")
        count = len(acked)
        _wait(lambda: len(acked) > count + 2000, 60, "acknowledgements from the new leader")
        assert cluster[leader].running, "a failed log dir must not stop the broker"
    finally:
        stop.set()
        worker.join(30)
    assert producer.flush(60) == 0
    assert new_leader != leader
    survivors = [b for i, b in enumerate(cluster) if i != leader]
    consumer = Consumer({"bootstrap.servers": _bootstrap(survivors), "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 60
    with lock:
        expected = list(acked)
    while len(values) < len(expected) and time.monotonic() < deadline:
        values.extend(m.value() for m in consumer.consume(10000, 1) if not m.error())
    consumer.close()
    assert len(values) == len(set(values)), "a record was consumed twice"
    missing = set(expected) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost"
    log = cluster[leader].log_tail(1 << 20)
    assert "is offline" in log and "announced" in log

"""Fetch from follower (KIP-392) on a 3-broker cluster, each broker in its own rack and
`replica.selector.class` RackAwareReplicaSelector: a confluent-kafka consumer with `client.rack`
reads every record from the follower in its rack, also after the leader moves, and from the leader
once that follower is gone. The brokers' own /metrics (consumer bytes out per topic) prove where
the records came from."""

from __future__ import annotations

import re
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from compat_tests.support.cluster import admin, bootstrap, partition_meta, running_cluster, wait
from compat_tests.support.console import console_url, http

TOPIC = "fff"
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
VALUE_SIZE = 100


def consumer_bytes_out(broker) -> int:
    """The topic's consumer bytes out on ``broker`` (kafka_server_brokertopicmetrics_bytes_out_total)."""
    status, body, _ = http(console_url(broker) + "/metrics")
    assert status == 200
    m = re.search(
        rb'^kafka_server_brokertopicmetrics_bytes_out_total\{topic="%s"\} ([0-9.e+]+)$' % TOPIC.encode(), body, re.M
    )
    return int(float(m.group(1))) if m else 0


def produce(servers: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(TOPIC, b"%08d" % i + b"." * (VALUE_SIZE - 8), partition=0)
    assert producer.flush(30) == 0


def consume(consumer: Consumer, count: int, timeout_s: float = 30) -> list[int]:
    values: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        for m in consumer.consume(count - len(values), 1):
            assert m.error() is None, m.error()
            values.append(int(m.value()[:8]))
    return values


def rack_consumer(servers: str, rack: str, group: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "client.rack": rack,
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    return consumer


def test_a_consumer_reads_from_the_follower_in_its_rack_before_and_after_the_leader_moves_then_from_the_leader(
    zookeeper, tmp_path
):
    configs = {"replica.selector.class": RACK_AWARE, "console.listeners": "http://127.0.0.1:0"}
    with running_cluster(
        zookeeper, tmp_path, "/fff", configs, node_configs=lambda node: {"broker.rack": f"rack-{node}"}
    ) as brokers:
        servers = bootstrap(brokers)
        # leader 0; if it goes, 2 is elected (assignment order); the consumer's rack is 1's. One
        # in-sync replica suffices, so the last broker standing still takes records.
        client = admin(brokers)
        client.create_topics(
            [NewTopic(TOPIC, num_partitions=1, replica_assignment=[[0, 2, 1]], config={"min.insync.replicas": "1"})]
        )[TOPIC].result(30)
        wait(lambda: sorted(partition_meta(brokers, TOPIC).isrs) == [0, 1, 2], 20, "full ISR")
        described = client.describe_cluster().result(timeout=10)
        assert sorted((n.id, n.rack) for n in described.nodes) == [(0, "rack-0"), (1, "rack-1"), (2, "rack-2")]
        produce(servers, 0, 500)

        consumer = rack_consumer(servers, "rack-1", "fff-first")
        try:
            assert consume(consumer, 500) == list(range(500))
            follower, leader, other = (consumer_bytes_out(brokers[n]) for n in (1, 0, 2))
            assert follower >= 500 * VALUE_SIZE, "the records came from the follower in the consumer's rack"
            assert leader == 0 and other == 0, "the leader only pointed the consumer at its rack's replica"

            brokers[0].stop()  # the leader goes: broker 2 leads, broker 1 follows it
            wait(lambda: partition_meta(brokers, TOPIC).leader == 2, 30, "broker 2 leading")
            servers = bootstrap(brokers)
            produce(servers, 500, 500)
            assert consume(consumer, 500) == list(range(500, 1000)), "the follower serves what the new leader commits"
        finally:
            consumer.close()

        fresh = rack_consumer(servers, "rack-1", "fff-second")  # asks the new leader first
        try:
            assert consume(fresh, 1000) == list(range(1000))
        finally:
            fresh.close()
        assert consumer_bytes_out(brokers[1]) >= follower + 1500 * VALUE_SIZE
        assert consumer_bytes_out(brokers[2]) == 0, "the new leader, too, sent the consumers to broker 1"

        fresh = rack_consumer(servers, "rack-1", "fff-third")
        try:
            assert consume(fresh, 1000) == list(range(1000))
            before = consumer_bytes_out(brokers[2])
            brokers[1].stop()  # the rack's replica goes: the client reads from the leader again
            produce(bootstrap(brokers), 1000, 100)
            assert consume(fresh, 100) == list(range(1000, 1100))
        finally:
            fresh.close()
        assert consumer_bytes_out(brokers[2]) - before >= 100 * VALUE_SIZE, (
            "the leader served once the rack's replica was gone"
        )

"""Manual replica assignments in a 3-broker ZooKeeper cluster: confluent-kafka's
``NewTopic(replica_assignment=...)`` and ``NewPartitions(replica_assignment=...)``, and Kafka's own
``kafka-topics.sh --replica-assignment``. The brokers named, in the order named, become the
replicas (the first the leader); the followers named hold the acknowledged data; an assignment
naming a broker that is not registered is refused as Kafka refuses it."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from compat_tests.support.cluster import (
    admin,
    bootstrap,
    read_back,
    running_cluster,
    wait,
)
from compat_tests.support.jvm import java_unavailable, kafka_tool, skip_unless_available

CHROOT = "/strom-manual-assignment"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """One cluster for the module (the tests make their own topics); every broker runs again after each test."""
    with running_cluster(zookeeper, tmp_path_factory.mktemp("manual"), CHROOT, {"min.insync.replicas": "2"}) as brokers:
        yield brokers


@pytest.fixture
def everyone(cluster):
    yield bootstrap(cluster)
    for broker in cluster:
        if not broker.running:
            broker.start()


def layout(servers: str, topic: str) -> dict[int, tuple[list[int], int, list[int]]]:
    """partition -> (replicas, leader, isr) as Metadata answers them, in the order answered."""
    partitions = AdminClient({"bootstrap.servers": servers}).list_topics(topic, timeout=10).topics[topic].partitions
    return {p: (list(m.replicas), m.leader, list(m.isrs)) for p, m in partitions.items()}


def settled(servers: str, topic: str, expected: dict[int, list[int]]):
    """Until every partition is led by its first assigned replica with all replicas in sync, in order."""
    want = {p: (replicas, replicas[0], replicas) for p, replicas in expected.items()}
    return wait(lambda: layout(servers, topic) == want, 20, f"{topic} laid out as {want}")


def zk_layout(zookeeper, topic: str) -> dict[str, tuple[list[int], int, list[int]]]:
    """partition -> (replicas, leader, isr) as /brokers/topics/<t> and its partition states hold them."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zookeeper.connect_string + CHROOT)
    zk.start(timeout=10)
    try:
        replicas = json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
        states = {p: json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0]) for p in replicas}
    finally:
        zk.stop()
        zk.close()
    return {p: (replicas[p], states[p]["leader"], states[p]["isr"]) for p in replicas}


def test_confluent_kafka_creates_and_grows_a_topic_as_assigned_and_the_followers_hold_the_data(
    cluster, everyone, zookeeper
):
    client = admin(cluster)
    topic = "manual"
    client.create_topics([NewTopic(topic, 2, replica_assignment=[[1, 2], [2, 0]])])[topic].result(30)
    settled(everyone, topic, {0: [1, 2], 1: [2, 0]})
    client.create_partitions([NewPartitions(topic, 3, replica_assignment=[[0, 1]])])[topic].result(30)
    settled(everyone, topic, {0: [1, 2], 1: [2, 0], 2: [0, 1]})
    # ZooKeeper holds the assignment and the partition states as given, the first replica leading
    assert zk_layout(zookeeper, topic) == {"0": ([1, 2], 1, [1, 2]), "1": ([2, 0], 2, [2, 0]), "2": ([0, 1], 0, [0, 1])}
    # only the brokers named host a replica
    hosts = {p: sorted(b for b in range(3) if (cluster[b].log_dir / f"{topic}-{p}").is_dir()) for p in range(3)}
    assert hosts == {0: [1, 2], 1: [0, 2], 2: [0, 1]}

    # refused as Kafka refuses them, nothing created or grown
    with pytest.raises(KafkaException) as refused:
        client.create_topics([NewTopic("unplaceable", 1, replica_assignment=[[0, 7]])])["unplaceable"].result(30)
    assert refused.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
    assert "includes broker 7, but no such broker is registered" in refused.value.args[0].str()
    with pytest.raises(KafkaException) as refused:
        client.create_partitions([NewPartitions(topic, 4, replica_assignment=[[0]])])[topic].result(30)
    assert refused.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
    assert "not consistent with previous partitions, which have 2 replica(s)" in refused.value.args[0].str()
    assert len(layout(everyone, topic)) == 3
    assert "unplaceable" not in admin(cluster).list_topics(timeout=10).topics

    producer = Producer({"bootstrap.servers": everyone, "acks": "all", "linger.ms": 5})
    values = {p: [b"%d-%03d" % (p, i) for i in range(200)] for p in range(3)}
    for p, vs in values.items():
        for v in vs:
            producer.produce(topic, v, partition=p)
    assert producer.flush(30) == 0

    # partition 0's leader goes away: broker 2, its only other replica, leads it with every record
    cluster[1].kill()
    others = bootstrap(cluster)
    wait(lambda: layout(others, topic)[0][1] == 2, 30, "broker 2 leading partition 0")
    assert read_back(others, topic, 1, 200, timeout_s=30) == values[0]


def test_kafka_topics_replica_assignment(cluster, everyone):
    skip_unless_available(java_unavailable(needs="bin"))
    created = kafka_tool(
        "kafka-topics.sh",
        "--bootstrap-server",
        everyone,
        "--create",
        "--topic",
        "by-tool",
        "--replica-assignment",
        "0:1,1:2",
    )
    assert created.returncode == 0, created.stdout + created.stderr
    settled(everyone, "by-tool", {0: [0, 1], 1: [1, 2]})
    # --alter takes the whole assignment and sends the new partitions' part
    grown = kafka_tool(
        "kafka-topics.sh",
        "--bootstrap-server",
        everyone,
        "--alter",
        "--topic",
        "by-tool",
        "--partitions",
        "3",
        "--replica-assignment",
        "0:1,1:2,2:0",
    )
    assert grown.returncode == 0, grown.stdout + grown.stderr
    settled(everyone, "by-tool", {0: [0, 1], 1: [1, 2], 2: [2, 0]})
    refused = kafka_tool(
        "kafka-topics.sh",
        "--bootstrap-server",
        everyone,
        "--create",
        "--topic",
        "by-tool-2",
        "--replica-assignment",
        "0:5",
    )
    assert refused.returncode != 0
    assert "InvalidReplicaAssignmentException" in refused.stdout + refused.stderr, refused.stdout + refused.stderr

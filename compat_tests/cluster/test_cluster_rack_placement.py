"""Rack-aware replica placement on a 3-broker cluster: brokers 0 and 1 in rack "a", broker 2 in
rack "b". A topic created by confluent-kafka's admin client with replication factor 2 gets every
partition on both racks (so broker 2, alone in its rack, holds a replica of each), with the leaders
spread evenly over the three brokers; partitions added later span both racks too. Rack-unaware
placement would put some partitions on brokers 0 and 1 only."""

from __future__ import annotations

from collections import Counter

from confluent_kafka.admin import NewPartitions, NewTopic

from compat_tests.support.cluster import admin, running_cluster, wait

RACKS = {0: "a", 1: "a", 2: "b"}


def replicas(client, topic: str) -> dict[int, list[int]]:
    metadata = client.list_topics(topic, timeout=10).topics[topic]
    return {p: list(m.replicas) for p, m in metadata.partitions.items()}


def test_a_created_topic_and_its_added_partitions_span_the_racks(zookeeper, tmp_path):
    with running_cluster(
        zookeeper, tmp_path, "/rack-placement", node_configs=lambda node: {"broker.rack": RACKS[node]}
    ) as brokers:
        client = admin(brokers)
        wait(
            lambda: {n.id: n.rack for n in client.describe_cluster().result(timeout=10).nodes} == RACKS,
            20,
            "every broker registered with its rack",
        )
        client.create_topics([NewTopic("placed", num_partitions=6, replication_factor=2)])["placed"].result(30)
        # a partition the metadata lists before its state is written has no replicas yet: wait for them
        placed = wait(
            lambda: (r := replicas(client, "placed")) and len(r) == 6 and all(r.values()) and r, 20, "6 partitions"
        )
        for partition, brokers_of in placed.items():
            assert sorted(RACKS[b] for b in brokers_of) == ["a", "b"], (partition, brokers_of)
        assert Counter(r[0] for r in placed.values()) == {0: 2, 1: 2, 2: 2}, placed

        client.create_partitions([NewPartitions("placed", 9)])["placed"].result(30)
        grown = wait(
            lambda: (r := replicas(client, "placed")) and len(r) == 9 and all(r.values()) and r, 20, "9 partitions"
        )
        assert {p: grown[p] for p in range(6)} == placed
        for partition in (6, 7, 8):
            assert sorted(RACKS[b] for b in grown[partition]) == ["a", "b"], (partition, grown[partition])

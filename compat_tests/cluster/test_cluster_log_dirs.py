"""A log dir removed under the partition leader of a 3-broker cluster: the broker takes the dir
offline and tells the controller (/log_dir_event_notification), leadership moves to an in-sync
replica, producers carry on, and nothing acknowledged is lost."""

from __future__ import annotations

import shutil

from compat_tests.support.cluster import (
    AckedProducer,
    bootstrap,
    cluster_fixture,
    create,
    partition_meta,
    read_back,
    wait,
)

cluster = cluster_fixture(**{"log.flush.offset.checkpoint.interval.ms": "300"})


def test_removed_log_dir_moves_leadership_and_loses_nothing_acknowledged(cluster):
    topic = "dir-loss"
    create(cluster, topic, 1, configs={"min.insync.replicas": "2"})
    wait(lambda: sorted(partition_meta(cluster, topic).isrs) == [0, 1, 2], 15, "full ISR")
    with AckedProducer(bootstrap(cluster), topic) as producer:
        producer.wait_acked(2000, 30, "records acknowledged before the dir is removed")
        leader = partition_meta(cluster, topic).leader
        shutil.rmtree(cluster[leader].log_dir)  # the disk is gone under the running broker
        new_leader = wait(
            lambda: (lambda p: [p.leader] if p.leader not in (-1, leader) else None)(partition_meta(cluster, topic)),
            30,
            "leadership moved off the failed dir",
        )[0]
        wait(lambda: leader not in partition_meta(cluster, topic).isrs, 15, "the failed replica out of the ISR")
        producer.wait_acked(2000, 60, "acknowledgements from the new leader")
        assert cluster[leader].running, "a failed log dir must not stop the broker"
    assert new_leader != leader
    survivors = [b for i, b in enumerate(cluster) if i != leader]
    producer.check(read_back(bootstrap(survivors), topic, 1, producer.count), ordered=False)
    log = cluster[leader].log_tail(1 << 20)
    assert "is offline" in log and "announced" in log

"""Failover, tested as an application team would: a 3-broker cluster in the test process (no Java,
no Docker), the partition leader killed under an idempotent acks=all producer; every acknowledged
record is read back once."""

from confluent_kafka import Consumer, Producer, TopicPartition


def test_no_acknowledged_order_is_lost_or_doubled_when_the_leader_dies(strom_cluster):
    strom_cluster.brokers[0].create_topic("orders", partitions=1, replication_factor=3, min_insync_replicas=2)
    strom_cluster.wait_for_isr("orders", 0)
    acked = []
    producer = Producer(
        {"bootstrap.servers": strom_cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True}
    )

    def delivered(err, msg):
        if err is None:
            acked.append(msg.value())

    for i in range(300):
        producer.produce("orders", b"order-%05d" % i, on_delivery=delivered)
        if i == 150:  # mid-stream: the leader dies, a follower takes over
            producer.flush(30)
            leader = strom_cluster.leader_of("orders", 0)
            strom_cluster.brokers[leader].kill()
    assert producer.flush(60) == 0
    assert strom_cluster.wait_for_leader("orders", 0, not_broker=leader) != leader
    strom_cluster.brokers[leader].start()
    strom_cluster.wait_for_isr("orders", 0)

    consumer = Consumer({"bootstrap.servers": strom_cluster.bootstrap_servers, "group.id": "audit"})
    consumer.assign([TopicPartition("orders", 0, 0)])
    got = []
    while len(got) < len(acked):
        batch = consumer.consume(len(acked) - len(got), 10)
        assert batch, f"read {len(got)} of {len(acked)} acknowledged orders"
        got += [m.value() for m in batch if not m.error()]
    consumer.close()
    assert len(acked) == 300 and got == sorted(set(got)) and set(got) == set(acked)

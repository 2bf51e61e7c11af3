"""strom.testing.cluster(3, mode="thread"): three real brokers in this process over the in-memory
ZooKeeper (no Java, no ZooKeeper process), exercised with confluent-kafka as a user's test would:
failover under an idempotent acks=all producer, isolation, leader and coordinator moves."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from compat_tests.support.cluster import AckedProducer, read_back
from strom.testing import StromCluster, cluster


@pytest.fixture(scope="module")
def c() -> Iterator[StromCluster]:
    with cluster(3, mode="thread", offsets_topic_num_partitions=3) as running:
        yield running


def replicated_topic(c: StromCluster, topic: str) -> int:
    """A 1-partition topic on all three brokers (min.insync.replicas=2), fully in sync; its leader."""
    c.brokers[0].create_topic(topic, partitions=1, replication_factor=3, min_insync_replicas=2)
    c.wait_for_isr(topic, 0)
    return c.wait_for_leader(topic, 0)


def test_the_cluster_runs_without_any_zookeeper_process(c: StromCluster) -> None:
    assert c.zookeeper is None and c.memory_zookeeper is not None
    metadata = AdminClient({"bootstrap.servers": c.bootstrap_servers}).list_topics(timeout=10)
    assert sorted(metadata.brokers) == [0, 1, 2]
    assert c.controller_id() in (0, 1, 2)


def test_killing_the_leader_under_an_idempotent_producer_loses_and_duplicates_nothing(c: StromCluster) -> None:
    topic = "failover"
    leader = replicated_topic(c, topic)
    with AckedProducer(c.bootstrap_servers, topic) as producer:
        producer.wait_acked(500, 30, "records acknowledged before the kill")
        c.broker(leader).kill()
        new_leader = c.wait_for_leader(topic, 0, not_broker=leader)
        producer.wait_acked(500, 60, "acknowledgements from the new leader")
        c.broker(leader).start()
        c.wait_for_isr(topic, 0)
        producer.wait_acked(200, 60, "acknowledgements with the old leader back")
    assert new_leader != leader
    producer.check(read_back(c.bootstrap_servers, topic, 1, producer.count))


def test_an_isolated_leader_loses_leadership_and_rejoins_the_isr(c: StromCluster) -> None:
    topic = "isolated"
    leader = replicated_topic(c, topic)
    with AckedProducer(c.bootstrap_servers, topic) as producer:
        producer.wait_acked(200, 30, "records acknowledged before the isolation")
        c.isolate(leader, seconds=3)  # longer than the 2 s ZooKeeper session: it expires
        cut = c.broker(leader).faults.rules()
        assert {r["client_id"] for r in cut} == {
            f"strom-{kind}-{b}" for kind in ("replica", "txn") for b in (0, 1, 2)
        } - {
            f"strom-replica-{leader}",
            f"strom-txn-{leader}",
        }
        c.wait_for_leader(topic, 0, not_broker=leader)
        producer.wait_acked(200, 60, "acknowledgements from the new leader")
        c.wait_for_isr(topic, 0)  # the old leader is back in sync once the cut healed
        assert c.broker(leader).faults.rules() == []
    producer.check(read_back(c.bootstrap_servers, topic, 1, producer.count, group="isolated-check"))


def test_move_leader_and_the_group_coordinator(c: StromCluster) -> None:
    topic = "moved"
    c.brokers[0].create_topic(topic, partitions=1, replication_factor=3)
    c.wait_for_isr(topic, 0)
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
    for target in (2, 0, 1):
        c.move_leader(topic, 0, target)
        assert c.leader_of(topic, 0) == target
        producer.produce(topic, b"to %d" % target)
        assert producer.flush(30) == 0
    assert c.replicas_of(topic, 0)[0] == 1  # now its preferred replica

    partition = c.move_group_coordinator("billing", 2)
    assert c.leader_of("__consumer_offsets", partition) == 2
    consumer = Consumer(
        {"bootstrap.servers": c.bootstrap_servers, "group.id": "billing", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(10, 1) if not m.error()]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got == [b"to 2", b"to 0", b"to 1"]
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    assert admin.describe_consumer_groups(["billing"])["billing"].result(10).coordinator.id == 2


def test_cluster_operations_as_the_control_endpoint_calls_them(c: StromCluster) -> None:
    c.brokers[0].create_topic("ops", partitions=1, replication_factor=3)
    c.wait_for_isr("ops", 0)
    assert c.operation("move_leader", {"topic": "ops", "partition": 0, "broker": 1}) == {"leader": 1}
    assert c.operation("leader", {"topic": "ops", "partition": 0}) == {"leader": 1}
    status = c.operation("status", {})
    assert [b["id"] for b in status["brokers"]] == [0, 1, 2] and all(b["running"] for b in status["brokers"])
    with pytest.raises(ValueError, match="unknown cluster operation"):
        c.operation("explode", {})


def test_strom_control_moves_a_leader_and_waits_for_the_isr_of_an_in_process_cluster(c: StromCluster) -> None:
    # what a test in another language does: the cluster's control endpoint, through `strom control`
    import json

    from click.testing import CliRunner

    from strom.tools.control_cli import control

    c.brokers[0].create_topic("ops-cli", partitions=1, replication_factor=3)
    runner = CliRunner()

    def strom_control(*args: str) -> dict:
        result = runner.invoke(control, ["--to", c.control_address, *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    assert strom_control("cluster", "wait_for_isr", "topic=ops-cli", "partition=0", "timeout=20")["isr"]
    target = next(b.node_id for b in c.brokers if b.node_id != c.leader_of("ops-cli", 0))
    moved = strom_control("cluster", "move_leader", "topic=ops-cli", "partition=0", f"broker={target}")
    assert moved == {"leader": target}
    assert c.leader_of("ops-cli", 0) == target
    timed_out = runner.invoke(
        control,
        [
            "--to",
            c.control_address,
            "cluster",
            "wait_for_leader",
            "topic=ops-cli",
            "partition=0",
            f"not_broker={target}",
            "timeout=0.5",
        ],
    )
    assert timed_out.exit_code == 2, timed_out.output  # a wait that ran out: exit status 2


def test_a_leader_paused_past_its_session_is_replaced_and_catches_up_after_resume(c: StromCluster) -> None:
    topic = "paused"
    leader = replicated_topic(c, topic)
    # A frozen broker holds what was sent to it (requests and metadata requests alike): the client
    # gives up on it after its request and socket timeouts (librdkafka's defaults: 30 s and 60 s).
    timeouts = {"request.timeout.ms": 3000, "socket.timeout.ms": 3000}
    with AckedProducer(c.bootstrap_servers, topic, **timeouts) as producer:
        producer.wait_acked(200, 30, "records acknowledged before the pause")
        c.broker(leader).pause()  # a frozen process: ZooKeeper stops hearing from it
        try:
            c.wait_for_leader(topic, 0, not_broker=leader)
            producer.wait_acked(200, 60, "acknowledgements from the new leader")
        finally:
            c.broker(leader).resume()
        c.wait_for_isr(topic, 0)  # it learns its session expired, registers again, follows
    producer.check(read_back(c.bootstrap_servers, topic, 1, producer.count, group="paused-check"))


def test_the_cluster_stops_and_starts_again_with_its_topics_and_records(c: StromCluster) -> None:
    """Last in the module: the whole cluster, its in-memory ZooKeeper included, stops and comes back."""
    before = read_back(c.bootstrap_servers, "moved", 1, 3, group="restart-check")
    c.brokers[1].kill()  # one broker not shut down cleanly: its session expires on the new run
    c.stop()
    assert not any(b.running for b in c.brokers)
    c.start()
    assert c.wait_for_isr("moved", 0) and c.wait_for_leader("moved", 0) in (0, 1, 2)
    assert (
        read_back(c.bootstrap_servers, "moved", 1, 3, group="restart-check-2")
        == before
        == [
            b"to 2",
            b"to 0",
            b"to 1",
        ]
    )

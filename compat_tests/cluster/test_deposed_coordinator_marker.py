"""A deposed transaction coordinator's abort marker, held up in the network, lands after its
successor has opened the producer's next transaction: three real `strom serve` processes, a real
ZooKeeper, every inter-broker path through a controllable proxy, a confluent-kafka producer.

1. Transaction A writes "a" to the partition, which broker L leads, and aborts. The coordinator C
   (a broker other than L) writes PrepareAbort and answers, but its WriteTxnMarkers to L is held:
   the link C -> L is stalled (a first, committed transaction opened that connection).
2. C freezes (SIGSTOP); its ZooKeeper session expires and the controller moves its
   `__transaction_state` partition to another broker, which loads PrepareAbort, writes the abort
   marker itself and completes the abort.
3. Transaction B (same producer epoch: librdkafka uses transaction version 1) writes "b" to the
   partition: B is open at L.
4. The link C -> L heals (C still frozen): C's abort of A, sent before, reaches L. Kafka refuses
   it (its coordinator epoch is older than the one of the last marker L wrote for this producer:
   TRANSACTION_COORDINATOR_FENCED).
   Accepted, it would end B in this partition: "b" aborted here while B commits elsewhere.
5. B commits. A read_committed consumer must get "b", and never "a".

Before the fix, step 4 appended the stale abort and "b" was never visible: the nemesis test's
"committed txn N: 2/6 not visible" (one partition's records of a committed transaction).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.cluster import SESSION_TIMEOUT_MS, wait
from compat_tests.support.partitioned_cluster import partitioned_cluster
from compat_tests.support.reading import read_to_end
from compat_tests.support.wire import request
from strom.protocol.schema import ApiKey

TOPIC, TID = "deposed", "deposed-txn"
CONFIGS = {
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
}


@pytest.fixture
def net(zookeeper, tmp_path):
    with partitioned_cluster(zookeeper, tmp_path, "/strom-deposed", CONFIGS) as network:
        yield network


def coordinator(port: int) -> int:
    """The transaction coordinator of TID as the broker at ``port`` knows it; -1 while there is
    none (its partition moving)."""
    answer = request(port, ApiKey.FIND_COORDINATOR, 3, {"key": TID, "key_type": 1})
    return answer.node_id if answer.error_code == 0 else -1


def state(net, via: int) -> str | None:
    """TID's transaction state at its coordinator, as the broker ``via`` names it."""
    node = coordinator(net.brokers[via].port)
    if node < 0:
        return None
    try:
        answer = request(net.brokers[node].port, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TID]})
    except (OSError, AssertionError):
        return None
    found = answer.transaction_states[0]
    return found.transaction_state if found.error_code == 0 else None


def high_watermark(bootstrap: str) -> int:
    """The partition's high watermark; -1 while it cannot be had (no leader known yet)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "deposed-hw", "isolation.level": "read_uncommitted"})
    try:
        return c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
    except KafkaException:
        return -1
    finally:
        c.close()


def read_committed(bootstrap: str) -> list[bytes]:
    return [value for _, _, value in read_to_end(bootstrap, TOPIC, isolation="read_committed")]


@pytest.mark.timeout(240)
def test_a_deposed_coordinators_late_abort_does_not_end_the_next_transaction(net):
    bootstrap = ",".join(b.bootstrap for b in net.brokers)
    # socket.timeout.ms: a request to the frozen coordinator gives up in 5 s, and the producer
    # looks the coordinator up again
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": TID, "linger.ms": 0, "socket.timeout.ms": 5000}
    )
    producer.init_transactions(60)
    c = wait(lambda: [n for n in [coordinator(net.brokers[0].port)] if n >= 0], 30, "the coordinator")[0]
    leader = (c + 1) % net.size
    admin = AdminClient({"bootstrap.servers": bootstrap})
    replicas = [leader, (c + 2) % net.size, c]  # L leads, C follows
    admin.create_topics(
        [NewTopic(TOPIC, num_partitions=1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})]
    )[TOPIC].result(30)
    wait(lambda: high_watermark(bootstrap) == 0, 30, "the topic's leader")

    # a committed transaction first: C's connection for markers to L is open
    producer.begin_transaction()
    producer.produce(TOPIC, b"first", partition=0)
    producer.commit_transaction(60)
    wait(lambda: high_watermark(bootstrap) == 2, 30, "the first transaction's marker")

    # 1. transaction A, aborted; C's marker to L is held
    producer.begin_transaction()
    producer.produce(TOPIC, b"a", partition=0)
    assert producer.flush(30) == 0
    net.link(c, leader).stall()
    producer.abort_transaction(60)
    time.sleep(1)  # C sends its WriteTxnMarkers (held)
    assert high_watermark(bootstrap) == 3  # "a", no marker yet

    # 2. C freezes; the next coordinator completes the abort
    net.brokers[c].pause()
    time.sleep(SESSION_TIMEOUT_MS / 1000)
    wait(lambda: coordinator(net.brokers[leader].port) not in (c, -1), 60, "a new coordinator")
    wait(lambda: state(net, leader) == "CompleteAbort", 60, "the new coordinator to complete the abort")
    aborted = high_watermark(bootstrap)
    assert aborted >= 4  # its abort marker (written again if an answer was late: harmless)

    # 3. transaction B opens at L, in the same producer epoch
    producer.begin_transaction()
    producer.produce(TOPIC, b"b", partition=0)
    assert producer.flush(60) == 0
    assert high_watermark(bootstrap) == aborted + 1

    # 4. C's abort of A reaches L: refused (as Kafka), or appended (the defect)
    net.link(c, leader).heal()

    def landed() -> bool:
        said = net.brokers[leader].stderr_path.read_text(errors="replace")
        return "of coordinator epoch" in said or high_watermark(bootstrap) > aborted + 1

    wait(landed, 60, "the deposed coordinator's marker at the leader")
    assert high_watermark(bootstrap) == aborted + 1, "the deposed coordinator's abort was appended"

    # 5. B commits, wholly visible
    producer.commit_transaction(60)
    net.heal()
    assert read_committed(bootstrap) == [b"first", b"b"]

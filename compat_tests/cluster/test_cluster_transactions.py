"""Transactions in a 3-broker ZooKeeper cluster: markers go broker to broker, and kill -9 of the
transaction coordinator's broker in the middle of transactions leaves every transaction wholly
committed or wholly aborted (a new coordinator loads `__transaction_state` from its replica and
finishes or aborts what the old one started)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from compat_tests.support.cluster import (
    admin,
    bootstrap,
    cluster_fixture,
    create,
    partition_meta,
    wait,
)
from strom.broker.coordinator.group.records import partition_for

TID = "cluster-tx"
TXN_PARTITIONS = 3

cluster = cluster_fixture(
    **{
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    }
)


def _read_committed(brokers, topic: str, partitions: int, expected: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "group.id": "verify",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        quiet = None
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(got) >= expected and quiet and time.monotonic() - quiet > 2:
                    break
                quiet = quiet or time.monotonic()
                continue
            quiet = None
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            got.append(m.value())
    finally:
        c.close()
    return got


def test_killing_the_transaction_coordinator_leaves_every_transaction_whole(cluster):
    topic = "ctx"
    create(cluster, topic, 3)
    wait(lambda: all(sorted(partition_meta(cluster, topic, p).isrs) == [0, 1, 2] for p in range(3)), 20, "full ISRs")
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "transactional.id": TID,
            "linger.ms": 5,
            "transaction.timeout.ms": 30000,
            "message.timeout.ms": 30000,
        }
    )
    producer.init_transactions(60)
    state_partition = partition_for(TID, TXN_PARTITIONS)
    wait(
        lambda: sorted(partition_meta(cluster, "__transaction_state", state_partition).isrs) == [0, 1, 2],
        20,
        "full ISR of the coordinator's partition",
    )
    coordinator = partition_meta(cluster, "__transaction_state", state_partition).leader
    committed: list[bytes] = []
    uncertain: list[list[bytes]] = []  # transactions whose outcome the client could not learn
    killed = False
    txn = 0
    deadline = time.monotonic() + 120
    while txn < 12 and time.monotonic() < deadline:
        values = [b"t%02d-%d" % (txn, i) for i in range(9)]
        try:
            producer.begin_transaction()
            for i, v in enumerate(values):
                producer.produce(topic, v, partition=i % 3)
            producer.flush(60)
            if txn == 5 and not killed:
                cluster[coordinator].kill()  # in the middle: data written, nothing ended
                killed = True
            producer.commit_transaction(60)
            committed += values
            txn += 1
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(60)
                txn += 1
            elif error.retriable():
                uncertain.append(values)
                txn += 1
                time.sleep(0.5)
            elif error.fatal() and killed:
                # a machine too slow for the failover within transaction.timeout.ms: the coordinator
                # aborted the transaction and fenced this producer, as Kafka's would; still whole
                uncertain.append(values)
                break
            else:
                raise
    assert killed and (txn == 12 or uncertain)
    survivors = [b for b in cluster if b.running]
    got = _read_committed(survivors, topic, 3, len(committed))
    by_txn: dict[bytes, int] = {}
    for v in got:
        by_txn[v[:3]] = by_txn.get(v[:3], 0) + 1
    assert all(n == 9 for n in by_txn.values()), by_txn  # every transaction wholly there or not at all
    assert set(committed) <= set(got)
    maybe = {v for values in uncertain for v in values}
    assert set(got) - set(committed) <= maybe
    assert len(got) == len(set(got))
    _unadded_partition_is_refused_by_a_leader_that_is_not_the_coordinator(survivors, topic)
    # the killed broker comes back and catches up; the coordinator's state is consistent
    cluster[coordinator].start()
    wait(
        lambda: sorted(partition_meta(cluster, "__transaction_state", state_partition).isrs) == [0, 1, 2],
        30,
        "the restarted broker back in the ISR",
    )


def _unadded_partition_is_refused_by_a_leader_that_is_not_the_coordinator(brokers, topic: str) -> None:
    """KIP-890 verification across brokers: the leader asks the coordinator (AddPartitionsToTxn v4)."""
    from compat_tests.differential.test_transactions_differential import Raw
    from strom.protocol.records.batch import Record, build_batch
    from strom.protocol.schema import ApiKey

    tid = "verify-tx"
    raw = Raw(brokers[0].port)
    try:
        found = raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})
        assert found.error_code == 0
    finally:
        raw.close()
    coordinator = Raw(found.port)
    try:
        init = coordinator.request(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {"transactional_id": tid, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
        )
        assert init.error_code == 0
    finally:
        coordinator.close()
    meta = admin(brokers).list_topics(topic, timeout=10)
    partition = next(p for p in meta.topics[topic].partitions.values() if p.leader != found.node_id)
    leader = Raw(meta.brokers[partition.leader].port)
    try:
        batch = build_batch(
            [Record(0, 0, None, b"stray")],
            producer_id=init.producer_id,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
        produced = leader.request(
            ApiKey.PRODUCE,
            9,
            {
                "transactional_id": tid,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition.id, "records": batch}]}],
            },
        )
        assert produced.responses[0].partition_responses[0].error_code == 48  # INVALID_TXN_STATE
    finally:
        leader.close()


def test_java_client_transaction_version_2_across_brokers(cluster):
    """The Java client 4.0 uses transaction version 2 (Strom finalizes it): its batches and its
    TxnOffsetCommit reach partition leaders that are not the transaction coordinator, which add
    the partitions by asking the coordinator (AddPartitionsToTxn v5, broker to broker); every
    EndTxn v5 bumps the epoch. The round trip must come out exactly as on one broker."""
    import pytest

    from compat_tests.features.test_transactions_java import run_round_trip
    from compat_tests.support.jvm import java_unavailable

    if java_unavailable() is not None:
        pytest.skip(str(java_unavailable()))
    topic = "jtv2"
    create(cluster, topic, 1)
    create(cluster, topic + "-out", 1)
    wait(lambda: sorted(partition_meta(cluster, topic).isrs) == [0, 1, 2], 20, "full ISR")
    leader = partition_meta(cluster, topic).leader
    from compat_tests.differential.test_transactions_differential import Raw
    from strom.protocol.schema import ApiKey

    raw = Raw(cluster[0].port)
    try:  # creates __transaction_state
        wait(
            lambda: raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": "any", "key_type": 1}).error_code == 0,
            30,
            "a transaction coordinator",
        )
    finally:
        raw.close()

    def state_leaders() -> dict[int, int] | None:
        try:
            found = {p: partition_meta(cluster, "__transaction_state", p).leader for p in range(TXN_PARTITIONS)}
        except KeyError:
            return None
        return found if min(found.values()) >= 0 else None

    leaders = wait(state_leaders, 30, "__transaction_state led")
    # a transactional id coordinated by another broker than the data's leader
    tid = next((f"jtv2-{i}" for i in range(100) if leaders[partition_for(f"jtv2-{i}", TXN_PARTITIONS)] != leader), None)
    assert tid is not None, f"every __transaction_state partition is led by {leader}, the data's leader"
    run_round_trip(bootstrap(cluster), topic, tid)
    coordinator = partition_meta(cluster, "__transaction_state", partition_for(tid, TXN_PARTITIONS)).leader
    assert coordinator != leader  # the partition really was added from another broker
    raw = Raw(cluster[coordinator].port)
    try:
        described = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}).transaction_states[0]
    finally:
        raw.close()
    assert (described.transaction_state, described.producer_epoch) == ("CompleteCommit", 3)  # one bump per end

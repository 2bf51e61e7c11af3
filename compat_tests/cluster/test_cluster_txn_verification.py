"""KIP-890 part 1 in a 3-broker cluster: a partition leader verifies a classic producer's first
transactional batch with the transaction coordinator on another broker (AddPartitionsToTxn v4,
verify only). A marker that ends the transaction while that answer is on its way must make the
leader refuse the batch (INVALID_TXN_STATE, Kafka's verification guard); appended after the
marker, it would open a transaction nobody ends and hold the last stable offset back.

The coordinator's answer is held with the test control endpoint (a delay fault on its
AddPartitionsToTxn); the marker is written to the leader with WriteTxnMarkers, as the
coordinator sends it, once the coordinator has received the leader's question.
"""

from __future__ import annotations

import threading

from compat_tests.support.cluster import (
    cluster_fixture,
    create,
    partition_meta,
    wait,
    wait_full_isr,
)
from compat_tests.support.wire import Raw, request
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.schema import ApiKey
from strom.tools.testing.control import ControlClient, Faults

TID = "guarded-tx"
TOPIC = "guarded"
HOLD_MS = 4000  # below the leader's 5 s limit for the coordinator's answer

cluster = cluster_fixture(
    **{
        "control.listener": "127.0.0.1:0",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "transaction.state.log.num.partitions": "3",
    }
)


def _coordinator(brokers) -> int:
    def found():  # (node id,): node 0 is a coordinator too
        answer = request(brokers[0].port, ApiKey.FIND_COORDINATOR, 3, {"key": TID, "key_type": 1})
        return (answer.node_id,) if answer.error_code == ErrorCode.NONE else None

    return wait(found, 30, "the transaction coordinator")[0]


def _offsets(port: int, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset) as ListOffsets answers them."""

    def latest(isolation: int) -> int:
        answer = request(
            port,
            ApiKey.LIST_OFFSETS,
            5,
            {
                "replica_id": -1,
                "isolation_level": isolation,
                "topics": [
                    {
                        "name": TOPIC,
                        "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}],
                    }
                ],
            },
        )
        return answer.topics[0].partitions[0].offset

    return latest(0), latest(1)


def test_a_marker_during_verification_elsewhere_refuses_the_batch(cluster):
    create(cluster, TOPIC, 3)
    wait_full_isr(cluster, TOPIC, 3)
    coordinator = cluster[_coordinator(cluster)]
    init = wait(
        lambda: (lambda a: a if a.error_code == ErrorCode.NONE else None)(
            request(
                coordinator.port,
                ApiKey.INIT_PRODUCER_ID,
                4,
                {"transactional_id": TID, "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1},
            )
        ),
        30,
        "a producer id",
    )
    pid, epoch = init.producer_id, init.producer_epoch
    # a partition led by another broker than the coordinator (each broker leads one of three)
    partition, leader_id = next(
        (p, m.leader) for p in range(3) if (m := partition_meta(cluster, TOPIC, p)).leader != cluster.index(coordinator)
    )
    leader = cluster[leader_id]
    added = request(
        coordinator.port,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": TID,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [partition]}],
        },
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.NONE

    faults = Faults(ControlClient(coordinator.info.control))
    faults.record()
    faults.delay("AddPartitionsToTxn", HOLD_MS)
    answer = {}

    def produce():
        batch = build_batch(
            [Record(0, 0, b"k", b"late")], producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
        )
        with Raw(leader.port) as raw:
            answer["response"] = raw.request(
                ApiKey.PRODUCE,
                9,
                {
                    "transactional_id": TID,
                    "acks": -1,
                    "timeout_ms": 10_000,
                    "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}],
                },
            )

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        wait(
            lambda: any(r["api"] == "AddPartitionsToTxn" and r["version"] >= 4 for r in faults.recorded()),
            HOLD_MS / 1000 - 1,
            "the leader's verification request at the coordinator",
        )
        markers = request(
            leader.port,
            ApiKey.WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "transaction_result": False,
                        "coordinator_epoch": 0,
                        "topics": [{"name": TOPIC, "partition_indexes": [partition]}],
                    }
                ]
            },
        )
        assert markers.markers[0].topics[0].partitions[0].error_code == ErrorCode.NONE
    finally:
        thread.join(30)
        faults.clear()
    part = answer["response"].responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.INVALID_TXN_STATE
    assert _offsets(leader.port, partition) == (1, 1)  # only the marker; nothing holds the LSO back

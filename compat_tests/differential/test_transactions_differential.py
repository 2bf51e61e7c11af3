"""Transactions, differentially: the same scenario against Strom and the reference Kafka 4.0, the
answers compared field by field (offsets, high watermark, last stable offset, aborted-transaction
lists, producer state, transaction state and Kafka's error codes for requests that do not fit).

Everything compared here is equal today (Kafka 4.0's answers are also asserted at the end, so a
change on either side shows). The producer id itself differs between brokers and is compared only
as "the aborted transaction's producer is the one that wrote the batches".
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.reference import module_reference
from compat_tests.support.wire import Raw, fetch_partition
from strom.protocol.records.batch import Record, build_batch, iter_batches, iter_records
from strom.protocol.schema import ApiKey

TOPIC = "dt"


@pytest.fixture(scope="module")
def kafka_port(tmp_path_factory):
    for port, _ in module_reference(tmp_path_factory):
        yield port


def _scenario(port: int) -> dict:
    """Commit 3 records, abort 2, leave 1 open (confluent-kafka), then observe with raw requests."""
    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "diff-tx", "linger.ms": 50})
    p.init_transactions(60)
    for values, end in (([b"c0", b"c1", b"c2"], "commit"), ([b"a0", b"a1"], "abort"), ([b"o0"], None)):
        p.begin_transaction()
        for v in values:
            p.produce(TOPIC, value=v, partition=0)
        p.flush(60)
        if end == "commit":
            p.commit_transaction(60)
        elif end == "abort":
            p.abort_transaction(60)
    try:
        with Raw(port) as raw:
            return _observe(raw) | {"errors": _errors(raw)}
    finally:
        p.purge()


def _list_offset(raw: Raw, isolation: int) -> int:
    r = raw.request(
        ApiKey.LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}
            ],
        },
    )
    return r.topics[0].partitions[0].offset


def _observe(raw: Raw) -> dict:
    part = fetch_partition(raw, TOPIC)
    data = bytes(part.records or b"")
    batches = [
        (
            h.base_offset,
            h.last_offset,
            h.is_transactional,
            h.is_control,
            [r.value for r in iter_records(data[pos : pos + h.size])] if not h.is_control else None,
        )
        for pos, h in iter_batches(data)
    ]
    pids = {h.producer_id for _, h in iter_batches(data)}
    producers = raw.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    (state,) = producers.topics[0].partitions[0].active_producers
    described = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["diff-tx", "no-such-id"]})
    mine, unknown = described.transaction_states
    listed = raw.request(
        ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": ["Ongoing", "NoSuchState"], "producer_id_filters": []}
    )
    return {
        "high_watermark": part.high_watermark,
        "last_stable_offset": part.last_stable_offset,
        "list_offsets": (_list_offset(raw, 0), _list_offset(raw, 1)),
        "fetched_batches": batches,
        "one_producer": len(pids) == 1,
        "aborted": [(a.producer_id in pids, a.first_offset) for a in part.aborted_transactions],
        "producer": (state.producer_epoch, state.last_sequence, state.current_txn_start_offset),
        "describe": (
            mine.error_code,
            mine.transaction_state,
            mine.producer_epoch,
            [(t.topic, list(t.partitions)) for t in mine.topics],
            unknown.error_code,
        ),
        "list": (
            [(t.transactional_id, t.transaction_state) for t in listed.transaction_states],
            list(listed.unknown_state_filters),
        ),
    }


def _errors(raw: Raw) -> dict:
    """Error codes of transactional requests that do not fit, each answered by both brokers."""
    out = {}
    tid = "err-tx"
    raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})

    def init(timeout_ms, pid=-1, epoch=-1):
        return raw.request(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": tid,
                "transaction_timeout_ms": timeout_ms,
                "producer_id": pid,
                "producer_epoch": epoch,
            },
        )

    out["init_timeout_too_large"] = init(900_001).error_code
    first = init(60_000)
    pid = first.producer_id
    out["init"] = (first.error_code, first.producer_epoch)

    def end(p, e, commit=True):
        return raw.request(
            ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": p, "producer_epoch": e, "committed": commit}
        ).error_code

    out["end_empty"] = end(pid, 0)
    out["end_old_epoch"] = end(pid, 1)
    out["end_unknown_pid"] = end(pid + 1000, 0)
    out["end_unknown_id"] = raw.request(
        ApiKey.END_TXN, 3, {"transactional_id": "never-seen", "producer_id": 5, "producer_epoch": 0, "committed": True}
    ).error_code
    added = raw.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}, {"name": "no-such-topic", "partitions": [0]}],
        },
    )
    out["add_with_unknown_topic"] = sorted(
        (t.name, p.partition_error_code) for t in added.results_by_topic_v3_and_below for p in t.results_by_partition
    )
    batch = build_batch(
        [Record(0, 0, None, b"x")], producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    produced = raw.request(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": tid,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    out["produce_not_added"] = produced.responses[0].partition_responses[0].error_code
    bumped = init(60_000, pid, 0)
    out["init_kip360_bump"] = (bumped.error_code, bumped.producer_id == pid, bumped.producer_epoch)
    out["init_kip360_stale"] = init(60_000, pid, 0).error_code
    return out


def test_transactions_answer_as_kafka_does(broker, kafka_port):
    strom = _scenario(broker.port)
    kafka = _scenario(kafka_port)
    for key in kafka:
        assert strom[key] == kafka[key], key
    # and what they are (Kafka's answers, recorded here so a change on either side is seen)
    assert kafka["high_watermark"] == 8 and kafka["last_stable_offset"] == 7
    assert kafka["aborted"] == [(True, 4)]

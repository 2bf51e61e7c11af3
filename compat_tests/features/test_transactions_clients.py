"""Transactions with kafka-python, aiokafka and kafkajs: commit, abort, a read_committed consumer of
the same client sees exactly the committed records and a read_uncommitted one all of them, and
(aiokafka, kafka-python) offsets sent to a transaction become the group's on commit."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.clients import kafkajs
from compat_tests.support.paths import KAFKAJS_DIR

TIMEOUT_S = 30
COMMITTED = [b"c0", b"c1", b"c2", b"c3"]
ABORTED = [b"a0", b"a1"]


def _create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(TIMEOUT_S)


def test_kafka_python_transactions(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "kp-txn")
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-tx")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for v in COMMITTED[:2]:
            producer.send("kp-txn", v, partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        for v in ABORTED:
            producer.send("kp-txn", v, partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        for v in COMMITTED[2:]:
            producer.send("kp-txn", v, partition=0)
        producer.send_offsets_to_transaction({TopicPartition("kp-txn", 0): _offset(7)}, "kp-group")
        producer.commit_transaction()
    finally:
        producer.close()

    for isolation, expected in (
        ("read_committed", COMMITTED),
        ("read_uncommitted", COMMITTED[:2] + ABORTED + COMMITTED[2:]),
    ):
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level=isolation,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=2000,
        )
        try:
            consumer.assign([TopicPartition("kp-txn", 0)])
            consumer.seek_to_beginning()
            got = [m.value for m in consumer]
        finally:
            consumer.close()
        assert got == expected, isolation
    group = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp-group", enable_auto_commit=False)
    try:
        assert group.committed(TopicPartition("kp-txn", 0)) == 7
    finally:
        group.close()


def _offset(offset: int):
    from kafka.structs import OffsetAndMetadata

    try:
        return OffsetAndMetadata(offset, "", -1)
    except TypeError:
        return OffsetAndMetadata(offset, "")


def test_aiokafka_transactions(shared_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "aio-txn")

    async def run() -> dict:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx")
        await producer.start()
        try:
            async with producer.transaction():
                for v in COMMITTED[:2]:
                    await producer.send_and_wait("aio-txn", v, partition=0)
            await producer.begin_transaction()
            for v in ABORTED:
                await producer.send_and_wait("aio-txn", v, partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                for v in COMMITTED[2:]:
                    await producer.send_and_wait("aio-txn", v, partition=0)
                await producer.send_offsets_to_transaction({TopicPartition("aio-txn", 0): 5}, "aio-group")
        finally:
            await producer.stop()
        out = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                isolation_level=isolation,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                consumer.assign([TopicPartition("aio-txn", 0)])
                await consumer.seek_to_beginning()
                got: list[bytes] = []
                deadline = time.monotonic() + TIMEOUT_S
                while time.monotonic() < deadline:
                    batch = await consumer.getmany(timeout_ms=1000)
                    if not batch and got:
                        break
                    for records in batch.values():
                        got += [r.value for r in records]
                out[isolation] = got
            finally:
                await consumer.stop()
        group = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="aio-group", enable_auto_commit=False)
        await group.start()
        try:
            out["committed"] = await group.committed(TopicPartition("aio-txn", 0))
        finally:
            await group.stop()
        return out

    out = asyncio.run(asyncio.wait_for(run(), 120))
    assert out["read_committed"] == COMMITTED
    assert out["read_uncommitted"] == COMMITTED[:2] + ABORTED + COMMITTED[2:]
    assert out["committed"] == 5


TXN_SCRIPT = KAFKAJS_DIR / "transactions.js"


@pytest.mark.skipif(kafkajs.unavailable() is not None, reason=str(kafkajs.unavailable()))
def test_kafkajs_transactions(shared_broker):
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, "js-txn")
    done = subprocess.run(
        ["node", str(TXN_SCRIPT), bootstrap, "js-txn", "js-tx"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["read_committed"] == [v.decode() for v in COMMITTED]
    assert out["read_uncommitted"] == [v.decode() for v in COMMITTED[:2] + ABORTED + COMMITTED[2:]]
    assert out["committed"] == "5"

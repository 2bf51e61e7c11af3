import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import tools


@pytest.mark.asyncio
async def test_round_trip_with_aiokafka(strom_broker, strom_topic):
    producer = AIOKafkaProducer(bootstrap_servers=strom_broker.bootstrap_servers)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(strom_topic, tools.encode(i, "cup"), partition=1)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        strom_topic, bootstrap_servers=strom_broker.bootstrap_servers, group_id="aio", auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        got = [tools.decode((await asyncio.wait_for(consumer.getone(), 15)).value) for _ in range(5)]
        await consumer.commit()
    finally:
        await consumer.stop()
    assert got == [(i, "cup") for i in range(5)]


@pytest.mark.asyncio
async def test_faults_from_asyncio(strom_broker, strom_topic):
    strom_broker.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", topic=strom_topic)
    producer = AIOKafkaProducer(bootstrap_servers=strom_broker.bootstrap_servers, retry_backoff_ms=50)
    await producer.start()
    try:
        metadata = await producer.send_and_wait(strom_topic, b"retried", partition=0)
    finally:
        await producer.stop()
    assert metadata.offset == 0 and strom_broker.faults.rules() == []

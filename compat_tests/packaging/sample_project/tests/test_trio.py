import pytest
import trio
from confluent_kafka import Producer


@pytest.mark.trio
async def test_broker_from_a_trio_test(strom_broker, strom_topic):
    def produce() -> int:
        producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers})
        producer.produce(strom_topic, b"from trio")
        return producer.flush(10)

    assert await trio.to_thread.run_sync(produce) == 0
    assert strom_topic in strom_broker.faults.status()["topics"]


@pytest.mark.strom_broker(num_partitions=4)
def test_a_broker_of_its_own_with_configs_from_a_marker(strom_broker, strom_topic, strom_admin):
    assert len(strom_admin.list_topics(strom_topic, timeout=10).topics[strom_topic].partitions) == 4


@pytest.mark.strom_topic(partitions=3, cleanup_policy="compact")
def test_topic_partitions_and_configs_from_a_marker(strom_topic, strom_admin):
    from confluent_kafka.admin import ConfigResource

    assert len(strom_admin.list_topics(strom_topic, timeout=10).topics[strom_topic].partitions) == 3
    configs = next(iter(strom_admin.describe_configs([ConfigResource("TOPIC", strom_topic)]).values())).result(10)
    assert configs["cleanup.policy"].value == "compact"

"""Producing to a topic that does not exist, with auto.create.topics.enable on and off."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message, Producer

from compat_tests.support.admin import partition_count, unique_topic
from compat_tests.support.brokers import BrokerFactory

FLUSH_TIMEOUT_S = 60.0


def produce_one(bootstrap: str, topic: str) -> KafkaError | None:
    """Produce one record; the delivery error (None on success)."""
    outcome: list[KafkaError | None] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        outcome.append(err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "message.timeout.ms": 10_000,
            "topic.metadata.propagation.max.ms": 3_000,
        }
    )
    producer.produce(topic, value=b"hello", key=b"k", on_delivery=on_delivery)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert len(outcome) == 1
    return outcome[0]


def test_auto_create_on_uses_num_partitions(make_broker: BrokerFactory) -> None:
    broker = make_broker({"auto.create.topics.enable": "true", "num.partitions": "3"})
    topic = unique_topic("auto-on")
    assert produce_one(broker.bootstrap, topic) is None
    assert partition_count(broker.bootstrap, topic) == 3


def test_auto_create_off_reports_unknown_topic(make_broker: BrokerFactory) -> None:
    broker = make_broker({"auto.create.topics.enable": "false"})
    topic = unique_topic("auto-off")
    err = produce_one(broker.bootstrap, topic)
    assert err is not None
    assert err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), err
    assert partition_count(broker.bootstrap, topic) is None

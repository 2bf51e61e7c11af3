import time

from confluent_kafka import Consumer, Producer

import tools


def test_our_tools_package_is_ours_and_strom_is_under_its_namespace():
    import strom.tools

    assert tools.OWNER == "sample-project"
    assert strom.tools.__name__ == "strom.tools" and strom.tools.__file__ != tools.__file__


def test_round_trip_with_confluent_kafka(strom_broker, strom_topic, strom_admin):
    metadata = strom_admin.list_topics(strom_topic, timeout=10)
    assert len(metadata.topics[strom_topic].partitions) == 2  # strom_broker_configs in pytest.ini
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers})
    for i in range(10):
        producer.produce(strom_topic, tools.encode(i, "book"), key=b"k")
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": strom_broker.bootstrap_servers, "group.id": "orders", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([strom_topic])
    got, deadline = [], time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(tools.decode(msg.value()))
    consumer.close()
    assert got == [(i, "book") for i in range(10)]


def test_each_test_gets_a_fresh_topic(strom_topic, strom_admin):
    topics = strom_admin.list_topics(timeout=10).topics
    assert strom_topic in topics and "test_each_test_gets_a_fresh_topic" in strom_topic

from kafka import KafkaConsumer, KafkaProducer

import tools


def test_round_trip_with_kafka_python(strom_broker, strom_topic):
    producer = KafkaProducer(bootstrap_servers=strom_broker.bootstrap_servers)
    for i in range(5):
        producer.send(strom_topic, tools.encode(i, "pen"), partition=0)
    producer.flush(10)
    producer.close()
    consumer = KafkaConsumer(
        strom_topic,
        bootstrap_servers=strom_broker.bootstrap_servers,
        group_id="kp",
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
    )
    got = []
    for msg in consumer:
        got.append(tools.decode(msg.value))
        if len(got) == 5:
            break
    consumer.commit()
    consumer.close()
    assert got == [(i, "pen") for i in range(5)]

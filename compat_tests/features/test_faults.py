"""Fault injection as a test suite uses it: real clients' reactions to errors, lost connections,
slow answers and an older Kafka, through the pytest plugin's fixtures (strom_broker, strom_topic)."""

from __future__ import annotations

import logging
import re
import time

from confluent_kafka import Consumer, Producer, TopicPartition

QUIET = {"log_level": 0}


def _consume_all(bootstrap: str, topic: str, n: int, timeout: float = 20.0, **conf) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
            **conf,
        }
    )
    consumer.subscribe([topic])
    out, deadline = [], time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg.value())
        end = time.monotonic() + 0.5  # anything beyond n (a duplicate) would show up now
        while time.monotonic() < end:
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def test_not_leader_then_success_on_retry(strom_broker, strom_topic):
    strom_broker.faults.record()
    strom_broker.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2, topic=strom_topic)
    reports = []
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers, "linger.ms": 0, **QUIET})
    producer.produce(strom_topic, b"only-once", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(20) == 0
    assert reports == [None]  # delivered, the two NOT_LEADER_OR_FOLLOWER answers were retried
    assert strom_broker.faults.rules() == []  # both faults were used
    apis = [r["api"] for r in strom_broker.faults.recorded() if r["client_id"] == "rdkafka"]
    produces = [i for i, api in enumerate(apis) if api == "Produce"]
    assert len(produces) == 3
    # after a NOT_LEADER_OR_FOLLOWER the client asks for the leader again before retrying
    assert "Metadata" in apis[produces[0] : produces[-1]]
    assert _consume_all(strom_broker.bootstrap_servers, strom_topic, 1) == [b"only-once"]


def test_connection_dropped_after_produce_gives_no_duplicates_with_idempotence(strom_broker, strom_topic):
    strom_broker.faults.record()
    # the Produce takes effect, then the connection drops before the answer: the producer retries
    strom_broker.faults.drop("Produce", when="after", topic=strom_topic)
    producer = Producer(
        {"bootstrap.servers": strom_broker.bootstrap_servers, "enable.idempotence": True, "linger.ms": 50, **QUIET}
    )
    values = [b"%03d" % i for i in range(20)]
    for v in values:
        producer.produce(strom_topic, v)
    assert producer.flush(30) == 0
    sent = [r for r in strom_broker.faults.recorded() if r["api"] == "Produce"]
    assert len(sent) >= 2  # the batch went twice
    assert _consume_all(strom_broker.bootstrap_servers, strom_topic, len(values)) == values
    consumer = Consumer({"bootstrap.servers": strom_broker.bootstrap_servers, "group.id": "w", **QUIET})
    assert consumer.get_watermark_offsets(TopicPartition(strom_topic, 0), timeout=10) == (0, len(values))
    consumer.close()


def test_delayed_fetch_times_out_as_the_client_is_configured_then_recovers(strom_broker, strom_topic):
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers, **QUIET})
    producer.produce(strom_topic, b"late")
    assert producer.flush(10) == 0
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger(f"rdkafka-{strom_topic}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    delay_ms = 6000
    strom_broker.faults.delay("Fetch", delay_ms, topic=strom_topic)
    got = _consume_all(
        strom_broker.bootstrap_servers,
        strom_topic,
        1,
        timeout=20,
        **{"socket.timeout.ms": 1500, "fetch.wait.max.ms": 100, "logger": logger, "log_level": 6},
    )
    assert got == [b"late"]  # the next Fetch (no fault left) got the record
    timed_out = [m for m in lines if "Timed out FetchRequest in flight" in m]
    assert timed_out, lines
    waited_ms = int(re.search(r"after (\d+)ms", timed_out[0]).group(1))
    assert 1500 <= waited_ms < delay_ms  # the client's own timeout, not the broker's delay, ended it


def test_version_cap_makes_clients_fall_back(strom_broker, strom_topic):
    import kafka

    def versions_sent() -> dict[tuple[str, str], set[int]]:
        strom_broker.faults.record()
        producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers, **QUIET})
        producer.produce(strom_topic, b"x")
        assert producer.flush(10) == 0
        kp = kafka.KafkaProducer(bootstrap_servers=strom_broker.bootstrap_servers, client_id="kp")
        kp.send(strom_topic, b"y").get(timeout=10)
        kp.close()
        seen: dict[tuple[str, str], set[int]] = {}
        for r in strom_broker.faults.recorded():
            seen.setdefault((r["client_id"], r["api"]), set()).add(r["version"])
        strom_broker.faults.record(False)
        return seen

    current = versions_sent()
    assert max(current["rdkafka", "Produce"]) >= 7 and max(current["kp", "Produce"]) >= 7
    strom_broker.faults.cap_versions("2.0")  # Kafka 2.0: Produce up to v6, Metadata up to v6
    capped = versions_sent()
    assert capped["rdkafka", "Produce"] == {6} and capped["kp", "Produce"] == {6}
    # ApiVersions above 2.0's v2 got UNSUPPORTED_VERSION (as from that Kafka): each client asked again lower
    for client in ("rdkafka", "kp"):
        asked = capped[client, "ApiVersions"]
        assert max(asked) > 2 and min(asked) <= 2, (client, asked)
    assert max(capped["rdkafka", "Metadata"]) <= 6 and max(capped["kp", "Metadata"]) <= 6
    assert _consume_all(strom_broker.bootstrap_servers, strom_topic, 4) == [b"x", b"y", b"x", b"y"]

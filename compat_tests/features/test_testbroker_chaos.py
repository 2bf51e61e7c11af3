"""strom.testing's waits and chaos rules as a user's test suite uses them, with confluent-kafka,
aiokafka and the Java client: one sample test per feature, waits only (no sleeps), through the
pytest plugin's fixtures (strom_broker, strom_topic)."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from compat_tests.support.jvm import KAFKA_HOME, java_unavailable
from strom.testing import WaitTimeout, abroker

QUIET = {"log_level": 0}
JAVA = Path(__file__).parent / "java" / "ChaosConsumer.java"


def _producer(bootstrap: str, **conf) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retry.backoff.ms": 20, **QUIET, **conf})


def _send(producer: Producer, topic: str, n: int) -> None:
    for i in range(n):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(30) == 0


class ConsumedInBackground:
    """A consumer that polls on its own thread (a Kafka client takes part in its group only from
    poll()) and commits what it got, while the test waits on the broker."""

    def __init__(self, bootstrap: str, topic: str, group: str, **conf) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 100,
                "reconnect.backoff.ms": 20,
                **QUIET,
                **conf,
            }
        )
        self.consumer.subscribe([topic])
        self.values: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and not msg.error():
                self.values.append(msg.value())

    def __enter__(self) -> ConsumedInBackground:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


# ----------------------------------------------------------------------------- rules you can wait on
def test_wait_until_a_rule_was_hit_instead_of_sleeping(strom_broker, strom_topic):
    refused = strom_broker.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2, topic=strom_topic)
    producer = _producer(strom_broker.bootstrap_servers)
    producer.produce(strom_topic, b"once")
    refused.wait(2)  # both refusals happened: the client is retrying now
    assert producer.flush(30) == 0
    assert strom_broker.wait_for_offset(strom_topic, 0, 1)["high_watermark"] == 1


def test_observe_only_counts_the_fetches_a_consumer_makes(strom_broker, strom_topic):
    fetches = strom_broker.faults.observe("Fetch", topic=strom_topic)
    _send(_producer(strom_broker.bootstrap_servers), strom_topic, 5)
    with ConsumedInBackground(strom_broker.bootstrap_servers, strom_topic, f"g-{strom_topic}"):
        fetches.wait(3)  # it keeps long-polling after it has all five
        strom_broker.wait_for_lag(f"g-{strom_topic}", strom_topic)
    assert fetches.hits >= 3


def test_a_predicate_fails_only_the_produces_of_one_client(strom_broker, strom_topic):
    rule = strom_broker.faults.error(
        "Produce", "NOT_ENOUGH_REPLICAS", count=None, predicate=lambda request: request.client_id == "flaky"
    )
    _send(_producer(strom_broker.bootstrap_servers, **{"client.id": "steady"}), strom_topic, 3)
    assert rule.hits == 0
    flaky = _producer(strom_broker.bootstrap_servers, **{"client.id": "flaky", "message.timeout.ms": 2000})
    reports: list = []
    flaky.produce(strom_topic, b"x", on_delivery=lambda err, msg: reports.append(err))
    flaky.flush(10)
    assert reports and reports[0] is not None and rule.hits >= 1


# ----------------------------------------------------------------------------- waits on the broker
def test_wait_for_group_and_lag_with_a_consumer_group(strom_broker, strom_topic):
    group = f"g-{strom_topic}"
    _send(_producer(strom_broker.bootstrap_servers), strom_topic, 20)
    with ConsumedInBackground(strom_broker.bootstrap_servers, strom_topic, group, **{"group.protocol": "consumer"}):
        seen = strom_broker.wait_for_group(group, members=1, timeout=30)
        assert (seen["type"], seen["state"]) == ("consumer", "Stable")
        assert strom_broker.wait_for_lag(group, strom_topic, timeout=30)["lag"] == 0
    assert strom_broker.wait_for_group(group, state="Empty")["members"] == 0


def test_wait_for_connections(strom_broker):
    before = strom_broker.connections()
    producer = _producer(strom_broker.bootstrap_servers)
    producer.list_topics(timeout=10)
    strom_broker.wait_for_connections(before + 1)
    del producer
    strom_broker.wait_for_connections(before, at_least=False)


def test_a_wait_that_runs_out_says_what_it_saw(strom_broker, strom_topic):
    with pytest.raises(WaitTimeout) as caught:
        strom_broker.wait_for_offset(strom_topic, 0, 10, timeout=0.2)
    assert "to reach high_watermark 10" in str(caught.value) and "'high_watermark': 0" in str(caught.value)


# ----------------------------------------------------------------------------- chaos profiles
def test_an_error_rate_and_jitter_lose_nothing_and_duplicate_nothing_with_idempotence(strom_broker, strom_topic):
    flaky = strom_broker.faults.error_rate("Produce", "NOT_LEADER_OR_FOLLOWER", rate=0.3, seed=42, topic=strom_topic)
    slow = strom_broker.faults.slow(5, jitter_ms=20, api="Produce", topic=strom_topic)
    producer = _producer(strom_broker.bootstrap_servers, **{"enable.idempotence": True, "batch.num.messages": 5})
    _send(producer, strom_topic, 50)
    assert flaky.hits >= 1 and slow.hits >= 1
    flaky.remove()
    slow.remove()
    with ConsumedInBackground(strom_broker.bootstrap_servers, strom_topic, f"g-{strom_topic}") as c:
        strom_broker.wait_for_lag(f"g-{strom_topic}", strom_topic, timeout=30)
    assert sorted(c.values) == sorted(b"v%d" % i for i in range(50))


def test_a_connection_cut_mid_answer_and_duplicated_fetch_records_deliver_each_record_once(strom_broker, strom_topic):
    _send(_producer(strom_broker.bootstrap_servers), strom_topic, 30)
    cut = strom_broker.faults.cut("Fetch", after_bytes=40, topic=strom_topic)
    doubled = strom_broker.faults.duplicate(count=None, topic=strom_topic)
    with ConsumedInBackground(strom_broker.bootstrap_servers, strom_topic, f"g-{strom_topic}") as c:
        strom_broker.wait_for_lag(f"g-{strom_topic}", strom_topic, timeout=30)
    assert cut.hits == 1 and doubled.hits >= 1
    assert sorted(c.values) == sorted(b"v%d" % i for i in range(30))  # no record twice


def test_a_throttle_time_reaches_the_client(strom_broker, strom_topic):
    throttled = []
    producer = _producer(strom_broker.bootstrap_servers, throttle_cb=lambda event: throttled.append(event))
    strom_broker.faults.throttle("Produce", 300, topic=strom_topic)
    _send(producer, strom_topic, 1)
    deadline = time.monotonic() + 10
    while not throttled and time.monotonic() < deadline:
        producer.poll(0.1)  # throttle events are served from poll()
    assert throttled and throttled[0].throttle_time == pytest.approx(0.3)


def test_reset_between_tests_on_the_shared_broker(strom_broker):
    strom_broker.snapshot()
    strom_broker.create_topic("left-behind")
    strom_broker.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=None)
    done = strom_broker.reset()
    assert done["deleted_topics"] == ["left-behind"] and strom_broker.faults.rules() == []


# ----------------------------------------------------------------------------- aiokafka, async
def test_aiokafka_under_chaos_with_awaited_waits():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main() -> None:
        async with abroker() as b:
            b.create_topic("ai")
            flaky = b.faults.error_rate("Produce", "NOT_LEADER_OR_FOLLOWER", rate=0.5, seed=7, topic="ai")
            producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, enable_idempotence=True)
            await producer.start()
            try:
                for i in range(10):
                    await producer.send_and_wait("ai", b"a%d" % i)
            finally:
                await producer.stop()
            assert (await flaky.wait(1)).hits >= 1
            b.faults.duplicate(count=None, topic="ai")
            consumer = AIOKafkaConsumer(
                "ai", bootstrap_servers=b.bootstrap_servers, group_id="ai-g", auto_offset_reset="earliest"
            )
            await consumer.start()
            try:
                await b.wait_for_group("ai-g", members=1)
                got = [(await consumer.getone()).value for _ in range(10)]
                await consumer.commit()
                assert (await b.wait_for_lag("ai-g", "ai"))["lag"] == 0
                assert sorted(got) == sorted(b"a%d" % i for i in range(10))
                extra = await consumer.getmany(timeout_ms=300)  # the repeated records were skipped
                assert not any(extra.values())
            finally:
                await consumer.stop()

    asyncio.run(main())


# ----------------------------------------------------------------------------- the Java client
@pytest.mark.skipif(java_unavailable() is not None, reason=str(java_unavailable()))
def test_java_client_under_chaos_while_the_test_waits_on_the_broker(strom_broker, strom_topic):
    group = f"java-{strom_topic}"
    strom_broker.faults.error_rate("Produce", "NOT_LEADER_OR_FOLLOWER", rate=0.3, seed=5, topic=strom_topic)
    cut = strom_broker.faults.cut("Fetch", after_bytes=50, topic=strom_topic)  # first added, first to act
    doubled = strom_broker.faults.duplicate(count=None, topic=strom_topic)
    java = subprocess.Popen(
        [
            "java",
            "-Xshare:auto",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            f"{KAFKA_HOME}/libs/*",
            str(JAVA),
            strom_broker.bootstrap_servers,
            strom_topic,
            group,
            "40",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        strom_broker.wait_for_group(group, members=1, timeout=120)
        strom_broker.wait_for_lag(group, strom_topic, timeout=120)
        out, err = java.communicate("done\n", timeout=120)
    finally:
        if java.poll() is None:
            java.kill()
            java.wait()
    assert "produced=40 delivered=40 distinct=40" in out, out + err[-3000:]
    assert doubled.hits >= 1 and cut.hits == 1
    strom_broker.wait_for_group(group, state="Empty")

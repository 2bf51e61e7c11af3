"""strom.testing's waits, rule handles, reset and async use, with real clients (confluent-kafka,
aiokafka), as a user's test suite uses them: no sleeps, only waits."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import trio
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from strom.testing import ControlError, StromBroker, WaitTimeout, abroker, broker

QUIET = {"log_level": 0}


def _produce(bootstrap: str, topic: str, n: int, **conf) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **QUIET, **conf})
    for i in range(n):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(20) == 0


def _consumer(bootstrap: str, group: str, **conf) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
            **conf,
        }
    )


class Polling:
    """Consumers polled on a thread while the test waits: librdkafka (as the Java client) takes part
    in a rebalance only from inside poll(). What they receive is kept per consumer."""

    def __init__(self, *consumers: Consumer) -> None:
        self.consumers = list(consumers)
        self.received: dict[int, list[bytes]] = {id(c): [] for c in consumers}
        self._stop = threading.Event()
        self._lock = threading.Lock()  # a consumer is closed only between polls
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for c in list(self.consumers):
                with self._lock:
                    if c not in self.consumers:
                        continue
                    msg = c.poll(0.05)
                if msg is not None and not msg.error():
                    self.received[id(c)].append(msg.value())

    def add(self, consumer: Consumer) -> None:
        self.received[id(consumer)] = []
        self.consumers.append(consumer)

    def close(self, consumer: Consumer) -> None:
        with self._lock:
            self.consumers.remove(consumer)
            consumer.close()

    def __enter__(self) -> Polling:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for c in self.consumers:
            c.close()


def _poll(consumer: Consumer, n: int, timeout: float = 20.0) -> list[bytes]:
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and not msg.error():
            out.append(msg.value())
    return out


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_wait_for_group_members_and_lag_of_classic_and_consumer_groups(protocol):
    with broker(num_partitions=2, group_consumer_heartbeat_interval_ms=200) as b:
        b.create_topic("t")
        _produce(b.bootstrap_servers, "t", 10)
        b.wait_for_offset("t", 0, 1)  # some record reached partition 0 (the sticky partitioner may put all in one)
        conf = {"group.protocol": "consumer"} if protocol == "consumer" else {}
        conf.update({"enable.auto.commit": True, "auto.commit.interval.ms": 100})
        if protocol == "classic":  # a member learns of a rebalance at its next heartbeat
            conf.update({"heartbeat.interval.ms": 100, "session.timeout.ms": 6000})
        first, second = _consumer(b.bootstrap_servers, "g", **conf), _consumer(b.bootstrap_servers, "g", **conf)
        first.subscribe(["t"])
        with Polling(first) as polling:
            seen = b.wait_for_group("g", members=1, timeout=20)
            assert (seen["type"], seen["state"], seen["members"]) == (protocol, "Stable", 1)
            second.subscribe(["t"])
            polling.add(second)
            assert b.wait_for_group("g", members=2, timeout=20)["members"] == 2
            polling.close(second)
            assert b.wait_for_group("g", members=1, timeout=20)["members"] == 1
            lag = b.wait_for_lag("g", "t", timeout=20)  # all 10 consumed and auto-committed
            assert lag["lag"] == 0 and set(lag["partitions"]) == {"t-0", "t-1"}
        assert b.wait_for_group("g", state="Empty")["members"] == 0


def test_waits_time_out_with_what_they_saw_and_offset_and_connection_waits():
    with broker() as b:
        with pytest.raises(WaitTimeout, match=r"waited 0.1 s for group 'nobody' to be Stable; the group does not"):
            b.wait_for_group("nobody", timeout=0.1)
        with pytest.raises(
            ControlError, match="'Rebalancing': not a group state; Kafka's are Assigning, CompletingRebalance"
        ):
            b.wait_for_group("nobody", state="Rebalancing")
        b.create_topic("o")
        with pytest.raises(WaitTimeout, match=r"o-0 to reach high_watermark 3; seen: .*'high_watermark': 0"):
            b.wait_for_offset("o", 0, 3, timeout=0.1)
        with pytest.raises(WaitTimeout, match=r"lag of at most -1 on 'o'; last seen: lag 0"):
            b.wait_for_lag("nobody", "o", lag=-1, timeout=0.1)
        assert b.connections() == 0
        _produce(b.bootstrap_servers, "o", 3)
        assert b.wait_for_offset("o", 0, 3)["high_watermark"] == 3
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers, **QUIET})
        admin.list_topics(timeout=10)
        assert b.wait_for_connections(1)["connections"] >= 1
        del admin
        assert b.wait_for_connections(0, at_least=False)["connections"] == 0
        with pytest.raises(ControlError, match="timeout=9999"):
            b.wait_for_connections(1, timeout=9999)
        b.pause()
        with pytest.raises(ControlError, match="the broker is paused; resume it first"):
            b.wait_for_connections(1, timeout=0.1)
        b.resume()


def test_rule_handles_count_wait_and_remove():
    with broker() as b:
        b.create_topic("r")
        seen = b.faults.observe("Produce", topic="r")
        failing = b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=2, topic="r")
        assert failing["id"] == failing.id and failing.hits == 0  # still the dict it was
        _produce(b.bootstrap_servers, "r", 1)
        assert failing.wait(2).hits == 2 and seen.wait(3)["hits"] == 3  # two refused, the third appended
        with pytest.raises(WaitTimeout, match=r"was hit 2 times within 0.1 s, waited for 3.*no longer in force"):
            failing.wait(3, timeout=0.1)
        assert b.faults.rule(failing.id)["active"] is False
        assert seen.remove() and b.faults.rules() == []


def test_a_predicate_in_thread_mode_and_its_refusal_over_http():
    with broker(control_listener="127.0.0.1:0") as b:
        b.create_topic("keep")
        b.create_topic("lose")
        rule = b.faults.drop("Produce", count=None, predicate=lambda info: "lose" in info.topics)
        _produce(b.bootstrap_servers, "keep", 1)
        assert rule.hits == 0
        from strom.testing import ControlClient

        with pytest.raises(ControlError, match="works only with a broker in this process"):
            ControlClient(b.control_address)("fault", {"api": "Produce", "drop": "before", "predicate": print})


def test_reset_deletes_what_tests_made_and_keeps_the_snapshot():
    with broker() as b:
        b.create_topic("before")
        b.snapshot()
        b.create_topic("made")
        _produce(b.bootstrap_servers, "made", 2)
        consumer = _consumer(b.bootstrap_servers, "made-group")
        consumer.subscribe(["made"])
        b.wait_for_group("made-group", members=1)
        _poll(consumer, 2)
        consumer.commit(asynchronous=False)
        b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER", count=None)
        still = b.reset()
        assert still["deleted_topics"] == ["made"] and still["kept"] == {"made-group": "NON_EMPTY_GROUP"}
        consumer.close()
        started = time.perf_counter()
        done = b.reset()
        assert time.perf_counter() - started < 1.0
        assert done == {"deleted_topics": [], "deleted_groups": ["made-group"], "kept": {}}
        topics = [t for t in b.faults.status()["topics"] if not t.startswith("__")]
        assert b.faults.rules() == [] and topics == ["before"]


def test_strom_control_wait_from_the_command_line():
    from strom.tools.control_cli import control

    with broker(control_listener="127.0.0.1:0") as b:
        runner = CliRunner()
        to = ["--to", b.control_address]
        added = runner.invoke(control, [*to, "fault", "--api", "Metadata", "--observe", "--count", "0"])
        rule_id = json.loads(added.output)["id"]
        late = runner.invoke(control, [*to, "wait", "rule", str(rule_id), "--hits", "1", "--timeout", "0.1"])
        assert late.exit_code == 2 and "was hit 0 times" in late.output
        AdminClient({"bootstrap.servers": b.bootstrap_servers, **QUIET}).list_topics(timeout=10)
        done = runner.invoke(control, [*to, "wait", "rule", str(rule_id), "--hits", "1"])
        assert done.exit_code == 0 and json.loads(done.output)["hits"] >= 1
        group = runner.invoke(control, [*to, "wait", "group", "g", "--state", "any", "--timeout", "0.1"])
        assert group.exit_code == 2 and "does not exist" in group.output


def test_process_mode_waits_and_rules_through_the_control_endpoint():
    with broker(mode="process") as b:
        b.create_topic("p")
        rule = b.faults.error_rate("Produce", "NOT_LEADER_OR_FOLLOWER", rate=0.5, seed=1)
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0, **QUIET})
        for i in range(5):  # one produce request each
            producer.produce("p", b"%d" % i)
            assert producer.flush(20) == 0
        assert b.wait_for_offset("p", 0, 5)["high_watermark"] == 5
        assert rule.matched >= 5 and rule.hits == rule.matched - 5  # every refused produce was retried
        with pytest.raises(WaitTimeout):
            b.wait_for_group("g", timeout=0.1)


def test_abroker_from_asyncio_with_aiokafka():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main() -> None:
        async with abroker() as b:
            b.create_topic("a")
            rule = b.faults.error("Produce", "NOT_LEADER_OR_FOLLOWER")
            producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
            await producer.start()
            try:
                await producer.send_and_wait("a", b"x")
            finally:
                await producer.stop()
            assert (await rule.wait(1))["hits"] == 1
            consumer = AIOKafkaConsumer(
                "a", bootstrap_servers=b.bootstrap_servers, group_id="ag", auto_offset_reset="earliest"
            )
            await consumer.start()
            try:
                await b.wait_for_group("ag", members=1)
                assert (await consumer.getone()).value == b"x"
                await consumer.commit()
                assert (await b.wait_for_lag("ag", "a"))["lag"] == 0
            finally:
                await consumer.stop()

    asyncio.run(main())


async def test_abroker_from_trio():
    async with abroker() as b:
        b.create_topic("tr")
        rule = b.faults.observe("Produce")
        await trio.to_thread.run_sync(_produce, b.bootstrap_servers, "tr", 2)
        assert (await b.wait_for_offset("tr", 0, 2))["high_watermark"] == 2
        assert (await rule.wait(1)).hits >= 1


class TwoBrokers:
    """Two standalone brokers behind the cluster control endpoint (the endpoint's plumbing; the
    in-process cluster's own actions are tested with it, see strom.testing.cluster_actions)."""

    def __init__(self) -> None:
        self.brokers = [StromBroker().start(), StromBroker().start()]

    def broker(self, broker_id: int):
        return self.brokers[broker_id]

    def operation(self, name: str, args: dict) -> dict:
        if name == "stop":
            self.brokers[int(args["broker"])].stop()
            return {"ok": True}
        if name == "status":
            return {"running": [b.running for b in self.brokers]}
        if name == "slow":
            raise AssertionError("waited 0.1 s for a leader; saw none")
        raise ValueError(f"unknown cluster operation {name!r}")

    def close(self) -> None:
        for b in self.brokers:
            b.close()


def test_cluster_control_endpoint_serves_cluster_actions_and_broker_operations():
    from strom.testing.cluster_control import ClusterControl
    from strom.tools.control_cli import control

    cluster = TwoBrokers()
    try:
        with ClusterControl(cluster) as endpoint:
            runner = CliRunner()
            to = ["--to", endpoint.address]
            b1 = cluster.broker(1)
            b1.create_topic("c")
            _produce(b1.bootstrap_servers, "c", 2)
            waited = runner.invoke(control, [*to, "broker", "1", "wait_offset", "topic=c", "partition=0", "offset=2"])
            assert waited.exit_code == 0 and json.loads(waited.output)["high_watermark"] == 2, waited.output
            late = runner.invoke(control, [*to, "broker", "0", "wait_group", "group_id=g", "timeout=0.1"])
            assert late.exit_code == 2 and "does not exist" in late.output
            slow = runner.invoke(control, [*to, "cluster", "slow"])
            assert slow.exit_code == 2 and "saw none" in slow.output
            unknown = runner.invoke(control, [*to, "cluster", "nope"])
            assert unknown.exit_code == 1 and "unknown cluster operation" in unknown.output
            stopped = runner.invoke(control, [*to, "cluster", "stop", "broker=0"])
            assert stopped.exit_code == 0 and not cluster.broker(0).running
            status = runner.invoke(control, [*to, "cluster", "status"])
            assert json.loads(status.output) == {"running": [False, True]}
            with pytest.raises(ValueError, match="loopback only"):
                ClusterControl(cluster, host="0.0.0.0")
    finally:
        cluster.close()


def test_a_closed_broker_is_freed_after_its_faults_and_waits_were_used():
    import gc
    import weakref

    b = StromBroker().start()
    b.faults.observe("Produce")
    b.wait_for_connections(0, at_least=False)
    server = weakref.ref(b._broker)
    b.close()
    gc.collect()
    assert server() is None  # the registries of injectors and watchers hold their brokers weakly


def test_seed_zero_and_cut_bytes_zero_are_kept():
    with broker() as b:
        rule = b.faults.error_rate("Produce", "NOT_LEADER_OR_FOLLOWER", rate=0.5, seed=0)
        assert rule["seed"] == 0
        assert b.faults.cut("Metadata", after_bytes=0)["cut_bytes"] == 0  # the answer's first 0 bytes: none

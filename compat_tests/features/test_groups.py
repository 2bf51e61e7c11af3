"""Consumer groups with real clients: confluent-kafka (range, cooperative-sticky, static members,
kills), kafka-python, aiokafka, kafkajs and kcat -G, and committed offsets across a restart."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.paths import KAFKAJS_DIR, REPO_ROOT

GROUP_BROKER = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}
WAIT_S = 60.0


@pytest.fixture
def gbroker(make_broker):
    return make_broker(GROUP_BROKER)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 5000})
    for i in range(start, start + count):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % partitions)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def wait_until(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Worker:
    """One group member process (compat_tests/support/group_worker.py) and what it printed."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        strategy: str = "range",
        instance: str | None = None,
    ):
        self.out_path = tmp / f"{name}.out"
        self.stop_file = tmp / f"{name}.stop"
        self.args = [bootstrap, group, topic, strategy, instance or "-", str(self.stop_file)]
        self.out = open(self.out_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "compat_tests.support.group_worker", *self.args],
            cwd=REPO_ROOT,
            stdout=self.out,
            stderr=subprocess.DEVNULL,
        )

    def lines(self) -> list[str]:
        return self.out_path.read_text().splitlines()

    def records(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for _, p, o in (line.split() for line in self.lines() if line.startswith("M "))]

    def assignment(self) -> set[int]:
        current: set[int] = set()
        for line in self.lines():
            kind, _, parts = line.partition(" ")
            if kind not in ("A", "R"):
                continue
            parts_set = {int(p) for p in parts.split(",") if p}
            if kind == "A":
                current |= parts_set
            elif kind == "R":
                current -= parts_set
        return current

    def events(self, kind: str) -> list[set[int]]:
        return [{int(p) for p in line[2:].split(",") if p} for line in self.lines() if line.startswith(kind + " ")]

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.out.close()


@pytest.fixture
def workers(tmp_path):
    started: list[Worker] = []

    def start(*args, **kw) -> Worker:
        w = Worker(tmp_path, f"w{len(started)}", *args, **kw)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.stop()


def covered(workers_, partitions: int) -> bool:
    sets = [w.assignment() for w in workers_]
    return sorted(p for s in sets for p in s) == list(range(partitions)) and all(sets)


def all_offsets(counts: dict[int, int]) -> set[tuple[int, int]]:
    return {(p, o) for p, n in counts.items() for o in range(n)}


def test_confluent_group_consumes_each_record_once_and_survives_join_and_kill(gbroker, workers):
    bootstrap, topic = gbroker.bootstrap, "g6"
    create_topic(bootstrap, topic, 6)
    members = [workers(bootstrap, "grp", topic) for _ in range(3)]
    wait_until(lambda: covered(members, 6) and all(len(w.assignment()) == 2 for w in members), "3 stable members")
    produce(bootstrap, topic, 60_000, 6)
    expected = all_offsets({p: 10_000 for p in range(6)})
    wait_until(lambda: sum(len(w.records()) for w in members) >= 60_000, "60,000 records", 120)
    time.sleep(1)
    seen = Counter(r for w in members for r in w.records())
    assert set(seen) == expected
    assert max(seen.values()) == 1, "a record was consumed twice"

    fourth = workers(bootstrap, "grp", topic)
    wait_until(lambda: covered(members + [fourth], 6), "the fourth member to get partitions")
    members[0].kill()
    survivors = members[1:] + [fourth]
    produce(bootstrap, topic, 12_000, 6, start=60_000)
    wait_until(lambda: covered(survivors, 6), "the killed member's partitions to move")
    expected = all_offsets({p: 12_000 for p in range(6)})
    wait_until(lambda: {r for w in members + [fourth] for r in w.records()} >= expected, "nothing skipped", 120)


def test_two_groups_on_one_topic_each_get_every_record(gbroker, workers):
    bootstrap, topic = gbroker.bootstrap, "two"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3000, 3)
    a, b = workers(bootstrap, "ga", topic), workers(bootstrap, "gb", topic)
    expected = all_offsets({p: 1000 for p in range(3)})
    wait_until(lambda: set(a.records()) >= expected and set(b.records()) >= expected, "both groups")


def test_cooperative_sticky_moves_only_some_partitions(gbroker, workers):
    bootstrap, topic = gbroker.bootstrap, "coop"
    create_topic(bootstrap, topic, 6)
    first = workers(bootstrap, "coop", topic, "cooperative-sticky")
    wait_until(lambda: first.assignment() == set(range(6)), "the first member to own everything")
    second = workers(bootstrap, "coop", topic, "cooperative-sticky")
    wait_until(lambda: covered([first, second], 6) and len(second.assignment()) == 3, "a cooperative rebalance")
    assert all(len(r) < 6 for r in first.events("R")), "cooperative rebalancing revoked everything"
    produce(bootstrap, topic, 600, 6)
    wait_until(
        lambda: {r for w in (first, second) for r in w.records()} >= all_offsets({p: 100 for p in range(6)}),
        "every record",
    )


def test_static_member_restarts_without_a_rebalance(gbroker, workers):
    bootstrap, topic = gbroker.bootstrap, "static"
    create_topic(bootstrap, topic, 4)
    a = workers(bootstrap, "st", topic, "range", "member-a")
    b = workers(bootstrap, "st", topic, "range", "member-b")
    wait_until(lambda: covered([a, b], 4) and len(a.assignment()) == 2, "two static members")
    time.sleep(2)  # let any trailing rebalance settle
    assigned_before, revoked_before = len(b.events("A")), len(b.events("R"))
    a.kill()
    a2 = workers(bootstrap, "st", topic, "range", "member-a")
    wait_until(lambda: len(a2.assignment()) == 2, "the restarted static member's partitions")
    produce(bootstrap, topic, 400, 4)
    wait_until(
        lambda: {r for w in (a2, b) for r in w.records()} >= all_offsets({p: 100 for p in range(4)}), "every record"
    )
    assert (len(b.events("A")), len(b.events("R"))) == (assigned_before, revoked_before), (
        "the other member was rebalanced"
    )


def _confluent_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )


def test_commit_restart_resume_with_metadata(gbroker):
    bootstrap, topic = gbroker.bootstrap, "resume"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 200, 2)
    consumer = _confluent_consumer(bootstrap, "resumers")
    consumer.subscribe([topic])
    got: list = []
    while len(got) < 100:
        got += [m for m in consumer.consume(100 - len(got), 1) if not m.error()]
    last = {}
    for m in got:
        last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
    commits = [TopicPartition(topic, p, o + 1, metadata=f"meta-{p}") for p, o in last.items()]
    consumer.commit(offsets=commits, asynchronous=False)
    consumer.close()
    gbroker.restart()
    again = _confluent_consumer(bootstrap, "resumers")
    committed = again.committed([TopicPartition(topic, p) for p in last], timeout=30)
    assert {(tp.partition, tp.offset, tp.metadata) for tp in committed} == {
        (p, o + 1, f"meta-{p}") for p, o in last.items()
    }
    again.subscribe([topic])
    rest: list = []
    deadline = time.monotonic() + WAIT_S
    while len(rest) < 200 - len(got) and time.monotonic() < deadline:
        rest += [m for m in again.consume(200, 1) if not m.error()]
    again.close()
    assert all(m.offset() > last[m.partition()] for m in rest if m.partition() in last)
    assert len(rest) == 200 - len(got)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = _confluent_consumer(bootstrap, group)
    try:
        return {
            tp.partition: tp.offset
            for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        }
    finally:
        c.close()


def test_kafka_python_group(gbroker):
    from kafka import KafkaConsumer

    bootstrap, topic = gbroker.bootstrap, "kp"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 300, 3)
    consumers = [
        KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id="kpg",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        for _ in range(2)
    ]
    seen = set()
    deadline = time.monotonic() + WAIT_S
    while len(seen) < 300 and time.monotonic() < deadline:
        for c in consumers:
            for tp, msgs in c.poll(timeout_ms=200).items():
                seen |= {(tp.partition, m.offset) for m in msgs}
                c.commit()
    assignments = [c.assignment() for c in consumers]
    for c in consumers:
        c.close()
    assert seen == all_offsets({p: 100 for p in range(3)})
    assert committed_offsets(bootstrap, "kpg", topic, 3) == {0: 100, 1: 100, 2: 100}
    assert all(assignments) or len(set().union(*assignments)) == 3


def test_aiokafka_group(gbroker):
    from aiokafka import AIOKafkaConsumer

    bootstrap, topic = gbroker.bootstrap, "aio"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 300, 3)

    async def run() -> set:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id="aiog",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        await consumer.start()
        seen = set()
        try:

            async def loop():
                while len(seen) < 300:
                    for tp, msgs in (await consumer.getmany(timeout_ms=200)).items():
                        seen.update((tp.partition, m.offset) for m in msgs)
                    await consumer.commit()

            await asyncio.wait_for(loop(), WAIT_S)
        finally:
            await consumer.stop()
        return seen

    assert asyncio.run(run()) == all_offsets({p: 100 for p in range(3)})
    assert committed_offsets(bootstrap, "aiog", topic, 3) == {0: 100, 1: 100, 2: 100}


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer(gbroker):
    bootstrap, topic = gbroker.bootstrap, "kc"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 300, 3)
    proc = subprocess.run(
        [
            "kcat",
            "-b",
            bootstrap,
            "-G",
            "kcatg",
            "-o",
            "beginning",
            "-c",
            "300",
            "-f",
            "%p %o\n",
            "-X",
            "session.timeout.ms=6000",
            "-X",
            "auto.commit.interval.ms=100",
            topic,
        ],
        capture_output=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    seen = {tuple(map(int, line.split())) for line in proc.stdout.decode().splitlines() if line.strip()}
    assert seen == all_offsets({p: 100 for p in range(3)})
    assert sum(committed_offsets(bootstrap, "kcatg", topic, 3).values()) > 0


@pytest.mark.skipif(
    shutil.which("node") is None or not (KAFKAJS_DIR / "node_modules" / "kafkajs").is_dir(),
    reason="node or kafkajs is not installed",
)
def test_kafkajs_group(gbroker):
    bootstrap, topic = gbroker.bootstrap, "kjs"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 300, 3)
    proc = subprocess.run(
        ["node", str(KAFKAJS_DIR / "group.js"), bootstrap, "kjsg", topic, "300"],
        capture_output=True,
        timeout=WAIT_S * 2,
        cwd=KAFKAJS_DIR,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    seen = {tuple(map(int, line.split())) for line in proc.stdout.decode().splitlines() if line.strip()}
    assert seen == all_offsets({p: 100 for p in range(3)})
    assert committed_offsets(bootstrap, "kjsg", topic, 3) == {0: 100, 1: 100, 2: 100}


def test_describe_groups_shows_members_with_their_client_and_host(gbroker):
    bootstrap, topic = gbroker.bootstrap, "described"
    create_topic(bootstrap, topic, 2)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "describers", "client.id": "who-am-i", "session.timeout.ms": 6000}
    )
    consumer.subscribe([topic])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        deadline = time.monotonic() + WAIT_S
        description = None
        while time.monotonic() < deadline:
            consumer.poll(0.2)
            description = admin.describe_consumer_groups(["describers"])["describers"].result(10)
            if description.members and str(description.state).endswith("STABLE"):
                break
        assert description is not None and len(description.members) == 1
        member = description.members[0]
        assert member.client_id == "who-am-i"
        assert member.host == "/127.0.0.1"
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
    finally:
        consumer.close()


def test_deleting_subscribed_topics_revokes_their_partitions_and_the_member_closes(make_broker):
    """librdkafka's 0045 topic-removal scenario with a current client: delete one of two subscribed
    topics, then the other; each deletion revokes, the survivor is reassigned, and close returns."""
    import threading

    broker = make_broker({**GROUP_BROKER, "auto.create.topics.enable": "false"})
    bootstrap = broker.bootstrap
    for name, partitions in (("removed-f", 5), ("removed-g", 9)):
        create_topic(bootstrap, name, partitions)
    events: list[tuple[str, set]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "topic-removal",
            "topic.metadata.refresh.interval.ms": 1000,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(
        ["removed-f", "removed-g"],
        on_assign=lambda c, ps: events.append(("assign", {(p.topic, p.partition) for p in ps})),
        on_revoke=lambda c, ps: events.append(("revoke", {(p.topic, p.partition) for p in ps})),
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def poll_until(predicate, what):
        deadline = time.monotonic() + WAIT_S
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {events}"
            consumer.poll(0.1)

    both = {("removed-f", p) for p in range(5)} | {("removed-g", p) for p in range(9)}
    poll_until(lambda: ("assign", both) in events, "both topics assigned")
    admin.delete_topics(["removed-f"])["removed-f"].result(30)
    only_g = {("removed-g", p) for p in range(9)}
    poll_until(lambda: events[-1] == ("assign", only_g), "the remaining topic reassigned")
    admin.delete_topics(["removed-g"])["removed-g"].result(30)
    poll_until(lambda: events[-1][0] == "revoke", "the last topic revoked")
    settled = len(events)
    deadline = time.monotonic() + 5  # nothing left to assign: no further rebalance
    while time.monotonic() < deadline:
        consumer.poll(0.1)
    assert len(events) == settled, events[settled:]
    closer = threading.Thread(target=consumer.close, daemon=True)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "consumer.close() did not return"

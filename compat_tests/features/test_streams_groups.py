"""Kafka Streams 4.3 with the streams rebalance protocol (KIP-1071, `group.protocol=streams`)
against Strom: a word count (`java/StreamsGroupWordCount.java`, in-memory stores) in two
instances, at least once and exactly once. Strom configures the topology, creates its
repartition and changelog topics, spreads the tasks over both instances; records go in, counts
come out; one instance stops, its tasks move to the other, and the counts stay complete.
StreamsGroupDescribe and ListGroups show the group.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.jvm import JVM_FLAGS
from compat_tests.support.paths import SHARED_JVM
from compat_tests.support.wire import Raw
from strom.protocol.schema import ApiKey

PROGRAM = Path(__file__).parent / "java" / "StreamsGroupWordCount.java"
STREAMS_JAR = SHARED_JVM / "kafka-4.3.1" / "libs" / "kafka-streams-4.3.1.jar"
CLIENT_JAR = SHARED_JVM / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"
THIRD_PARTY = SHARED_JVM / "kafka-4.0.0" / "libs"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
PARTITIONS = 4
ALL_TASKS = {f"{sub}_{p}" for sub in (0, 1) for p in range(PARTITIONS)}
TIMEOUT_S = 150


def _missing() -> str | None:
    import shutil

    if shutil.which("java") is None:
        return "no java on PATH (Debian: openjdk-17-jre-headless)"
    for jar in (STREAMS_JAR, CLIENT_JAR):
        if not jar.exists():
            return f"{jar} not found (../shared/jvm, see its README)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def _classpath() -> str:
    """Kafka Streams 4.3.1 and the 4.3.1 client first, then 4.0.0's third-party jars (its README)."""
    skip = ("kafka-clients-", "kafka-streams-")
    rest = sorted(str(j) for j in THIRD_PARTY.glob("*.jar") if not j.name.startswith(skip))
    return ":".join([str(STREAMS_JAR), str(CLIENT_JAR), *rest])


class Instance:
    """One Kafka Streams instance (a child JVM): its printed lines, read as they come."""

    def __init__(self, bootstrap: str, app: str, state_dir: Path, guarantee: str) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [
                "java",
                *JVM_FLAGS,
                "-cp",
                _classpath(),
                str(PROGRAM),
                bootstrap,
                app,
                "wc-in",
                "wc-out",
                str(state_dir),
                guarantee,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def tasks(self) -> set[str]:
        """The active tasks it printed last."""
        last = [line for line in self.lines if line.startswith("tasks=")]
        active = last[-1][len("tasks=") :].split("|")[0] if last else ""
        return set(active.split(",")) - {""}

    def wait_for(self, what: Callable[[], bool], why: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        with self._changed:
            while not what():
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not what()):
                    tail = "\n".join(self.lines[-30:])
                    raise AssertionError(f"{why}: not seen; the instance printed:\n{tail}")
                self._changed.wait(min(left, 1.0))

    def stop(self) -> None:
        """Close it gracefully (it commits), then wait for the JVM to end."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(params=["at_least_once", "exactly_once_v2"])
def guarantee(request: pytest.FixtureRequest) -> str:
    """processing.guarantee: offsets by OffsetCommit, or by TxnOffsetCommit in transactions."""
    return str(request.param)


@pytest.fixture
def instances(broker, tmp_path: Path, guarantee: str) -> Iterator[Callable[[str], Instance]]:
    started: list[Instance] = []

    def start(app: str) -> Instance:
        instance = Instance(broker.bootstrap, app, tmp_path / f"state-{len(started)}", guarantee)
        started.append(instance)
        return instance

    try:
        yield start
    finally:
        for instance in started:
            instance.stop()


def _produce(bootstrap: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, line in enumerate(lines):
        producer.produce("wc-in", key=str(i), value=line)
    assert producer.flush(30) == 0


class Counts:
    """The word counts the application wrote to wc-out: the last count per word."""

    def __init__(self, bootstrap: str) -> None:
        self.latest: dict[str, int] = {}
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"verify-{uuid.uuid4()}",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        self.consumer.subscribe(["wc-out"])

    def wait_for(self, expected: dict[str, int]) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while self.latest != expected and time.monotonic() < deadline:
            for msg in self.consumer.consume(100, timeout=0.5):
                if msg.error() is None:
                    self.latest[msg.key().decode()] = int.from_bytes(msg.value(), "big", signed=True)
        assert self.latest == expected

    def close(self) -> None:
        self.consumer.close()


def _describe(port: int, group: str) -> dict:
    with Raw(port) as raw:
        answer = raw.request(
            ApiKey.STREAMS_GROUP_DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False}
        )
    return answer.groups[0]


def test_word_count_in_two_instances_survives_one_stopping(broker, instances):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("wc-in", PARTITIONS, 1), NewTopic("wc-out", 1, 1)]).values():
        future.result(30)
    expected: dict[str, int] = {}

    def lines(start: int, count: int) -> list[str]:
        out = []
        for i in range(start, start + count):
            line = " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 2, 5))
            for word in line.split():
                expected[word] = expected.get(word, 0) + 1
            out.append(line)
        return out

    first = instances("wordcount")
    second = instances("wordcount")
    # both run, the 8 tasks (2 subtopologies x 4 partitions) split between them
    for instance in (first, second):
        instance.wait_for(lambda i=instance: "state=RUNNING" in i.lines and i.tasks(), "RUNNING with tasks")
    first.wait_for(lambda: first.tasks() | second.tasks() == ALL_TASKS and not first.tasks() & second.tasks(), "split")
    assert len(first.tasks()) == len(second.tasks()) == 4

    # Strom created the repartition and changelog topics with the source topic's partition count
    described = _describe(broker.port, "wordcount")
    assert described.error_code == 0 and described.group_state == "Stable"
    internal = {
        t.name: t.partitions
        for s in described.topology.subtopologies
        for t in [*s.state_changelog_topics, *s.repartition_source_topics]
    }
    assert internal == {"wordcount-counts-changelog": PARTITIONS, "wordcount-counts-repartition": PARTITIONS}
    topics = admin.list_topics(timeout=30).topics
    assert {name: len(topics[name].partitions) for name in internal} == internal
    assert len(described.members) == 2

    counts = Counts(broker.bootstrap)
    try:
        _produce(broker.bootstrap, lines(0, 60))
        counts.wait_for(expected)

        # one instance stops: every task moves to the other, and counting goes on from its state
        second.stop()
        first.wait_for(lambda: first.tasks() == ALL_TASKS, "all tasks on the remaining instance")
        _produce(broker.bootstrap, lines(60, 40))
        counts.wait_for(expected)
    finally:
        counts.close()
    described = _describe(broker.port, "wordcount")
    assert (described.group_state, len(described.members)) == ("Stable", 1)
    with Raw(broker.port) as raw:
        listed = raw.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["streams"]})
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [("wordcount", "streams", "Stable")]

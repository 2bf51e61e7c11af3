"""What the 3-broker ZooKeeper cluster tests share: the module's ZooKeeper, three Strom brokers in a
chroot of it, waiting for a condition, topic and partition helpers, and a background idempotent
acks=all producer whose acknowledged records are read back afterwards.

A test module takes a cluster with its own settings (the ``zookeeper`` fixture it runs on is in
compat_tests/conftest.py):

    from compat_tests.support.cluster import cluster_fixture
    cluster = cluster_fixture(**{"transaction.state.log.replication.factor": "3"})
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.tools.broker_process import BrokerProcess

T = TypeVar("T")

SESSION_TIMEOUT_MS = 4000
# Every cluster test's brokers: fast failure detection, replicated internal topics, rf=3 by default.
BASE_CONFIGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "replica.lag.time.max.ms": "5000",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "group.initial.rebalance.delay.ms": "0",
}


@contextmanager
def running_cluster(
    zookeeper,
    base: Path,
    chroot: str,
    configs: dict[str, str] | None = None,
    broker_class: type[BrokerProcess] = BrokerProcess,
    size: int = 3,
    node_configs: Callable[[int], dict[str, str]] | None = None,
) -> Iterator[list[BrokerProcess]]:
    """``size`` brokers (node ids 0..size-1) registered in ``zookeeper`` under ``chroot``, each with
    BASE_CONFIGS, ``configs`` and ``node_configs(node)`` (later ones win); every one started is
    stopped on the way out."""
    brokers: list[BrokerProcess] = []
    try:
        for node in range(size):
            brokers.append(
                broker_class(
                    base / f"b{node}",
                    {
                        **BASE_CONFIGS,
                        **(configs or {}),
                        **(node_configs(node) if node_configs else {}),
                        "node.id": str(node),
                        "zookeeper.connect": zookeeper.connect_string + chroot,
                    },
                ).start()
            )
        yield brokers
    finally:
        for b in brokers:
            b.stop()


def cluster_fixture(chroot_prefix: str = "/strom-", **configs: str):
    """A function-scoped pytest fixture: three brokers with these configs, in a chroot named after the test."""

    @pytest.fixture
    def cluster(zookeeper, tmp_path, request):
        name = request.node.name.replace("[", "-").replace("]", "")
        with running_cluster(zookeeper, tmp_path, chroot_prefix + name, configs) as brokers:
            yield brokers

    return cluster


def bootstrap(brokers: Sequence[BrokerProcess]) -> str:
    """The running brokers' addresses."""
    return ",".join(b.bootstrap for b in brokers if b.running)


def admin(brokers: Sequence[BrokerProcess]) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(brokers)})


def wait(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.1) -> T:
    """The predicate's first truthy value, asked every ``interval_s``; AssertionError after ``timeout_s``.
    A LookupError counts as not yet: a broker that has not yet heard of a new topic answers Metadata
    without its partitions (``partition_meta``'s KeyError)."""
    deadline = time.monotonic() + timeout_s
    last: LookupError | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except LookupError as exc:
            last = exc
        else:
            if value:
                return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}") from last


def partition_meta(brokers: Sequence[BrokerProcess], topic: str, partition: int = 0, listed_within_s: float = 10):
    """The partition's metadata from any of ``brokers``, asked again for up to ``listed_within_s``
    while that broker does not list it yet (a broker lists a partition once the controller wrote
    its state, as Kafka's ZooKeeper-mode brokers: a topic just created on one broker may be unknown
    to another for a moment); then KeyError."""
    deadline = time.monotonic() + listed_within_s
    while True:
        topics = admin(brokers).list_topics(topic, timeout=10).topics
        listed = topics.get(topic)
        if listed is not None and partition in listed.partitions:
            return listed.partitions[partition]
        if time.monotonic() >= deadline:
            raise KeyError(f"{topic}-{partition} is not listed")
        time.sleep(0.1)


def create(
    brokers: Sequence[BrokerProcess], name: str, partitions: int, rf: int = 3, configs: dict | None = None
) -> None:
    client = admin(brokers)  # kept alive until its futures complete
    futures = client.create_topics([NewTopic(name, partitions, rf, config=configs or {})])
    for future in futures.values():
        future.result(timeout=30)


def wait_full_isr(brokers: Sequence[BrokerProcess], topic: str, partitions: int = 1, timeout_s: float = 20) -> None:
    everyone = sorted(range(len(brokers)))
    wait(
        lambda: all(sorted(partition_meta(brokers, topic, p).isrs) == everyone for p in range(partitions)),
        timeout_s,
        f"full ISRs of {topic}",
    )


class AckedProducer:
    """A thread producing numbered values (b"%08d") to ``topic`` round robin over its partitions with
    acks=all and idempotence, as fast as the cluster takes them, and keeping every acknowledged value.

        with AckedProducer(bootstrap(cluster), "t") as producer:
            producer.wait_acked(3000, 30, "records before the kill")
            ...                       # kill, move, fail things
        values = read_back(...)       # the producer is stopped and flushed here
        producer.check(values)
    """

    def __init__(self, servers: str, topic: str, partitions: int = 1, **config: Any) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer(
            {
                "bootstrap.servers": servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                # one request in flight per broker: librdkafka bumps its epoch when a request behind a
                # failed one answers OUT_OF_ORDER_SEQUENCE_NUMBER (normal), and re-sends under the
                # new epoch a batch a leader answered NOT_LEADER_OR_FOLLOWER although it had been
                # replicated: a duplicate no broker can refuse (librdkafka's issue 4953, seen in a
                # reassignment). These producers check brokers, not that client defect.
                "max.in.flight.requests.per.connection": 1,
                **config,
            }
        )
        self._acked: list[bytes] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"acked-producer-{topic}", daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is None:
            with self._lock:
                self._acked.append(msg.value())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(
                    self.topic, b"%08d" % i, partition=i % self.partitions, on_delivery=self._delivered
                )
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.001 if i % 100 else 0.01)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._acked)

    @property
    def acked(self) -> list[bytes]:
        with self._lock:
            return list(self._acked)

    def wait_acked(self, more: int, timeout_s: float, what: str) -> None:
        """Until ``more`` records beyond those acknowledged so far are acknowledged."""
        start = self.count
        wait(lambda: self.count > start + more, timeout_s, what)

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop producing, then wait until everything sent is acknowledged or failed."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(30)
        assert self.producer.flush(60) == 0, "records left unacknowledged after 60 s"

    def __enter__(self) -> AckedProducer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.stop()
        else:
            self._stop.set()
            self._thread.join(30)

    def check(self, values: list[bytes], ordered: bool = True) -> None:
        """``values`` read back hold every acknowledged value once (and, for one partition, in order)."""
        assert len(values) == len(set(values)), "a record was consumed twice"
        if ordered:
            assert values == sorted(values), "records out of order"
        missing = set(self.acked) - set(values)
        assert not missing, f"{len(missing)} acknowledged records lost"


def read_back(
    servers: str, topic: str, partitions: int, expected: int, timeout_s: float = 60, group: str = "check"
) -> list[bytes]:
    """The values of ``topic`` from offset 0 of each partition, until ``expected`` arrived or the time is up."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while len(values) < expected and time.monotonic() < deadline:
            values.extend(m.value() for m in consumer.consume(10000, 1) if not m.error())
    finally:
        consumer.close()
    return values

"""Kafka Connect (distributed mode) and MirrorMaker 2 from Kafka 4.0 against Strom.

Connect: one distributed worker (its config, offset and status topics are compacted topics on
Strom, its workers form a group of protocol type "connect") runs the FileStream source and sink:
lines written to a file arrive, through a topic, in another file. MirrorMaker 2: copies a topic
from one Strom broker to another and translates a consumer group's committed offset to the copy.
Each is one JVM (`connect-distributed.sh` / `connect-mirror-maker.sh` main classes).

Skipped without java or Kafka's jars unless STROM_COMPAT_REQUIRE_ALL=1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.differential.harness import Target
from compat_tests.support.jvm import KAFKA_HOME, java_unavailable, skip_unless_available
from strom.protocol.schema import ApiKey
from strom.tools.broker_process import BrokerProcess

JAVA_FLAGS = [
    "-Xshare:auto",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xmx384m",
    f"-Dlog4j2.configurationFile={KAFKA_HOME / 'config' / 'connect-log4j2.yaml'}",
]
OVERRIDES = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
}

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def jvm_ok() -> None:
    skip_unless_available(java_unavailable(needs="libs/connect-runtime-4.0.0.jar"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(
    what: str,
    timeout: float,
    check: Callable[[], object],
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception:
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


class Jvm:
    """A Kafka JVM main class in the background, stopped by its pid."""

    def __init__(self, main: str, args: list[str], log: Path) -> None:
        self.log = log
        self.out = log.open("w")
        # connect-log4j2.yaml also writes connect.log files into kafka.logs.dir: keep them in the test's dir
        self.proc = subprocess.Popen(
            ["java", *JAVA_FLAGS, f"-Dkafka.logs.dir={log.parent}", "-cp", f"{KAFKA_HOME}/libs/*", main, *args],
            cwd=log.parent,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.out.close()


def rest(port: int, path: str, body: dict | None = None) -> object:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "broker", OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def test_connect_distributed_runs_the_file_stream_connectors_on_strom(jvm_ok, broker, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    port = free_port()
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("")
    props = tmp_path / "worker.properties"
    props.write_text(
        "\n".join(
            [
                f"bootstrap.servers={broker.bootstrap}",
                "group.id=strom-connect",
                "key.converter=org.apache.kafka.connect.storage.StringConverter",
                "value.converter=org.apache.kafka.connect.storage.StringConverter",
                "config.storage.topic=connect-configs",
                "offset.storage.topic=connect-offsets",
                "status.storage.topic=connect-status",
                "config.storage.replication.factor=1",
                "offset.storage.replication.factor=1",
                "status.storage.replication.factor=1",
                "offset.flush.interval.ms=500",
                f"listeners=http://127.0.0.1:{port}",
                # the FileStream connectors are on the class path (libs/connect-file-*.jar): no plugin.path scan
            ]
        )
        + "\n"
    )
    worker = Jvm("org.apache.kafka.connect.cli.ConnectDistributed", [str(props)], tmp_path / "connect.log")
    try:
        wait_for("the Connect REST API", 120, lambda: rest(port, "/connectors") == [], worker.proc, worker.log)
        rest(
            port,
            "/connectors",
            {
                "name": "file-source",
                "config": {
                    "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "tasks.max": "1",
                    "file": str(source),
                    "topic": "connect-lines",
                },
            },
        )
        rest(
            port,
            "/connectors",
            {
                "name": "file-sink",
                "config": {
                    "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                    "tasks.max": "1",
                    "file": str(sink),
                    "topics": "connect-lines",
                },
            },
        )
        lines = [f"line {i}" for i in range(50)]
        source.write_text("\n".join(lines) + "\n")
        wait_for(
            "the sink file",
            120,
            lambda: sink.exists() and sink.read_text().splitlines() == lines,
            worker.proc,
            worker.log,
        )
        for name in ("file-source", "file-sink"):
            status = rest(port, f"/connectors/{name}/status")
            assert status["connector"]["state"] == "RUNNING" and status["tasks"][0]["state"] == "RUNNING", status
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resources = [ConfigResource("topic", t) for t in ("connect-configs", "connect-offsets", "connect-status")]
        for resource, future in admin.describe_configs(resources).items():
            assert future.result(30)["cleanup.policy"].value == "compact", resource
        # the workers' group has protocol type "connect" (consumer-group tools do not list it): ask raw
        target = Target("strom", "127.0.0.1", broker.port)
        try:
            listed = target.call(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
            groups = {g.group_id: (g.protocol_type, g.group_state) for g in listed.groups}
            assert groups.get("strom-connect") == ("connect", "Stable"), groups
            described = target.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["strom-connect"]}).groups[0]
            assert described.protocol_type == "connect" and len(described.members) == 1, described
        finally:
            target.close()
    finally:
        worker.stop()


def test_mirror_maker_2_copies_a_topic_and_translates_a_groups_offsets(jvm_ok, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    a = BrokerProcess(tmp_path / "a", OVERRIDES).start()
    b = BrokerProcess(tmp_path / "b", OVERRIDES).start()
    mm2 = None
    try:
        producer = Producer({"bootstrap.servers": a.bootstrap})
        for i in range(100):
            producer.produce("mm-topic", key=b"k%d" % i, value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": a.bootstrap,
                "group.id": "mm-group",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition("mm-topic", 0, 0)])
        read = 0
        deadline = time.monotonic() + 30
        while read < 60 and time.monotonic() < deadline:
            read += len(consumer.consume(60 - read, timeout=1))
        consumer.commit(offsets=[TopicPartition("mm-topic", 0, 60)], asynchronous=False)
        consumer.close()

        props = tmp_path / "mm2.properties"
        props.write_text(
            "\n".join(
                [
                    "clusters=A,B",
                    f"A.bootstrap.servers={a.bootstrap}",
                    f"B.bootstrap.servers={b.bootstrap}",
                    "A->B.enabled=true",
                    "A->B.topics=mm-topic",
                    "A->B.groups=mm-group",
                    "B->A.enabled=false",
                    "replication.factor=1",
                    "checkpoints.topic.replication.factor=1",
                    "heartbeats.topic.replication.factor=1",
                    "offset-syncs.topic.replication.factor=1",
                    "offset.storage.replication.factor=1",
                    "status.storage.replication.factor=1",
                    "config.storage.replication.factor=1",
                    "sync.group.offsets.enabled=true",
                    "sync.group.offsets.interval.seconds=1",
                    "emit.checkpoints.interval.seconds=1",
                    "refresh.topics.interval.seconds=1",
                    "refresh.groups.interval.seconds=1",
                    "offset.lag.max=0",
                    "emit.heartbeats.interval.seconds=1",
                ]
            )
            + "\n"
        )
        mm2 = Jvm("org.apache.kafka.connect.mirror.MirrorMaker", [str(props)], tmp_path / "mm2.log")

        copy = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "mm-check", "auto.offset.reset": "earliest"})
        copied: list[bytes] = []

        def all_copied() -> bool:
            if not copied:
                copy.subscribe(["A.mm-topic"])
            copied.extend(m.value() for m in copy.consume(100, timeout=1) if m.error() is None)
            return len(copied) >= 100

        wait_for("A.mm-topic on B", 240, all_copied, mm2.proc, mm2.log)
        copy.close()
        assert copied == [b"v%d" % i for i in range(100)]

        def translated() -> int:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "mm-group"})
            try:
                (tp,) = c.committed([TopicPartition("A.mm-topic", 0)], timeout=5)
                return tp.offset if tp.offset > 0 else 0
            finally:
                c.close()

        offset = wait_for("mm-group's offset translated to B", 180, translated, mm2.proc, mm2.log)
        assert 0 < offset <= 60, offset
    finally:
        if mm2 is not None:
            mm2.stop()
        a.stop()
        b.stop()

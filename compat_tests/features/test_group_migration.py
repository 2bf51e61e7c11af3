"""Online migration of a live group between the classic and the consumer protocol (Kafka 4.0's
`group.consumer.migration.policy`), with real clients: a rolling upgrade of confluent-kafka
consumers, and of Java 4.0 consumers, from `group.protocol=classic` to `consumer` one by one while
a producer runs, then a rolling downgrade back. Every member commits by hand after each record; nothing is lost and
nothing processed twice. ListGroups, DescribeGroups, ConsumerGroupDescribe and Kafka 4.0's
kafka-consumer-groups.sh show the group's kind at each step."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from compat_tests.support.admin import create_topic
from compat_tests.support.cluster import wait
from compat_tests.support.jvm import JVM_FLAGS, KAFKA_HOME, java_unavailable, kafka_tool, skip_unless_available
from compat_tests.support.wire import request
from compat_tests.support.workload import CommittingMember, PacedProducer, assert_exactly_once
from strom.protocol.schema import ApiKey
from strom.testing.zookeeper import require_all

TOPIC = "migrate"
GROUP = "migrate-group"
PARTITIONS = 6


class Member(CommittingMember):
    """A confluent-kafka consumer in the group with ``protocol``, running from the start."""

    def __init__(self, bootstrap: str, name: str, protocol: str, processed: list, lock: threading.Lock):
        config = {"group.protocol": protocol}
        if protocol == "classic":
            config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        super().__init__(bootstrap, GROUP, TOPIC, name, processed, lock, config)
        self.protocol = protocol
        self.start()


def _group_type(port: int) -> str | None:
    groups = request(port, ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}).groups
    return next((g.group_type for g in groups if g.group_id == GROUP), None)


def _consumer_describe(port: int):
    return request(
        port, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP], "include_authorized_operations": False}
    ).groups[0]


def _classic_describe(port: int):
    return request(port, ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": False}).groups[
        0
    ]


def _tool_state(bootstrap: str) -> list[str] | None:
    """kafka-consumer-groups.sh --describe --state: [group, coordinator, id, strategy, state, #members]
    (None without Java and Kafka's tools, a failure under STROM_COMPAT_REQUIRE_ALL)."""
    why = java_unavailable(needs="bin")
    if why:
        if require_all():
            pytest.fail(f"required by STROM_COMPAT_REQUIRE_ALL: {why}")
        return None
    out = kafka_tool(
        "kafka-consumer-groups.sh", "--bootstrap-server", bootstrap, "--describe", "--group", GROUP, "--state"
    )
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(GROUP)]
    assert len(rows) == 1, out.stdout + out.stderr
    return rows[0]


JAVA_PROGRAM = Path(__file__).parent / "java" / "MigratingConsumer.java"


class JavaMember:
    """A Java 4.0 KafkaConsumer (MigratingConsumer.java) in the group; it leaves when its standard
    input closes."""

    def __init__(self, bootstrap: str, name: str, protocol: str, processed: list, lock: threading.Lock):
        extra = ["group.protocol=" + protocol]
        if protocol == "classic":
            extra += ["session.timeout.ms=6000", "heartbeat.interval.ms=300"]
        self.name, self.processed, self.lock, self.count = name, processed, lock, 0
        self.crash: str | None = None
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [
                "java",
                *JVM_FLAGS,
                "-cp",
                f"{KAFKA_HOME}/libs/*",
                str(JAVA_PROGRAM),
                bootstrap,
                GROUP,
                TOPIC,
                name,
                *extra,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("processed "):
                with self.lock:
                    self.processed.append(line.split()[1].encode())
                self.count += 1
            else:
                self.lines.append(line.rstrip())

    def leave(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            self.reader.join(10)
        if self.proc.returncode != 0:
            self.crash = f"exit {self.proc.returncode}: " + " | ".join(self.lines[-5:])


def _tool_shows(bootstrap: str, expected: list[str]) -> None:
    """kafka-consumer-groups.sh shows the group's assignor, state and member count (asked again
    while a rebalance settles on a loaded machine)."""
    seen: list = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = _tool_state(bootstrap)
        if state is None or state[3:] == expected:
            return
        seen.append(state)
        time.sleep(0.5)
    raise AssertionError(f"kafka-consumer-groups.sh never showed {expected}: {seen}")


def _rolling(make_broker, member_class, describe_with_tool: bool):
    """Three classic members; each replaced by a consumer-protocol one (the first converts the
    group), then each replaced by a classic one again (the last converts it back), while a
    producer runs; every record processed exactly once."""
    broker = make_broker(
        {
            "group.consumer.heartbeat.interval.ms": "300",
            "group.consumer.session.timeout.ms": "6000",
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    bootstrap, port = broker.bootstrap, broker.port
    create_topic(bootstrap, TOPIC, PARTITIONS)
    processed: list[bytes] = []
    lock = threading.Lock()
    writer = PacedProducer(bootstrap, TOPIC, PARTITIONS)
    sent = writer.sent
    all_members: list = []

    def start(name: str, protocol: str):
        member = member_class(bootstrap, name, protocol, processed, lock)
        all_members.append(member)
        return member

    def progress(what: str):
        count = len(processed)
        wait(lambda: len(processed) > count + 150, 60, f"progress {what}")

    def replace(members: list, i: int, protocol: str):
        members[i].leave()
        members[i] = start(f"{protocol}-{i}", protocol)
        wait(lambda: members[i].count > 0, 60, f"{members[i].name} consuming")
        progress(f"after {members[i].name} joined")

    members: list = []
    try:
        writer.start()
        members = [start(f"classic-{i}", "classic") for i in range(3)]
        wait(lambda: all(m.count > 0 for m in members), 60, "three classic members consuming")
        assert _group_type(port) == "classic" and _classic_describe(port).group_state == "Stable"

        replace(members, 0, "consumer")  # the first consumer-protocol member converts the live group
        assert _group_type(port) == "consumer"
        assert _classic_describe(port).group_state == "Dead", "no classic group any more (DescribeGroups v5)"

        def reconciled() -> bool:  # Stable, three members, each partition owned once, by all of them
            described = _consumer_describe(port)
            owned = sorted(p for m in described.members for tp in m.assignment.topic_partitions for p in tp.partitions)
            return (
                described.group_state == "Stable"
                and len(described.members) == 3
                and owned == list(range(PARTITIONS))
                and all(m.assignment.topic_partitions for m in described.members)
            )

        wait(reconciled, 60, "the mixed group reconciled: three members, classic ones too, each partition once")
        if describe_with_tool:
            _tool_shows(bootstrap, ["uniform", "Stable", "3"])

        replace(members, 1, "consumer")
        replace(members, 2, "consumer")
        assert _group_type(port) == "consumer" and len(_consumer_describe(port).members) == 3

        replace(members, 0, "classic")  # classic members join the consumer group
        assert _group_type(port) == "consumer"
        replace(members, 1, "classic")
        replace(members, 2, "classic")  # the last consumer-protocol member left: classic again
        wait(lambda: _group_type(port) == "classic", 20, "the group back to classic")
        wait(
            lambda: (_classic_describe(port).group_state, len(_classic_describe(port).members)) == ("Stable", 3),
            60,
            "the classic group Stable with its three members",
        )
        assert _consumer_describe(port).error_code == 69, "GROUP_ID_NOT_FOUND: not a consumer group"
        if describe_with_tool:
            _tool_shows(bootstrap, ["range", "Stable", "3"])
        progress("after the downgrade")

        writer.finish()
        wait(lambda: len(set(processed)) >= len(sent), 60, "every produced record processed")
    finally:
        writer.stop()
        for m in all_members:
            m.leave()
    assert not [m.crash for m in all_members if m.crash], [m.crash for m in all_members if m.crash]
    assert_exactly_once(processed, sent)


def test_rolling_upgrade_and_downgrade_while_producing(make_broker):
    _rolling(make_broker, Member, describe_with_tool=True)


def test_java_rolling_upgrade_and_downgrade_while_producing(make_broker):
    skip_unless_available(java_unavailable())
    _rolling(make_broker, JavaMember, describe_with_tool=False)

"""Kafka 4.0's own admin tools against Strom: kafka-delete-records.sh, kafka-leader-election.sh and
kafka-topics.sh --describe (DescribeTopicPartitions, paged); standalone and in a 3-broker
ZooKeeper cluster, where a preferred leader election goes through the controller and deleted
records stay deleted on the followers."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support.cluster import (
    AckedProducer,
    cluster_fixture,
    read_back,
    wait,
)
from compat_tests.support.jvm import java_unavailable
from compat_tests.support.jvm import kafka_tool as tool

NO_JAVA = java_unavailable(needs="bin")
pytestmark = pytest.mark.skipif(NO_JAVA is not None, reason=str(NO_JAVA))


def create(bootstrap: str, name: str, partitions: int, rf: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=partition)
    assert producer.flush(30) == 0


def earliest(bootstrap: str, topic: str, partition: int = 0, timeout_s: float = 30) -> int:
    """The partition's log start offset. Right after a leader moves, a broker may still name the old
    leader in its metadata, and librdkafka then fails the query with a local error
    (_DESTROY_BROKER, _TRANSPORT): those are asked again until ``timeout_s``; an answer is never."""
    deadline = time.monotonic() + timeout_s
    while True:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lo"})
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in _MOVED_LEADER) or time.monotonic() > deadline:
                raise
        finally:
            consumer.close()
        time.sleep(0.2)


# _UNKNOWN_PARTITION: the broker librdkafka asked for metadata had not yet heard of the partition's
# new state (seen on a loaded machine, in a parallel test run)
_MOVED_LEADER = {
    KafkaError._DESTROY_BROKER,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
}


def test_admin_tools_on_a_standalone_broker(broker, tmp_path):
    bootstrap = broker.bootstrap
    create(bootstrap, "tools-a", 3)
    create(bootstrap, "tools-b", 2)
    produce(bootstrap, "tools-a", 10)
    offsets = tmp_path / "delete.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": "tools-a", "partition": 0, "offset": 6}]}))
    deleted = tool("kafka-delete-records.sh", "--bootstrap-server", bootstrap, "--offset-json-file", str(offsets))
    assert deleted.returncode == 0, deleted.stderr
    assert "partition: tools-a-0\tlow_watermark: 6" in deleted.stdout, deleted.stdout
    assert earliest(bootstrap, "tools-a") == 6

    elected = tool(
        "kafka-leader-election.sh",
        "--bootstrap-server",
        bootstrap,
        "--election-type",
        "preferred",
        "--topic",
        "tools-a",
        "--partition",
        "0",
    )
    assert elected.returncode == 0, elected.stderr
    assert "Valid replica already elected for partitions tools-a-0" in elected.stdout
    unknown = tool(
        "kafka-leader-election.sh",
        "--bootstrap-server",
        bootstrap,
        "--election-type",
        "unclean",
        "--topic",
        "nothere",
        "--partition",
        "0",
    )
    assert unknown.returncode != 0 and "UnknownTopicOrPartitionException: No such topic as nothere" in unknown.stdout

    # One partition per DescribeTopicPartitions answer: the tool follows the cursor through all five.
    described = tool(
        "kafka-topics.sh",
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--exclude-internal",
        "--partition-size-limit-per-response",
        "1",
    )
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("\tTopic:")]
    seen = sorted((r[1], int(r[3])) for r in rows)
    assert seen == [("tools-a", 0), ("tools-a", 1), ("tools-a", 2), ("tools-b", 0), ("tools-b", 1)], described.stdout
    assert all(r[4] == "Leader:" and r[6] == "Replicas:" and r[5] == r[7] for r in rows), described.stdout


# Kafka's default min.insync.replicas: acks=all producers carry on through a reassignment's ISR changes.
def test_kafka_configs_sets_ip_quotas_and_dynamic_broker_configs(broker):
    """kafka-configs.sh --entity-type ips (connection_creation_rate) and --entity-type brokers
    (replication throttle rates, connection limits, max.connection.creation.rate) on a standalone broker."""
    bootstrap = broker.bootstrap
    ip = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--entity-type",
        "ips",
        "--entity-name",
        "127.0.0.2",
        "--add-config",
        "connection_creation_rate=7",
    )
    assert ip.returncode == 0 and "Completed updating config for ip 127.0.0.2." in ip.stdout, ip.stdout + ip.stderr
    ips = tool("kafka-configs.sh", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "ips")
    assert "Quota configs for ip '127.0.0.2' are connection_creation_rate=7.0" in ips.stdout, ips.stdout + ips.stderr
    rate = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--add-config",
        "leader.replication.throttled.rate=5000,follower.replication.throttled.rate=6000,"
        "max.connections=500,max.connections.per.ip.overrides=[127.0.0.2:3,127.0.0.3:4]",
    )
    assert rate.returncode == 0, rate.stdout + rate.stderr
    default = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        "max.connection.creation.rate=100",
    )
    assert default.returncode == 0, default.stdout + default.stderr
    shown = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
    )
    for line in (
        "leader.replication.throttled.rate=5000",
        "follower.replication.throttled.rate=6000",
        "max.connections=500",
        "max.connections.per.ip.overrides=127.0.0.2:3,127.0.0.3:4",
    ):
        assert line in shown.stdout, shown.stdout + shown.stderr
    defaults = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--entity-type",
        "brokers",
        "--entity-default",
    )
    assert "max.connection.creation.rate=100" in defaults.stdout, defaults.stdout + defaults.stderr
    refused = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--add-config",
        "log.retention.hours=1",
    )
    assert refused.returncode != 0 and "Cannot update these configs dynamically" in refused.stdout + refused.stderr


cluster = cluster_fixture("/strom-k4-", **{"min.insync.replicas": "1"})


def _partition(bootstrap: str, topic: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]


def test_delete_records_and_preferred_election_in_a_cluster(cluster, tmp_path):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(everyone, "moved", 1, rf=3)
    # the preferred replica from an answer showing the full ISR: a broker that has not yet heard of
    # the partition's state answers LEADER_NOT_AVAILABLE with no replicas, and the next question
    # may go to such a broker
    full = wait(lambda: (lambda p: p if len(p.isrs) == 3 else None)(_partition(everyone, "moved")), 20, "full ISR")
    preferred = full.replicas[0]
    produce(everyone, "moved", 20)
    offsets = tmp_path / "delete.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moved", "partition": 0, "offset": 5}]}))
    deleted = tool("kafka-delete-records.sh", "--bootstrap-server", everyone, "--offset-json-file", str(offsets))
    assert deleted.returncode == 0 and "low_watermark: 5" in deleted.stdout, deleted.stdout + deleted.stderr

    # The preferred leader goes away: another replica leads, and it too starts at offset 5.
    cluster[preferred].stop()
    others = ",".join(b.bootstrap for b in cluster if b.running)
    wait(lambda: _partition(others, "moved").leader not in (-1, preferred), 30, "a new leader")
    assert earliest(others, "moved") == 5, "the follower kept records DeleteRecords removed"
    cluster[preferred].start()
    wait(lambda: len(_partition(everyone, "moved").isrs) == 3, 40, "the preferred replica back in the ISR")
    assert _partition(everyone, "moved").leader != preferred

    elected = tool(
        "kafka-leader-election.sh",
        "--bootstrap-server",
        everyone,
        "--election-type",
        "preferred",
        "--topic",
        "moved",
        "--partition",
        "0",
    )
    assert elected.returncode == 0, elected.stdout + elected.stderr
    assert "Successfully completed leader election (PREFERRED) for partitions moved-0" in elected.stdout
    wait(lambda: _partition(everyone, "moved").leader == preferred, 20, "leadership back on the preferred replica")
    again = tool(
        "kafka-leader-election.sh",
        "--bootstrap-server",
        everyone,
        "--election-type",
        "preferred",
        "--all-topic-partitions",
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert earliest(everyone, "moved") == 5
    consumer = Consumer({"bootstrap.servers": everyone, "group.id": "after", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("moved", 0, 5)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < 15 and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(100, 1) if not m.error()]
    finally:
        consumer.close()
    assert values == [b"%d" % i for i in range(5, 20)]


def test_client_quotas_live_in_zookeeper_and_reach_every_broker(cluster, zookeeper):
    from kazoo.client import KazooClient

    first, second = cluster[0].bootstrap, cluster[1].bootstrap
    altered = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        first,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "q1",
        "--add-config",
        "producer_byte_rate=1048576",
    )
    assert altered.returncode == 0 and "Completed updating config for client q1." in altered.stdout, altered.stderr
    altered = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        first,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "consumer_byte_rate=2000",
    )
    assert altered.returncode == 0, altered.stdout + altered.stderr

    def described():
        out = tool(
            "kafka-configs.sh",
            "--bootstrap-server",
            second,
            "--describe",
            "--entity-type",
            "clients",
            "--entity-name",
            "q1",
        ).stdout
        return "Quota configs for client-id 'q1' are producer_byte_rate=1048576.0" in out

    wait(described, 30, "the other broker to know the quota")
    # an IP quota set through one broker is known to every other (from /config/ips)
    ip = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        first,
        "--alter",
        "--entity-type",
        "ips",
        "--entity-name",
        "127.0.0.2",
        "--add-config",
        "connection_creation_rate=5",
    )
    assert ip.returncode == 0, ip.stdout + ip.stderr
    wait(
        lambda: (
            "connection_creation_rate=5.0"
            in tool(
                "kafka-configs.sh",
                "--bootstrap-server",
                cluster[2].bootstrap,
                "--describe",
                "--entity-type",
                "ips",
                "--entity-name",
                "127.0.0.2",
            ).stdout
        ),
        30,
        "the third broker to know the IP quota",
    )
    # ... and enforces it: a tiny quota set through one broker throttles a producer on every other
    tiny = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        first,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "tiny",
        "--add-config",
        "producer_byte_rate=100",
    )
    assert tiny.returncode == 0, tiny.stdout + tiny.stderr
    create(",".join(b.bootstrap for b in cluster), "qt", 3, rf=1)
    admin = AdminClient({"bootstrap.servers": second})
    leaders = wait(
        lambda: (lambda parts: parts if all(m.leader >= 0 for m in parts.values()) else None)(
            admin.list_topics("qt", timeout=10).topics["qt"].partitions
        ),
        20,
        "leaders of qt",
    )
    for partition, meta in leaders.items():
        wait(  # wait() calls the lambda in this iteration only
            lambda: _raw_produce(cluster[meta.leader].port, "qt", partition, "tiny") > 0,  # noqa: B023
            20,
            f"broker {meta.leader} throttling the client id",
        )
    # a connection limit set as the cluster default through one broker holds on another (from
    # /config/brokers/<default>); 127.0.0.3 has no creation rate quota, unlike 127.0.0.2 above
    limit = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        first,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        "max.connections.per.ip.overrides=[127.0.0.3:1]",
    )
    assert limit.returncode == 0, limit.stdout + limit.stderr
    held = wait(lambda: _served_from(cluster[2].port, "127.0.0.3"), 10, "a first connection from 127.0.0.3")
    try:
        wait(
            lambda: _served_from(cluster[2].port, "127.0.0.3") is None,
            30,
            "the third broker to close a second connection from 127.0.0.3",
        )
    finally:
        held.close()
    zk = KazooClient(
        hosts=zookeeper.connect_string + "/strom-k4-" + "test_client_quotas_live_in_zookeeper_and_reach_every_broker"
    )
    zk.start(timeout=10)
    try:
        assert json.loads(zk.get("/config/clients/q1")[0]) == {
            "version": 1,
            "config": {"producer_byte_rate": "1048576.0"},
        }
        assert json.loads(zk.get("/config/users/alice/clients/<default>")[0])["config"] == {
            "consumer_byte_rate": "2000.0"
        }
        assert json.loads(zk.get("/config/ips/127.0.0.2")[0])["config"] == {"connection_creation_rate": "5.0"}
        assert json.loads(zk.get("/config/brokers/<default>")[0])["config"] == {
            "max.connections.per.ip.overrides": "127.0.0.3:1"
        }
    finally:
        zk.stop()
        zk.close()


def test_reassign_partitions_while_producing_nothing_acknowledged_is_lost(cluster, tmp_path):
    everyone = ",".join(b.bootstrap for b in cluster)
    admin = AdminClient({"bootstrap.servers": everyone})
    create(everyone, "mv", 2, rf=2)
    wait(
        lambda: all(len(p.isrs) == 2 for p in admin.list_topics("mv", timeout=10).topics["mv"].partitions.values()),
        20,
        "full ISRs",
    )
    with AckedProducer(everyone, "mv", partitions=2) as producer:
        producer.wait_acked(500, 30, "records acknowledged before the move")
        before = admin.list_topics("mv", timeout=10).topics["mv"].partitions
        # each partition: its first replica (usually the leader) replaced by the broker it lacks
        targets = {
            p: [next(b for b in (0, 1, 2) if b not in before[p].replicas), before[p].replicas[1]] for p in (0, 1)
        }
        removed = {p: before[p].replicas[0] for p in (0, 1)}
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": "mv", "partition": p, "replicas": targets[p]} for p in (0, 1)]}
            )
        )
        executed = tool(
            "kafka-reassign-partitions.sh",
            "--bootstrap-server",
            everyone,
            "--execute",
            "--reassignment-json-file",
            str(plan),
        )
        assert executed.returncode == 0, executed.stdout + executed.stderr
        assert "Successfully started partition reassignments for mv-0,mv-1" in executed.stdout, executed.stdout

        def verified():
            out = tool(
                "kafka-reassign-partitions.sh",
                "--bootstrap-server",
                everyone,
                "--verify",
                "--reassignment-json-file",
                str(plan),
            )
            last[:] = [out.stdout + out.stderr]
            return (
                out.returncode == 0
                and "Reassignment of partition mv-0 is completed" in out.stdout
                and "Reassignment of partition mv-1 is completed" in out.stdout
            )

        last: list[str] = []
        try:
            wait(verified, 90, "the reassignment to complete")
        except AssertionError:
            raise AssertionError("\n".join([last[0] if last else ""] + [b.log_tail(4000) for b in cluster])) from None
        producer.wait_acked(300, 30, "acknowledgements after the move")
    parts = admin.list_topics("mv", timeout=10).topics["mv"].partitions
    assert (parts[0].replicas, parts[1].replicas) == (targets[0], targets[1])
    assert parts[0].leader in targets[0] and parts[1].leader in targets[1]
    wait(
        lambda: not any((cluster[removed[p]].log_dir / f"mv-{p}").exists() for p in (0, 1)),
        30,
        "the removed replicas' logs deleted",
    )
    producer.check(read_back(everyone, "mv", 2, producer.count, group="mv-check"), ordered=False)


def _served_from(port: int, source: str):
    """A connection from `source` answered (ApiVersions v0), or None when the broker closed it."""
    import socket

    from strom.tools.common import KafkaSocket

    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    try:
        KafkaSocket(sock, None).request(18, 0, {})
        return sock
    except (ConnectionResetError, ValueError):  # closed (reset, or EOF) instead of answered
        pass
    sock.close()
    return None


def _raw_produce(port: int, topic: str, partition: int, client_id: str) -> int:
    """One acks=1 Produce v9 of 5 KB as `client_id`; the answer's throttle_time_ms, or -1 when the
    broker is not (yet) the partition's leader."""
    import socket

    from strom.protocol.records.batch import Record, build_batch
    from strom.protocol.schema import ApiKey
    from strom.tools.common import KafkaSocket

    records = build_batch([Record(i, i, None, b"x" * 1000) for i in range(5)])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        response = KafkaSocket(sock, client_id).request(ApiKey.PRODUCE, 9, body)
    code = response.responses[0].partition_responses[0].error_code
    # the leader named by another broker may not have heard of the topic yet: clients retry these
    if code in (3, 5, 6):  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER
        return -1
    assert code == 0
    return response.throttle_time_ms


def _log_bytes(directory) -> int:
    try:
        return sum(f.stat().st_size for f in directory.glob("*.log"))
    except OSError:  # a segment rolled or went away between the listing and the stat
        return -1


def test_reassignment_with_a_throttle_catches_up_at_the_throttled_rate(cluster, tmp_path):
    """kafka-reassign-partitions.sh --execute --throttle sets the broker and topic throttles, the
    new replica catches up at about the throttled rate while a partition moved without a throttle
    between the same brokers is not held back, and --verify removes the throttles again."""
    everyone = ",".join(b.bootstrap for b in cluster)
    admin = AdminClient({"bootstrap.servers": everyone})
    create(everyone, "thr", 1, rf=1)
    source = (
        wait(
            lambda: (lambda p: p.leader + 1 if p.leader >= 0 else None)(_partition(everyone, "thr")),
            20,
            "a leader of thr",
        )
        - 1
    )
    target = (source + 1) % 3

    # (CreateTopics with a manual assignment is refused in a cluster: of three partitions of one
    # replica each, one is on the broker leading thr)
    create(everyone, "free", 3, rf=1)
    parts = wait(
        lambda: (lambda ps: ps if all(m.leader >= 0 for m in ps.values()) else None)(
            admin.list_topics("free", timeout=10).topics["free"].partitions
        ),
        20,
        "leaders of free",
    )
    free_p = next(p for p, m in parts.items() if m.replicas == [source])
    producer = Producer({"bootstrap.servers": everyone, "acks": "all", "linger.ms": 20, "batch.size": 65536})
    payload = os.urandom(1000)
    for topic, partition, count in (("thr", 0, 5000), ("free", free_p, 3000)):  # about 5 MB and 3 MB
        for i in range(count):
            producer.produce(topic, payload, partition=partition)
            if i % 500 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0
    dirs = {"thr": "thr-0", "free": f"free-{free_p}"}
    totals = {t: _log_bytes(cluster[source].log_dir / d) for t, d in dirs.items()}
    assert totals["thr"] > 4_500_000 and totals["free"] > 2_500_000

    rate = 1_000_000
    plans = {}
    for topic, partition in (("thr", 0), ("free", free_p)):
        plans[topic] = tmp_path / f"{topic}.json"
        plans[topic].write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": topic, "partition": partition, "replicas": [source, target]}]}
            )
        )
    executed = tool(
        "kafka-reassign-partitions.sh",
        "--bootstrap-server",
        everyone,
        "--execute",
        "--reassignment-json-file",
        str(plans["thr"]),
        "--throttle",
        str(rate),
    )
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert f"The inter-broker throttle limit was set to {rate} B/s" in executed.stdout, executed.stdout
    # the second move starts while the first is sampled (the tool's JVM takes seconds to start)
    unthrottled: list = []
    starter = threading.Thread(
        target=lambda: unthrottled.append(
            tool(
                "kafka-reassign-partitions.sh",
                "--bootstrap-server",
                everyone,
                "--execute",
                "--additional",
                "--reassignment-json-file",
                str(plans["free"]),
            )
        ),
        daemon=True,
    )
    starter.start()

    # both catch-ups, sampled from the new replica's log files
    samples: dict[str, list[tuple[float, int]]] = {"thr": [], "free": []}
    started = time.monotonic()
    while time.monotonic() - started < 60:
        for topic, seen in samples.items():
            if not seen or seen[-1][1] < totals[topic]:
                size = _log_bytes(cluster[target].log_dir / dirs[topic])
                if size >= 0:
                    seen.append((time.monotonic(), size))
        if all(seen and seen[-1][1] >= totals[t] for t, seen in samples.items()):
            break
        time.sleep(0.05)
    starter.join(60)
    assert unthrottled and unthrottled[0].returncode == 0, (
        unthrottled[0].stdout + unthrottled[0].stderr if unthrottled else ""
    )
    for topic, seen in samples.items():
        assert seen and seen[-1][1] >= totals[topic], (
            f"the new replica of {topic} did not catch up in 60 s: {seen[-1] if seen else None} of {totals[topic]}"
        )

    # while throttled, the limits show through kafka-configs.sh
    shown = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        everyone,
        "--describe",
        "--entity-type",
        "brokers",
        "--entity-name",
        str(source),
    )
    assert f"leader.replication.throttled.rate={rate}" in shown.stdout, shown.stdout + shown.stderr
    topic_configs = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        everyone,
        "--describe",
        "--entity-type",
        "topics",
        "--entity-name",
        "thr",
    )
    assert f"leader.replication.throttled.replicas=0:{source}" in topic_configs.stdout, topic_configs.stdout
    assert f"follower.replication.throttled.replicas=0:{target}" in topic_configs.stdout, topic_configs.stdout

    # Measured: the rate from the first replicated bytes to the end (the first fetch is let through
    # whole, as in Kafka, so the clock starts once it is in). Throttled: within 25% of the throttle;
    # the partition moved without a throttle, from the same leader to the same follower: far faster
    # (not held back by the throttle on the same fetcher).
    def measured(seen):
        first = next(i for i, (_, s) in enumerate(seen) if s > 0)
        (t0, s0), (t1, s1) = seen[first], seen[-1]
        return (s1 - s0) / max(t1 - t0, 0.05), t1 - t0

    throttled, spent = measured(samples["thr"])
    # unthrottled, it may all arrive between two samples: at least its size over the time since
    # the last sample that found none of it
    last_empty = max(t for t, size in samples["free"] if size == 0)
    free = totals["free"] / (samples["free"][-1][0] - last_empty)
    print(
        f"throttle {rate} B/s: catch-up of {totals['thr']} bytes at {throttled:.0f} B/s ({throttled / rate:.2f} of "
        f"the throttle) over {spent:.1f} s; the unthrottled partition at {free:.0f} B/s ({free / rate:.1f}x)"
    )
    assert 0.75 * rate <= throttled <= 1.25 * rate, f"caught up at {throttled:.0f} B/s against a throttle of {rate}"
    assert free >= 2 * rate, f"the partition without a throttle was held back too ({free:.0f} B/s)"

    def verified():
        out = tool(
            "kafka-reassign-partitions.sh",
            "--bootstrap-server",
            everyone,
            "--verify",
            "--reassignment-json-file",
            str(plans["thr"]),
        )
        last[:] = [out.stdout + out.stderr]
        return out.returncode == 0 and "Reassignment of partition thr-0 is completed" in out.stdout

    last: list[str] = []
    try:
        wait(verified, 60, "the reassignment to complete")
    except AssertionError:
        raise AssertionError("\n".join([last[0] if last else ""] + [b.log_tail(4000) for b in cluster])) from None
    assert "Clearing broker-level throttles" in last[0] and "Clearing topic-level throttles on topic thr" in last[0], (
        last[0]
    )
    for broker in (source, target):
        after = tool(
            "kafka-configs.sh",
            "--bootstrap-server",
            everyone,
            "--describe",
            "--entity-type",
            "brokers",
            "--entity-name",
            str(broker),
        )
        assert "throttled.rate" not in after.stdout, after.stdout
    topic_after = tool(
        "kafka-configs.sh",
        "--bootstrap-server",
        everyone,
        "--describe",
        "--entity-type",
        "topics",
        "--entity-name",
        "thr",
    )
    assert "throttled.replicas" not in topic_after.stdout, topic_after.stdout
    assert sorted(admin.list_topics("thr", timeout=10).topics["thr"].partitions[0].replicas) == sorted([source, target])

"""Share-partition state is durable: written through the share coordinator's inter-broker APIs
into `__share_group_state`, it survives a broker restart, and Kafka 4.3.1's own kafka-dump-log
(``--share-group-state-decoder``) reads Strom's records as Kafka's (ShareSnapshot, ShareUpdate)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time

from compat_tests.support.jvm import skip_unless_available
from compat_tests.support.paths import SHARED_JVM
from compat_tests.support.share_consumer import poll_messages
from compat_tests.support.wire import Raw
from strom.protocol.internal_records import partition_for
from strom.protocol.schema import ApiKey
from strom.testing.embedded import StromBroker

TOPIC = "durable"
GROUP = "g-durable"
KAFKA_43 = SHARED_JVM / "kafka-4.3.1"
CLIENT_43 = SHARED_JVM / "kafka-clients-4.3.1" / "kafka-clients-4.3.1.jar"


def _one(raw: Raw, api: int, version: int, topic_id: bytes, **partition: object):
    body = {"group_id": GROUP, "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, **partition}]}]}
    answer = raw.request(api, version, body)
    return answer.results[0].partitions[0]


def _earliest(port: int, partition: int) -> int:
    with Raw(port) as raw:
        answer = raw.request(
            ApiKey.LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "__share_group_state",
                        "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -2}],
                    }
                ],
            },
        )
    return int(answer.topics[0].partitions[0].offset)


def _batches(p) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]


def test_state_survives_a_restart_and_kafka_reads_the_records(tmp_path) -> None:
    configs = {
        "share.coordinator.state.topic.num.partitions": 3,
        "share.coordinator.snapshot.update.records.per.snapshot": 2,
        "share.coordinator.state.topic.prune.interval.ms": 100,
    }
    with StromBroker(configs, data_dir=tmp_path / "data") as broker:
        broker.create_topic(TOPIC, 2)
        with Raw(broker.port) as raw:
            meta = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
            topic_id = bytes(meta.topics[0].topic_id)
            key = f"{GROUP}:{base64.urlsafe_b64encode(topic_id).decode().rstrip('=')}:0"
            found = raw.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [key]})
            assert found.coordinators[0].error_code == 0 and found.coordinators[0].port == broker.port
            assert (
                _one(raw, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, topic_id, state_epoch=1, start_offset=0).error_code
                == 0
            )
            writes = [
                (0, [(0, 4, 2, 1)]),  # records 0-4 acknowledged
                (-1, [(5, 9, 0, 1)]),  # 5-9 released once
                (3, [(5, 6, 4, 1)]),  # start offset moves to 3, 5-6 rejected (archived)
                (-1, [(7, 7, 2, 2)]),  # 7 acknowledged on its second delivery
            ]
            for start, batches in writes:
                state_batches = [
                    {"first_offset": f, "last_offset": last, "delivery_state": s, "delivery_count": c}
                    for f, last, s, c in batches
                ]
                p = _one(
                    raw,
                    ApiKey.WRITE_SHARE_GROUP_STATE,
                    1,
                    topic_id,
                    state_epoch=1,
                    leader_epoch=0,
                    start_offset=start,
                    delivery_complete_count=-1,
                    state_batches=state_batches,
                )
                assert p.error_code == 0, p
            before = _one(raw, ApiKey.READ_SHARE_GROUP_STATE, 0, topic_id, leader_epoch=-1)
        assert (before.state_epoch, before.start_offset) == (1, 3)
        assert _batches(before) == [(3, 4, 2, 1), (5, 6, 4, 1), (7, 7, 2, 2), (8, 9, 0, 1)]
        # pruned: what precedes the last snapshot (offset 3) is not needed any more
        state_partition = partition_for(key, 3)
        deadline = time.monotonic() + 10
        while _earliest(broker.port, state_partition) != 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _earliest(broker.port, state_partition) == 3

        broker.restart()
        with Raw(broker.port) as raw:
            after = _one(raw, ApiKey.READ_SHARE_GROUP_STATE, 0, topic_id, leader_epoch=-1)
            summary = _one(raw, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1, topic_id, leader_epoch=-1)
        assert (after.error_code, after.state_epoch, after.start_offset) == (0, 1, 3)
        assert _batches(after) == _batches(before)
        assert (summary.state_epoch, summary.leader_epoch, summary.start_offset) == (1, 0, 3)
        logs = sorted(broker.data_dir.glob("**/__share_group_state-*/*.log"))

    segments = [str(p) for p in logs if p.stat().st_size > 0]
    assert len(segments) == 1
    dump = _kafka_dump(segments)
    records = [json.loads(line.split(" key: ", 1)[1].split(" payload: ")[0]) for line in dump if " key: " in line]
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in dump if " payload: " in line]
    # the initialization, two updates, a snapshot (two updates since the last one), an update
    assert [r["type"] for r in records] == ["0", "1", "1", "0", "1"]
    assert {(r["data"]["groupId"], r["data"]["partition"]) for r in records} == {(GROUP, 0)}
    snapshot = payloads[3]["data"]
    assert (snapshot["snapshotEpoch"], snapshot["stateEpoch"], snapshot["startOffset"]) == (1, 1, 3)
    assert [b["deliveryState"] for b in snapshot["stateBatches"]] == [2, 4, 0]


def _kafka_dump(files: list[str]) -> list[str]:
    if shutil.which("java") is None:
        skip_unless_available("no java on PATH (Debian: openjdk-17-jre-headless)")
    if not (KAFKA_43 / "bin" / "kafka-dump-log.sh").exists() or not CLIENT_43.exists():
        skip_unless_available(f"Kafka 4.3.1 not found under {SHARED_JVM}")
    env = {
        **os.environ,
        "KAFKA_HEAP_OPTS": "-Xmx256m",
        "KAFKA_OPTS": "-XX:TieredStopAtLevel=1 -Xshare:auto",
        "CLASSPATH": str(CLIENT_43),  # libs/ holds it as a link some copies of shared/jvm lost
    }
    run = subprocess.run(
        [str(KAFKA_43 / "bin" / "kafka-dump-log.sh"), "--share-group-state-decoder", "--files", ",".join(files)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Exception" not in run.stdout + run.stderr, (run.stdout + run.stderr)[-3000:]
    return run.stdout.splitlines()


def test_a_share_consumer_s_acknowledgements_survive_a_restart(tmp_path) -> None:
    """confluent-kafka's ShareConsumer accepts, rejects and releases; after a restart of the broker
    only the released records come again, once more delivered."""
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from compat_tests.support.admin import create_topic
    from compat_tests.support.brokers import start_broker

    broker = start_broker(
        tmp_path / "broker",
        {"group.share.heartbeat.interval.ms": "500", "group.share.min.heartbeat.interval.ms": "500"},
    )
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, TOPIC, 1)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        reset = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
        for future in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[reset])]
        ).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(10):
            producer.produce(TOPIC, value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0

        consumer = ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": GROUP, "share.acknowledgement.mode": "explicit"}
        )
        consumer.subscribe([TOPIC])
        try:
            first = poll_messages(consumer, 10)
            assert [m.offset() for m in first] == list(range(10))
            for m in first:
                kind = (
                    AcknowledgeType.ACCEPT
                    if m.offset() < 6
                    else AcknowledgeType.REJECT
                    if m.offset() == 6
                    else AcknowledgeType.RELEASE
                )
                consumer.acknowledge(m, kind)
            consumer.commit_sync()
        finally:
            consumer.close()

        broker.restart()
        bootstrap = broker.bootstrap
        consumer = ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": GROUP, "share.acknowledgement.mode": "explicit"}
        )
        consumer.subscribe([TOPIC])
        try:
            again = poll_messages(consumer, 3)
            assert [(m.offset(), m.delivery_count()) for m in again] == [(7, 2), (8, 2), (9, 2)]
            for m in again:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            consumer.commit_sync()
            producer = Producer({"bootstrap.servers": bootstrap})
            producer.produce(TOPIC, value=b"after", partition=0)
            assert producer.flush(30) == 0
            later = poll_messages(consumer, 1)
            assert [(m.offset(), m.value()) for m in later] == [(10, b"after")]
            consumer.acknowledge(later[0], AcknowledgeType.ACCEPT)
            consumer.commit_sync()
        finally:
            consumer.close()
    finally:
        broker.stop()


def test_offsets_reset_on_an_empty_group_are_where_consumers_start(tmp_path) -> None:
    """AlterShareGroupOffsets (what kafka-share-groups.sh --reset-offsets sends) on an empty group:
    the next share consumers start at the new start offset, also after the group consumed."""
    from confluent_kafka import Producer, ShareConsumer

    with StromBroker(
        {"group.share.heartbeat.interval.ms": 500, "group.share.min.heartbeat.interval.ms": 500},
        data_dir=tmp_path / "data",
    ) as broker:
        broker.create_topic(TOPIC, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(10):
            producer.produce(TOPIC, value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0

        def reset(start: int) -> None:
            body = {
                "group_id": GROUP,
                "topics": [{"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": start}]}],
            }
            with Raw(broker.port) as raw:
                answer = raw.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, body)
            assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0, answer

        def consume(count: int) -> list[int]:
            consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": GROUP})
            consumer.subscribe([TOPIC])
            try:
                offsets = [m.offset() for m in poll_messages(consumer, count)]
                consumer.commit_sync()
                return offsets
            finally:
                consumer.close()

        reset(2)
        assert consume(8) == list(range(2, 10))
        reset(5)
        assert consume(5) == list(range(5, 10))
        with Raw(broker.port) as raw:
            described = raw.request(
                ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {"groups": [{"group_id": GROUP, "topics": None}]}
            )
        assert described.groups[0].topics[0].partitions[0].start_offset == 10

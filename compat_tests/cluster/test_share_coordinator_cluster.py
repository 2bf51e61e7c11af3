"""Share-partition state on a 3-broker cluster (real ZooKeeper): `__share_group_state` replicated
three ways (min ISR 2); when the broker leading a share-partition's state partition stops, another
becomes its share coordinator, loads the partition and answers with the same state. Share
consumers' acknowledgements survive that move: the share-partition leader reaches the new share
coordinator through the inter-broker APIs."""

from __future__ import annotations

import base64

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from compat_tests.support.cluster import bootstrap, cluster_fixture, create, partition_meta, wait, wait_full_isr
from compat_tests.support.share_consumer import poll_messages
from compat_tests.support.wire import Raw
from strom.protocol.internal_records import partition_for
from strom.protocol.schema import ApiKey

STATE_TOPIC = "__share_group_state"
TOPIC = "sc-cluster"
GROUP = "sc-cluster-group"

cluster = cluster_fixture(
    **{
        "share.coordinator.state.topic.replication.factor": "3",
        "share.coordinator.state.topic.min.isr": "2",
        "share.coordinator.state.topic.num.partitions": "3",
        "group.share.heartbeat.interval.ms": "500",
        "group.share.min.heartbeat.interval.ms": "500",
    }
)


def _key(topic_id: bytes, partition: int = 0) -> str:
    return f"{GROUP}:{base64.urlsafe_b64encode(topic_id).decode().rstrip('=')}:{partition}"


def _coordinator(brokers, key: str) -> int | None:
    """The share coordinator's node id, None while there is none."""
    with Raw(next(b for b in brokers if b.running).port) as raw:
        found = raw.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [key]}).coordinators[0]
    return found.node_id if found.error_code == 0 else None


def _read(broker, topic_id: bytes):
    body = {"group_id": GROUP, "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": -1}]}]}
    with Raw(broker.port) as raw:
        return raw.request(ApiKey.READ_SHARE_GROUP_STATE, 0, body).results[0].partitions[0]


def _set_group_config(broker, name: str, value: str) -> None:
    body = {
        "resources": [
            {"resource_type": 32, "resource_name": GROUP,
             "configs": [{"name": name, "config_operation": 0, "value": value}]}
        ],
        "validate_only": False,
    }  # fmt: skip
    with Raw(broker.port) as raw:
        answer = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses[0]
    assert answer.error_code == 0, answer


def _group_config(broker, name: str) -> tuple[str, int]:
    body = {
        "resources": [{"resource_type": 32, "resource_name": GROUP, "configuration_keys": [name]}],
        "include_synonyms": False,
        "include_documentation": False,
    }
    with Raw(broker.port) as raw:
        (entry,) = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, body).results[0].configs
    return entry.value, entry.config_source


def test_acknowledgements_survive_a_share_coordinator_move(cluster) -> None:
    create(cluster, TOPIC, 1)
    wait_full_isr(cluster, TOPIC)
    servers = bootstrap(cluster)
    # the group starts at the earliest offset: set through a broker that does not lead the
    # partition, so the share-partition's leader has it only if group configs reach every broker
    leader = partition_meta(cluster, TOPIC).leader
    told = next(b for n, b in enumerate(cluster) if n != leader)
    _set_group_config(told, "share.auto.offset.reset", "earliest")
    wait(lambda: _group_config(cluster[leader], "share.auto.offset.reset") == ("earliest", 8), 30, "the config")
    with Raw(cluster[0].port) as raw:
        meta = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    topic_id = bytes(meta.topics[0].topic_id)
    key = _key(topic_id)
    (coordinator,) = wait(
        lambda: (lambda n: None if n is None else (n,))(_coordinator(cluster, key)), 30, "a share coordinator"
    )
    index = partition_for(key, 3)
    wait_full_isr(cluster, STATE_TOPIC, 3)

    producer = Producer({"bootstrap.servers": servers})
    for i in range(6):
        producer.produce(TOPIC, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    config = {"bootstrap.servers": servers, "group.id": GROUP, "share.acknowledgement.mode": "explicit"}
    consumer = ShareConsumer(config)
    consumer.subscribe([TOPIC])
    try:
        first = poll_messages(consumer, 6)
        assert [m.offset() for m in first] == list(range(6))
        for m in first:
            consumer.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 4 else AcknowledgeType.RELEASE)
        consumer.commit_sync()
    finally:
        consumer.close()
    before = _read(cluster[coordinator], topic_id)
    assert before.error_code == 0 and before.start_offset == 4, before
    other = next(b for n, b in enumerate(cluster) if n != coordinator)
    assert _read(other, topic_id).error_code == 16  # NOT_COORDINATOR anywhere else
    wait(lambda: sorted(partition_meta(cluster, STATE_TOPIC, index).isrs) == [0, 1, 2], 30, "the state replicated")

    cluster[coordinator].stop()
    survivors = [b for b in cluster if b.running]
    (moved,) = wait(
        lambda: (lambda n: (n,) if n not in (None, coordinator) else None)(_coordinator(survivors, key)),
        60,
        "a new share coordinator",
    )
    after = wait(lambda: (lambda p: p if p.error_code == 0 else None)(_read(cluster[moved], topic_id)), 30, "the state")
    assert (after.state_epoch, after.start_offset) == (before.state_epoch, before.start_offset)
    assert [tuple(b.values()) for b in after.state_batches] == [tuple(b.values()) for b in before.state_batches]

    consumer = ShareConsumer({**config, "bootstrap.servers": bootstrap(survivors)})
    consumer.subscribe([TOPIC])
    try:
        again = poll_messages(consumer, 2, 60)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(4, 2), (5, 2)]
        for m in again:
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        consumer.commit_sync()
    finally:
        consumer.close()

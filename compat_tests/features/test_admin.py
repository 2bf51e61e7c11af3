"""Topic and config administration through confluent-kafka's AdminClient."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic, ResourceType

from compat_tests.support.admin import ADMIN_TIMEOUT_S, admin_client, create_topic, partition_count, unique_topic
from strom.tools.broker_process import BrokerProcess


def error_code(excinfo: pytest.ExceptionInfo[KafkaException]) -> int:
    return excinfo.value.args[0].code()


def describe_topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_client(bootstrap)  # must outlive its futures
    result = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)
    entries = result[resource].result(ADMIN_TIMEOUT_S)
    return {name: entry.value for name, entry in entries.items()}


def test_create_list_delete_topic(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin")
    create_topic(shared_broker.bootstrap, topic, 4)
    assert partition_count(shared_broker.bootstrap, topic) == 4
    listed = admin_client(shared_broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S)
    assert topic in listed.topics

    admin = admin_client(shared_broker.bootstrap)
    admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(ADMIN_TIMEOUT_S)
    listed = admin_client(shared_broker.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S)
    assert topic not in listed.topics


def test_create_existing_topic_fails(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-dup")
    create_topic(shared_broker.bootstrap, topic, 1)
    with pytest.raises(KafkaException) as excinfo:
        create_topic(shared_broker.bootstrap, topic, 1)
    assert error_code(excinfo) == KafkaError.TOPIC_ALREADY_EXISTS


def test_delete_missing_topic_fails(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-missing")
    admin = admin_client(shared_broker.bootstrap)
    with pytest.raises(KafkaException) as excinfo:
        admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(ADMIN_TIMEOUT_S)
    assert error_code(excinfo) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_validate_only_creates_nothing(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-validate")
    admin = admin_client(shared_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)], validate_only=True, operation_timeout=ADMIN_TIMEOUT_S)[topic].result(
        ADMIN_TIMEOUT_S
    )
    assert partition_count(shared_broker.bootstrap, topic) is None


def test_create_partitions(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-parts")
    create_topic(shared_broker.bootstrap, topic, 2)
    admin = admin_client(shared_broker.bootstrap)
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(ADMIN_TIMEOUT_S)
    assert partition_count(shared_broker.bootstrap, topic) == 5

    with pytest.raises(KafkaException) as excinfo:
        admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(
            ADMIN_TIMEOUT_S
        )
    assert error_code(excinfo) == KafkaError.INVALID_PARTITIONS


def test_topic_config_at_creation_and_describe(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-config")
    create_topic(shared_broker.bootstrap, topic, 1, {"cleanup.policy": "compact", "retention.ms": "3600000"})
    configs = describe_topic_configs(shared_broker.bootstrap, topic)
    assert configs["cleanup.policy"] == "compact"
    assert configs["retention.ms"] == "3600000"
    assert "segment.bytes" in configs  # defaults are described too


def test_incremental_alter_configs(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-incr")
    create_topic(shared_broker.bootstrap, topic, 1, {"retention.ms": "3600000"})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin = admin_client(shared_broker.bootstrap)
    admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    configs = describe_topic_configs(shared_broker.bootstrap, topic)
    assert configs["retention.bytes"] == "1048576"
    assert configs["retention.ms"] == "3600000"  # untouched by an incremental change

    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    configs = describe_topic_configs(shared_broker.bootstrap, topic)
    assert configs["retention.ms"] != "3600000"  # back to the broker default
    assert configs["retention.bytes"] == "1048576"


def test_legacy_alter_configs_replaces_all(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-alter")
    create_topic(shared_broker.bootstrap, topic, 1, {"retention.ms": "3600000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "2097152"})
    admin = admin_client(shared_broker.bootstrap)
    admin.alter_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    configs = describe_topic_configs(shared_broker.bootstrap, topic)
    assert configs["retention.bytes"] == "2097152"
    assert configs["retention.ms"] != "3600000"  # AlterConfigs replaces the whole set


def test_alter_unknown_config_is_rejected(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("admin-bad-config")
    create_topic(shared_broker.bootstrap, topic, 1)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin = admin_client(shared_broker.bootstrap)
    with pytest.raises(KafkaException) as excinfo:
        admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    assert error_code(excinfo) == KafkaError.INVALID_CONFIG


def test_describe_cluster(shared_broker: BrokerProcess) -> None:
    admin = admin_client(shared_broker.bootstrap)
    cluster = admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_S).result(ADMIN_TIMEOUT_S)
    assert cluster.cluster_id
    assert [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", shared_broker.port)]
    assert cluster.controller is not None and cluster.controller.id == cluster.nodes[0].id

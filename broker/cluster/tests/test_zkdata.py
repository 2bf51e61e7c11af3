"""znode paths and JSON: golden bytes as a ZooKeeper-mode Kafka writes them, round trips,
and malformed data rejected with ZkDataError."""

from __future__ import annotations

import pytest

from strom.broker.zk.zkdata import (
    LEADER_RECOVERING,
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerInfo,
    ClusterIdZNode,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerInfo,
    ControllerZNode,
    DeleteTopicsTopicZNode,
    EndPoint,
    IsrChangeNotificationSequenceZNode,
    PartitionState,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicZNode,
    ZkDataError,
    new_topic_id,
    topic_id_from_text,
)

BROKER_GOLDEN = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://localhost:9091"],"jmx_port":-1,"port":9091,"host":"localhost",'
    b'"version":5,"timestamp":"1707276552023"}'
)
TOPIC_GOLDEN = (
    b'{"removing_replicas":{},"partitions":{"0":[0]},"topic_id":"ZOLr9CLNQjSW70hyIHx6BQ",'
    b'"adding_replicas":{},"version":3}'
)
STATE_GOLDEN = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}'
CONTROLLER_GOLDEN = b'{"version":2,"brokerid":0,"timestamp":"1719917952299","kraftControllerEpoch":-1}'


def test_paths_follow_kafka_layout() -> None:
    assert BrokerIdsZNode.path() == "/brokers/ids"
    assert BrokerIdZNode.path(3) == "/brokers/ids/3"
    assert TopicZNode.path("orders") == "/brokers/topics/orders"
    assert TopicPartitionStateZNode.path("orders", 2) == "/brokers/topics/orders/partitions/2/state"
    assert ControllerZNode.path() == "/controller"
    assert ControllerEpochZNode.path() == "/controller_epoch"
    assert ConfigEntityZNode.path("topics", "orders") == "/config/topics/orders"
    assert ConfigEntityChangeNotificationSequenceZNode.create_path() == "/config/changes/config_change_"
    assert DeleteTopicsTopicZNode.path("orders") == "/admin/delete_topics/orders"
    assert ClusterIdZNode.path() == "/cluster/id"


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "x\x00"])
def test_path_rejects_names_that_escape_their_parent(bad: str) -> None:
    with pytest.raises(ZkDataError):
        TopicZNode.path(bad)


@pytest.mark.parametrize("bad", [-1, True, "1"])
def test_path_rejects_bad_broker_ids_and_partitions(bad: object) -> None:
    with pytest.raises(ZkDataError):
        BrokerIdZNode.path(bad)  # type: ignore[arg-type]
    with pytest.raises(ZkDataError):
        TopicPartitionStateZNode.path("t", bad)  # type: ignore[arg-type]


def test_broker_registration_golden_bytes() -> None:
    info = BrokerInfo(1, (EndPoint("PLAINTEXT", "localhost", 9091),), timestamp_ms=1707276552023)
    assert BrokerIdZNode.encode(info) == BROKER_GOLDEN
    assert BrokerIdZNode.decode(1, BROKER_GOLDEN) == info


def test_broker_registration_round_trip_with_rack_features_and_listeners() -> None:
    info = BrokerInfo(
        7,
        (EndPoint("CLIENT", "h1", 9092, "SSL"), EndPoint("REPLICATION", "::1", 9093, "PLAINTEXT")),
        rack="dc1",
        jmx_port=9999,
        timestamp_ms=5,
        features={"metadata.version": {"min_version": 1, "max_version": 7}},
    )
    data = BrokerIdZNode.encode(info)
    assert b'"endpoints":["CLIENT://h1:9092","REPLICATION://[::1]:9093"]' in data
    assert b'"host":"::1","port":9093' in data or b'"port":9093,"host":"::1"' in data
    assert BrokerIdZNode.decode(7, data) == info


def test_broker_registration_without_plaintext_has_null_host() -> None:
    data = BrokerIdZNode.encode(BrokerInfo(1, (EndPoint("SSL", "h", 1, "SSL"),)))
    assert b'"port":-1,"host":null' in data


def test_broker_registration_old_versions_decode() -> None:
    v1 = b'{"version":1,"host":"h","port":9092,"jmx_port":-1,"timestamp":"12"}'
    assert BrokerIdZNode.decode(0, v1).endpoints == (EndPoint("PLAINTEXT", "h", 9092),)
    v2 = b'{"version":2,"host":"h","port":1,"jmx_port":-1,"timestamp":"1","endpoints":["SSL://h:2"]}'
    assert BrokerIdZNode.decode(0, v2).endpoints == (EndPoint("SSL", "h", 2, "SSL"),)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"[1,2]",
        b'{"version":5}',
        b'{"version":0,"jmx_port":-1,"endpoints":[]}',
        b'{"version":5,"jmx_port":-1,"endpoints":["PLAINTEXT:/h:1"]}',
        b'{"version":5,"jmx_port":-1,"endpoints":["PLAINTEXT://h:x"]}',
        b'{"version":5,"jmx_port":-1,"endpoints":["WEIRD://h:1"],"listener_security_protocol_map":{}}',
        b'{"version":5,"jmx_port":"9","endpoints":[]}',
        b'{"version":true,"jmx_port":-1,"endpoints":[]}',
        b'{"version":5,"jmx_port":-1,"endpoints":[],"timestamp":"soon"}',
        b'{"version":5,"jmx_port":-1,"endpoints":[],"features":{"f":{"min_version":"1"}}}',
        b"\xff\xfe",
    ],
)
def test_broker_registration_rejects_malformed(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        BrokerIdZNode.decode(1, data)


def test_broker_ids_children_sorted_numerically() -> None:
    assert BrokerIdsZNode.decode_children(["10", "2", "1"]) == [1, 2, 10]
    with pytest.raises(ZkDataError):
        BrokerIdsZNode.decode_children(["1", "lock"])


def test_topic_assignment_golden_bytes() -> None:
    assignment = TopicAssignment({0: (0,)}, topic_id="ZOLr9CLNQjSW70hyIHx6BQ")
    assert TopicZNode.encode(assignment) == TOPIC_GOLDEN
    assert TopicZNode.decode(TOPIC_GOLDEN) == assignment


def test_topic_assignment_round_trip_sorts_partitions_numerically() -> None:
    assignment = TopicAssignment(
        {10: (1, 2), 2: (2, 3), 0: (3, 1)},
        topic_id=new_topic_id(),
        adding_replicas={2: (3,)},
        removing_replicas={10: (2,)},
    )
    data = TopicZNode.encode(assignment)
    assert b'"partitions":{"0":[3,1],"2":[2,3],"10":[1,2]}' in data
    decoded = TopicZNode.decode(data)
    assert decoded == assignment
    assert list(decoded.partitions) == [0, 2, 10]


def test_topic_assignment_without_topic_id_and_old_versions() -> None:
    assert TopicZNode.decode(b'{"version":1,"partitions":{"0":[1]}}') == TopicAssignment({0: (1,)})
    assert b"topic_id" not in TopicZNode.encode(TopicAssignment({0: (1,)}))


@pytest.mark.parametrize(
    "data",
    [
        b'{"partitions":{"0":[1]}}',
        b'{"version":3,"partitions":{"zero":[1]}}',
        b'{"version":3,"partitions":{"-1":[1]}}',
        b'{"version":3,"partitions":{"0":1}}',
        b'{"version":3,"partitions":{"0":["1"]}}',
        b'{"version":3,"partitions":[]}',
        b'{"version":3,"partitions":{},"topic_id":"short"}',
        b'{"version":3,"partitions":{},"topic_id":7}',
    ],
)
def test_topic_assignment_rejects_malformed(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        TopicZNode.decode(data)


def test_topic_ids_are_kafka_base64_text() -> None:
    text = new_topic_id()
    assert len(text) == 22 and "=" not in text
    assert len(topic_id_from_text(text)) == 16
    with pytest.raises(ZkDataError):
        topic_id_from_text("!" * 22)


def test_partition_state_golden_bytes() -> None:
    state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    assert TopicPartitionStateZNode.encode(state) == STATE_GOLDEN
    assert TopicPartitionStateZNode.decode(STATE_GOLDEN) == state


def test_partition_state_writes_recovery_state_only_while_recovering() -> None:
    recovering = PartitionState(2, 5, (2,), 3, leader_recovery_state=LEADER_RECOVERING)
    data = TopicPartitionStateZNode.encode(recovering)
    assert data.endswith(b',"leader_recovery_state":1}')
    assert TopicPartitionStateZNode.decode(data) == recovering


@pytest.mark.parametrize(
    "data",
    [
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0}',
        b'{"controller_epoch":1,"leader":"1","version":1,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[null]}',
        b'{"controller_epoch":1,"leader":1,"leader_epoch":0,"isr":[1],"leader_recovery_state":9}',
        b"null",
    ],
)
def test_partition_state_rejects_malformed(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        TopicPartitionStateZNode.decode(data)


def test_controller_golden_bytes_and_version_1() -> None:
    assert ControllerZNode.encode(0, 1719917952299) == CONTROLLER_GOLDEN
    assert ControllerZNode.decode(CONTROLLER_GOLDEN) == ControllerInfo(0, 1719917952299, -1)
    v1 = b'{"version":1,"brokerid":4,"timestamp":"3"}'
    assert ControllerZNode.decode(v1) == ControllerInfo(4, 3, None)
    with pytest.raises(ZkDataError):
        ControllerZNode.decode(b'{"version":2,"timestamp":"3"}')


def test_controller_epoch_is_plain_text() -> None:
    assert ControllerEpochZNode.encode(12) == b"12"
    assert ControllerEpochZNode.decode(b"12") == 12
    for bad in (b"", b"x", b"-1", b"\xff"):
        with pytest.raises(ZkDataError):
            ControllerEpochZNode.decode(bad)


def test_topic_config_golden_bytes() -> None:
    golden = b'{"version":1,"config":{"retention.ms":"100000"}}'
    assert ConfigEntityZNode.encode({"retention.ms": "100000"}) == golden
    assert ConfigEntityZNode.decode(golden) == {"retention.ms": "100000"}
    assert ConfigEntityZNode.decode(b'{"version":1}') == {}
    with pytest.raises(ZkDataError):
        ConfigEntityZNode.decode(b'{"version":1,"config":{"retention.ms":100000}}')
    with pytest.raises(ZkDataError):
        ConfigEntityZNode.encode({"retention.ms": 1})  # type: ignore[dict-item]


def test_config_change_notification() -> None:
    data = ConfigEntityChangeNotificationSequenceZNode.encode("topics", "orders")
    assert data == b'{"version":2,"entity_path":"topics/orders"}'
    assert ConfigEntityChangeNotificationSequenceZNode.decode(data) == ("topics", "orders")
    v1 = b'{"version":1,"entity_type":"topics","entity_name":"x"}'
    assert ConfigEntityChangeNotificationSequenceZNode.decode(v1) == ("topics", "x")
    for bad in (b'{"version":2,"entity_path":"topics"}', b'{"version":3,"entity_path":"a/b"}'):
        with pytest.raises(ZkDataError):
            ConfigEntityChangeNotificationSequenceZNode.decode(bad)


def test_isr_change_notification_round_trip() -> None:
    data = IsrChangeNotificationSequenceZNode.encode([("b", 1), ("a", 0)])
    assert data == b'{"version":1,"partitions":[{"topic":"a","partition":0},{"topic":"b","partition":1}]}'
    assert IsrChangeNotificationSequenceZNode.decode(data) == {("a", 0), ("b", 1)}
    with pytest.raises(ZkDataError):
        IsrChangeNotificationSequenceZNode.decode(b'{"version":1,"partitions":[3]}')


def test_cluster_id_golden_bytes() -> None:
    golden = b'{"version":"1","id":"Sfr7YvlkRHSHrmSrwq9mug"}'
    assert ClusterIdZNode.encode("Sfr7YvlkRHSHrmSrwq9mug") == golden
    assert ClusterIdZNode.decode(golden) == "Sfr7YvlkRHSHrmSrwq9mug"
    for bad in (b'{"version":"1"}', b'{"version":"1","id":""}', b'{"id":5}'):
        with pytest.raises(ZkDataError):
            ClusterIdZNode.decode(bad)

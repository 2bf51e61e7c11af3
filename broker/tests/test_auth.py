"""Kafka's ACL authorizer: decisions (pure) and the checks every API makes, over in-memory
connections on a SASL/PLAIN listener (so each client has its own principal)."""

from __future__ import annotations

import pytest
import trio.testing

from strom.broker.auth.acl import AclBinding
from strom.broker.auth.acl import Operation as Op
from strom.broker.auth.acl import PatternType as Pat
from strom.broker.auth.acl import Permission as Perm
from strom.broker.auth.acl import ResourceType as R
from strom.broker.auth.authorizer import AclAuthorizer
from strom.broker.config import BrokerConfig, ConfigError
from strom.broker.server.connection import ConnectionHandler
from strom.broker.server.root import BrokerServer
from strom.protocol.errors import ErrorCode
from strom.protocol.schema import ApiKey

from .helpers import Client
from .test_apis import batch, fetch_body, produce_body

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="a" user_alice="a" user_bob="b";'


def authorizer(*bindings, super_users=(), allow_if_no_acl=False) -> AclAuthorizer:
    a = AclAuthorizer(set(super_users), allow_if_no_acl)
    a.attach(None, list(bindings))
    return a


def acl(rtype, name, op, principal="User:alice", perm=Perm.ALLOW, pattern=Pat.LITERAL, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_decisions_as_kafka():
    a = authorizer(
        acl(R.TOPIC, "orders", Op.READ),
        acl(R.TOPIC, "pay-", Op.WRITE, pattern=Pat.PREFIXED),
        acl(R.TOPIC, "pay-secret", Op.ALL, perm=Perm.DENY),
        acl(R.TOPIC, "*", Op.DESCRIBE, "User:*"),
        acl(R.GROUP, "g", Op.ALL, host="10.0.0.1"),
        super_users={"User:admin"},
    )
    can = lambda p, op, r, n, host="127.0.0.1": a.authorize(p, host, op, r, n)  # noqa: E731
    assert can("User:alice", Op.READ, R.TOPIC, "orders")
    assert not can("User:alice", Op.WRITE, R.TOPIC, "orders")
    assert can("User:alice", Op.DESCRIBE, R.TOPIC, "orders"), "READ implies DESCRIBE"
    assert can("User:alice", Op.WRITE, R.TOPIC, "pay-in"), "prefixed"
    assert not can("User:alice", Op.WRITE, R.TOPIC, "pay-secret"), "deny wins"
    assert not can("User:alice", Op.DESCRIBE, R.TOPIC, "pay-secret"), "deny ALL covers DESCRIBE"
    assert can("User:bob", Op.DESCRIBE, R.TOPIC, "anything"), "wildcard principal and resource"
    assert not can("User:bob", Op.READ, R.TOPIC, "orders")
    assert not can("User:alice", Op.READ, R.GROUP, "g"), "host must match"
    assert can("User:alice", Op.READ, R.GROUP, "g", host="10.0.0.1")
    assert can("User:admin", Op.ALTER, R.CLUSTER, "kafka-cluster"), "super user"
    assert not can("User:alice", Op.READ, R.GROUP, "no-acls")
    assert authorizer(allow_if_no_acl=True).authorize("User:x", "h", Op.READ, R.GROUP, "no-acls")
    assert not authorizer(acl(R.GROUP, "g", Op.READ), allow_if_no_acl=True).authorize(
        "User:x", "h", Op.READ, R.GROUP, "g"
    ), "allow.everyone only where no ACL names the resource"


def test_authorizer_config():
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerServer(BrokerConfig({"authorizer.class.name": "com.example.Custom"}))
    broker = BrokerServer(
        BrokerConfig(
            {
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin;User:broker",
            }
        )
    )
    assert broker.authorizer.super_users == {"User:admin", "User:broker"}


@pytest.fixture
def secured(tmp_path):
    broker = BrokerServer(
        BrokerConfig(
            {
                "log.dirs": str(tmp_path),
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:admin",
                "connection.failed.authentication.delay.ms": "0",
                "group.initial.rebalance.delay.ms": "0",
            }
        )
    )
    broker.open_storage()
    yield broker
    broker.close()


async def login(broker, nursery, user: str) -> Client:
    client_side, server_side = trio.testing.memory_stream_pair()
    nursery.start_soon(ConnectionHandler(broker, broker.security["SASL_PLAINTEXT"]), server_side)
    client = Client(client_side)
    await client.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    password = {"admin": "a", "alice": "a", "bob": "b"}[user]
    done = await client.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
    assert done.error_code == ErrorCode.NONE
    return client


def creation(rtype, name, op, principal="User:alice", perm=Perm.ALLOW, pattern=Pat.LITERAL) -> dict:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission_type": perm,
    }


ANY_FILTER = {
    "resource_type_filter": R.ANY,
    "resource_name_filter": None,
    "pattern_type_filter": Pat.ANY,
    "principal_filter": None,
    "host_filter": None,
    "operation": Op.ANY,
    "permission_type": Perm.ANY,
}


async def test_acl_apis_create_describe_delete_and_need_cluster_rights(secured, nursery):
    admin, alice = await login(secured, nursery, "admin"), await login(secured, nursery, "alice")
    refused = await alice.request(ApiKey.CREATE_ACLS, 3, {"creations": [creation(R.TOPIC, "t", Op.READ)]})
    assert refused.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert (
        await alice.request(ApiKey.DESCRIBE_ACLS, 3, ANY_FILTER)
    ).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    created = await admin.request(
        ApiKey.CREATE_ACLS,
        3,
        {
            "creations": [
                creation(R.TOPIC, "t", Op.READ),
                creation(R.TOPIC, "pre-", Op.WRITE, pattern=Pat.PREFIXED),
                creation(R.CLUSTER, "other-name", Op.ALTER),
                creation(R.TOPIC, "t", Op.READ, principal="alice"),
            ]
        },
    )
    assert [r.error_code for r in created.results] == [0, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    described = await admin.request(ApiKey.DESCRIBE_ACLS, 3, ANY_FILTER)
    assert sorted(
        (r.resource_name, r.pattern_type, [(a.principal, a.operation) for a in r.acls]) for r in described.resources
    ) == [("pre-", Pat.PREFIXED, [("User:alice", Op.WRITE)]), ("t", Pat.LITERAL, [("User:alice", Op.READ)])]
    match = await admin.request(
        ApiKey.DESCRIBE_ACLS,
        3,
        {
            **ANY_FILTER,
            "resource_type_filter": R.TOPIC,
            "resource_name_filter": "pre-x",
            "pattern_type_filter": Pat.MATCH,
        },
    )
    assert [r.resource_name for r in match.resources] == ["pre-"]
    reopened = BrokerServer(secured.config)
    reopened.open_storage()
    assert len(reopened.authorizer.bindings) == 2, "bindings persist in the metadata file"
    reopened.close()
    deleted = await admin.request(ApiKey.DELETE_ACLS, 3, {"filters": [{**ANY_FILTER, "resource_name_filter": "t"}]})
    assert [(m.resource_name, m.operation) for m in deleted.filter_results[0].matching_acls] == [("t", Op.READ)]
    assert [r.resource_name for r in (await admin.request(ApiKey.DESCRIBE_ACLS, 3, ANY_FILTER)).resources] == ["pre-"]


async def test_every_api_answers_its_authorization_error(secured, nursery):
    admin, alice = await login(secured, nursery, "admin"), await login(secured, nursery, "alice")
    for name in ("visible", "hidden"):
        created = await admin.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                ],
                "timeout_ms": 1000,
            },
        )
        assert created.topics[0].error_code == ErrorCode.NONE
    await admin.request(
        ApiKey.CREATE_ACLS,
        3,
        {"creations": [creation(R.TOPIC, "visible", Op.READ), creation(R.GROUP, "mine", Op.READ)]},
    )
    metadata = await alice.request(
        ApiKey.METADATA,
        12,
        {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": True},
    )
    assert [(t.name, t.topic_authorized_operations) for t in metadata.topics] == [
        ("visible", (1 << Op.READ) | (1 << Op.DESCRIBE))
    ], "undescribable topics are hidden"
    asked = await alice.request(
        ApiKey.METADATA,
        12,
        {
            "topics": [{"name": "hidden", "topic_id": bytes(16)}, {"name": "new-one", "topic_id": bytes(16)}],
            "allow_auto_topic_creation": True,
        },
    )
    assert [t.error_code for t in asked.topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
    assert "new-one" not in secured.topics.topics
    produced = await alice.request(ApiKey.PRODUCE, 9, produce_body("visible", batch(1)))
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    txn = await alice.request(ApiKey.PRODUCE, 9, {**produce_body("visible", batch(1)), "transactional_id": "tx"})
    assert txn.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert (await admin.request(ApiKey.PRODUCE, 9, produce_body("visible", batch(3)))).responses[0].partition_responses[
        0
    ].error_code == ErrorCode.NONE
    fetched = await alice.request(ApiKey.FETCH, 12, fetch_body("visible", 0))
    assert (
        fetched.responses[0].partitions[0].error_code == ErrorCode.NONE and fetched.responses[0].partitions[0].records
    )
    assert (await alice.request(ApiKey.FETCH, 12, fetch_body("hidden", 0))).responses[0].partitions[
        0
    ].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    offsets = await alice.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": "hidden", "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}
            ],
        },
    )
    assert offsets.topics[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    create = await alice.request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {"name": "nope", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 1000,
        },
    )
    assert create.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    delete = await alice.request(
        ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "visible", "topic_id": bytes(16)}], "timeout_ms": 1000}
    )
    assert delete.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    coordinator = await alice.request(
        ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["other", "mine"]}
    )
    assert [c.error_code for c in coordinator.coordinators] == [ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.NONE]
    joined = await alice.request(
        ApiKey.JOIN_GROUP,
        9,
        {
            "group_id": "other",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "reason": None,
        },
    )
    assert joined.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    committed = await alice.request(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": "mine",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": n,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
                for n in ("visible", "hidden")
            ],
        },
    )
    assert {t.name: t.partitions[0].error_code for t in committed.topics} == {
        "visible": ErrorCode.NONE,
        "hidden": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
    fetched_offsets = await alice.request(
        ApiKey.OFFSET_FETCH, 7, {"group_id": "other", "topics": None, "require_stable": False}
    )
    assert fetched_offsets.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    groups = await alice.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    assert [g.group_id for g in groups.groups] == ["mine"]
    for v in (5, 6):
        described = await alice.request(
            ApiKey.DESCRIBE_GROUPS, v, {"groups": ["other"], "include_authorized_operations": True}
        )
        # as Kafka: no operations told for a group alice may not describe
        assert (described.groups[0].error_code, described.groups[0].authorized_operations) == (
            ErrorCode.GROUP_AUTHORIZATION_FAILED,
            -2147483648,
        )
    configs = await alice.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": "visible", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    assert [r.error_code for r in configs.results] == [
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ]
    init = await alice.request(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1, "producer_epoch": -1},
    )
    assert init.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, (
        "idempotence needs IDEMPOTENT_WRITE or a WRITE ACL"
    )
    cluster = await alice.request(
        ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1}
    )
    assert cluster.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    full = await admin.request(
        ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1}
    )
    assert full.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12)), "a super user"
    altered = await alice.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "visible",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
                }
            ],
            "validate_only": False,
        },
    )
    assert altered.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    scram = await alice.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    assert scram.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def test_consumer_group_heartbeat_refuses_a_subscription_naming_an_undescribable_topic(secured, nursery):
    # Kafka 4.0 checks DESCRIBE on every subscribed topic name before the coordinator sees the
    # heartbeat; one unauthorized topic fails the whole subscription (librdkafka 0109 in consumer mode).
    admin, alice = await login(secured, nursery, "admin"), await login(secured, nursery, "alice")
    for name in ("visible", "hidden"):
        await admin.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                ],
                "timeout_ms": 1000,
            },
        )
    await admin.request(
        ApiKey.CREATE_ACLS,
        3,
        {"creations": [creation(R.TOPIC, "visible", Op.READ), creation(R.GROUP, "mine", Op.READ)]},
    )

    def join(topics):
        return {
            "group_id": "mine",
            "member_id": "m-1",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": topics,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        }

    for topics in (["visible", "hidden"], ["hidden"], ["visible", "never-created"]):
        refused = await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, join(topics))
        assert (refused.error_code, refused.member_id, refused.member_epoch, refused.assignment) == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            None,
            0,
            None,
        ), topics
    assert "mine" not in [
        g.group_id
        for g in (await admin.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})).groups
    ], "a refused heartbeat creates no group"
    joined = await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, join(["visible"]))
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.NONE, 1)
    assert [t.partitions for t in joined.assignment.topic_partitions] == [[0]]
    other = await alice.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {**join(["visible"]), "group_id": "other"})
    assert other.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED, "the group is checked first"


async def test_transaction_and_replication_apis_check_their_resources(secured, nursery):
    alice = await login(secured, nursery, "alice")
    end = await alice.request(
        ApiKey.END_TXN, 3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "committed": True}
    )
    assert end.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    added = await alice.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": "tx",
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
        },
    )
    assert (
        added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
    offsets = await alice.request(
        ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}
    )
    assert offsets.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    described = await alice.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]})
    assert described.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    markers = await alice.request(
        ApiKey.WRITE_TXN_MARKERS,
        1,
        {
            "markers": [
                {
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "transaction_result": True,
                    "topics": [{"name": "t", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
    )
    assert markers.markers[0].topics[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    dirs = await alice.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert dirs.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    epochs = await alice.request(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        4,
        {
            "replica_id": -1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}],
        },
    )
    assert epochs.topics[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_zookeeper_acl_layout_is_kafkas():
    from strom.broker.auth.zkstore import change_notification, decode_acls, encode_acls, resource_path

    b = acl(R.TOPIC, "pay-", Op.WRITE, pattern=Pat.PREFIXED)
    assert resource_path(R.TOPIC, "orders", Pat.LITERAL) == "/kafka-acl/Topic/orders"
    assert (
        resource_path(R.TRANSACTIONAL_ID, "pay-", Pat.PREFIXED) == "/kafka-acl-extended/prefixed/TransactionalId/pay-"
    )
    assert encode_acls([b]) == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Write","host":"*"}]}'
    )
    assert decode_acls(R.TOPIC, "pay-", Pat.PREFIXED, encode_acls([b])) == [b]
    assert change_notification(R.GROUP, "g", Pat.LITERAL) == ("/kafka-acl-changes/acl_changes_", b"Group:g")
    assert change_notification(R.TOPIC, "pay-", Pat.PREFIXED)[1] == (
        b'{"version":1,"resourceType":"Topic","name":"pay-","patternType":"Prefixed"}'
    )

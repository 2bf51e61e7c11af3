"""Differential: the same ACL and SASL scenario against the reference Kafka 4.0 (KRaft,
StandardAuthorizer, SASL/PLAIN) and against Strom configured the same way. An administrator (a
super user) creates topics and ACLs (a literal READ, a prefixed WRITE, a deny, a group); then
alice's requests, one per API, must get the same error codes from both, and the SASL failures
the same codes and messages."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from compat_tests.support.paths import SHARED_JVM
from strom.protocol.schema import ApiKey
from strom.tools.broker_process import HOST, BrokerProcess
from strom.tools.common import KafkaSocket

KAFKA_HOME = Path(os.environ.get("KAFKA_HOME", SHARED_JVM / "kafka-4.0.0"))
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
SECURITY = {
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
}
pytestmark = pytest.mark.skipif(
    shutil.which("java") is None or not (KAFKA_HOME / "bin").is_dir(), reason="no java or no Kafka 4.0 here"
)


TRANSIENT = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Conn:
    def __init__(self, port: int):
        self.wire = KafkaSocket(socket.create_connection(("127.0.0.1", port), timeout=15), "differential")

    def call(self, api: int, version: int, body: dict):
        try:
            return self.wire.request(api, version, body)
        except (OSError, ValueError):  # closed (or nonsense) instead of an answer
            return "<closed>"

    def call_settled(self, api: int, version: int, body: dict, codes):
        """Resend while ``codes(answer)`` shows a coordinator still loading (Kafka needs a moment
        after start; authorization answers never change)."""
        deadline = time.monotonic() + 20
        while True:
            answer = self.call(api, version, body)
            if not set(codes(answer)) & TRANSIENT or time.monotonic() > deadline:
                return answer
            time.sleep(0.3)

    def login(self, user: str, password: str):
        shake = self.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert shake.error_code == 0, shake
        return self.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})

    def close(self):
        self.wire.sock.close()


def user(port: int, name: str) -> Conn:
    conn = Conn(port)
    done = conn.login(name, {"admin": "admin-secret", "alice": "alice-secret"}[name])
    assert done.error_code == 0, done
    return conn


def acl(rtype, name, op, perm=3, pattern=3, principal="User:alice") -> dict:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission_type": perm,
    }


def scenario(port: int) -> dict:
    out = {}
    admin = user(port, "admin")
    created = admin.call(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
                for n in ("visible", "hidden", "pay-in", "pay-secret")
            ],
            "timeout_ms": 10000,
        },
    )
    assert all(t.error_code == 0 for t in created.topics), created
    acls = admin.call(
        ApiKey.CREATE_ACLS,
        3,
        {
            "creations": [
                acl(2, "visible", 3),
                acl(2, "pay-", 4, pattern=4),
                acl(2, "pay-secret", 4, perm=2),
                acl(3, "mine", 3),
                acl(4, "other-cluster", 7),
                acl(2, "bad-principal", 3, principal="alice"),
            ]
        },
    )
    out["create_acls"] = [r.error_code for r in acls.results]
    time.sleep(1.0)  # Kafka's authorizer applies new ACLs from its metadata log
    alice = user(port, "alice")
    metadata = alice.call(
        ApiKey.METADATA,
        12,
        {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": True},
    )
    out["metadata_all"] = sorted(
        (t.name, t.topic_authorized_operations) for t in metadata.topics if not t.name.startswith("__")
    )
    named = alice.call(
        ApiKey.METADATA,
        12,
        {
            "topics": [{"name": n, "topic_id": bytes(16)} for n in ("hidden", "visible", "never-created")],
            "allow_auto_topic_creation": True,
        },
    )
    out["metadata_named"] = sorted((t.name, t.error_code) for t in named.topics)
    from strom.protocol.records.batch import Record, build_batch

    records = build_batch([Record(0, 0, None, b"v", [])], base_timestamp=1_700_000_000_000)
    for topic in ("visible", "pay-in", "pay-secret", "hidden"):
        produced = alice.call(
            ApiKey.PRODUCE,
            9,
            {
                "acks": 1,
                "timeout_ms": 5000,
                "transactional_id": None,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
            },
        )
        out[f"produce_{topic}"] = produced.responses[0].partition_responses[0].error_code
    for topic in ("visible", "hidden", "pay-in"):
        fetched = alice.call(
            ApiKey.FETCH,
            12,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": 0,
                                "fetch_offset": 0,
                                "partition_max_bytes": 1 << 20,
                                "current_leader_epoch": -1,
                                "log_start_offset": -1,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        out[f"fetch_{topic}"] = fetched.responses[0].partitions[0].error_code
    offsets = alice.call(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}
                for t in ("visible", "hidden")
            ],
        },
    )
    out["list_offsets"] = sorted((t.name, t.partitions[0].error_code) for t in offsets.topics)
    create = alice.call(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {"name": "by-alice", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
            ],
            "timeout_ms": 5000,
        },
    )
    out["create_topics"] = create.topics[0].error_code
    delete = alice.call(
        ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "visible", "topic_id": bytes(16)}], "timeout_ms": 5000}
    )
    out["delete_topics"] = delete.responses[0].error_code
    coordinator = alice.call_settled(
        ApiKey.FIND_COORDINATOR,
        4,
        {"key_type": 0, "coordinator_keys": ["mine", "other"]},
        lambda a: [c.error_code for c in a.coordinators],
    )
    out["find_coordinator"] = sorted((c.key, c.error_code) for c in coordinator.coordinators)
    txn_coordinator = alice.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]})
    out["find_txn_coordinator"] = txn_coordinator.coordinators[0].error_code
    join = alice.call(
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
    out["join_other"] = join.error_code
    commit = alice.call_settled(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": "mine",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 0,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
                for t in ("visible", "hidden")
            ],
        },
        lambda a: [t.partitions[0].error_code for t in a.topics],
    )
    out["offset_commit"] = sorted((t.name, t.partitions[0].error_code) for t in commit.topics)
    fetch_offsets = alice.call(ApiKey.OFFSET_FETCH, 7, {"group_id": "other", "topics": None, "require_stable": False})
    out["offset_fetch_other"] = fetch_offsets.error_code
    groups = alice.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["other"], "include_authorized_operations": False})
    out["describe_groups_other"] = groups.groups[0].error_code
    for v in (5, 6):  # v6 (KIP-1043) as v5 here; the operations asked for a group alice may not describe
        groups = alice.call(
            ApiKey.DESCRIBE_GROUPS, v, {"groups": ["other", "no-such"], "include_authorized_operations": True}
        )
        out[f"describe_groups_v{v}_operations"] = [
            (g.group_id, g.error_code, g.authorized_operations) for g in groups.groups
        ]
    # ConsumerGroupHeartbeat: READ on the group, then DESCRIBE on every subscribed topic name
    for group, topics in (("other", ["visible"]), ("mine", ["visible", "hidden"]), ("mine", ["visible"])):
        heartbeat = alice.call_settled(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            {
                "group_id": group,
                "member_id": "alice-member-" + "-".join(topics),
                "member_epoch": 0,
                "instance_id": None,
                "rack_id": None,
                "rebalance_timeout_ms": 10000,
                "subscribed_topic_names": topics,
                "subscribed_topic_regex": None,
                "server_assignor": None,
                "topic_partitions": [],
            },
            lambda a: [a.error_code],
        )
        out[f"consumer_group_heartbeat_{group}_{'_'.join(topics)}"] = (heartbeat.error_code, heartbeat.member_epoch)
    # a regex subscription: Kafka 4.0 resolves it to every matching topic, those alice may not
    # DESCRIBE too (only subscribed topic names are checked)
    left = alice.call(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": "mine",
            "member_id": "alice-member-visible",
            "member_epoch": -1,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": None,
        },
    )
    out["consumer_group_heartbeat_leave"] = left.error_code
    regex = {
        "group_id": "mine",
        "member_id": "alice-regex",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 10000,
        "subscribed_topic_names": None,
        "subscribed_topic_regex": "visible|hidden|pay-.*",
        "server_assignor": None,
        "topic_partitions": [],
    }
    answer = alice.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, regex)
    owned: list = []
    for _ in range(20):  # Kafka resolves a new regex after answering; the assignment follows
        if answer.assignment is not None:
            owned = [
                {"topic_id": t.topic_id, "partitions": list(t.partitions)} for t in answer.assignment.topic_partitions
            ]
        if sum(len(t["partitions"]) for t in owned) >= 4:
            break
        time.sleep(0.3)
        answer = alice.call(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            {**regex, "member_epoch": answer.member_epoch, "topic_partitions": owned},
        )
    out["consumer_group_heartbeat_regex_partitions"] = (answer.error_code, sum(len(t["partitions"]) for t in owned))
    configs = alice.call(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": "visible", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    out["describe_configs"] = [r.error_code for r in configs.results]
    init = alice.call_settled(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": "tx", "transaction_timeout_ms": 10000, "producer_id": -1, "producer_epoch": -1},
        lambda a: [a.error_code],
    )
    out["init_producer_id_txn"] = init.error_code
    idempotent = alice.call_settled(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout_ms": 10000, "producer_id": -1, "producer_epoch": -1},
        lambda a: [a.error_code],
    )
    out["init_producer_id_idempotent"] = idempotent.error_code
    described = alice.call(
        ApiKey.DESCRIBE_ACLS,
        3,
        {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
    )
    out["describe_acls_alice"] = described.error_code
    by_admin = admin.call(
        ApiKey.DESCRIBE_ACLS,
        3,
        {
            "resource_type_filter": 2,
            "resource_name_filter": "pay-x",
            "pattern_type_filter": 2,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
    )
    out["describe_acls_match"] = sorted((r.resource_name, r.pattern_type, len(r.acls)) for r in by_admin.resources)
    deleted = admin.call(
        ApiKey.DELETE_ACLS,
        3,
        {
            "filters": [
                {
                    "resource_type_filter": 2,
                    "resource_name_filter": "pay-",
                    "pattern_type_filter": 4,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                }
            ]
        },
    )
    out["delete_acls"] = [
        (m.resource_name, m.operation, m.permission_type) for m in deleted.filter_results[0].matching_acls
    ]
    alice.close()
    admin.close()
    wrong = Conn(port)
    failed = wrong.login("alice", "wrong")
    out["sasl_wrong_password"] = (failed.error_code, failed.error_message)
    out["sasl_after_failure"] = wrong.call(ApiKey.API_VERSIONS, 2, {})
    wrong.close()
    unsupported = Conn(port)
    shake = unsupported.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
    out["sasl_unsupported_mechanism"] = (shake.error_code, list(shake.mechanisms))
    unsupported.close()
    early = Conn(port)
    out["request_before_authentication"] = early.call(
        ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}
    )
    early.close()
    return out


def start_kafka(workdir: Path) -> tuple[subprocess.Popen, int]:
    port, controller = free_port(), free_port()
    props = workdir / "server.properties"
    lines = [
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller}",
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "inter.broker.listener.name=SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        f"log.dirs={workdir / 'data'}",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
        *(f"{k}={v}" for k, v in SECURITY.items()),
    ]
    props.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m", "LOG_DIR": str(workdir / "logs")}
    fmt = subprocess.run(
        [
            str(KAFKA_HOME / "bin/kafka-storage.sh"),
            "format",
            "--standalone",
            "-t",
            "diff-security-0000000A",
            "-c",
            str(props),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert fmt.returncode == 0, fmt.stderr
    out = open(workdir / "kafka.out", "wb")
    proc = subprocess.Popen(
        [str(KAFKA_HOME / "bin/kafka-server-start.sh"), str(props)], stdout=out, stderr=subprocess.STDOUT, env=env
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            conn = Conn(port)
            if conn.login("admin", "admin-secret").error_code == 0:
                conn.close()
                return proc, port
        except (OSError, AssertionError):
            pass
        assert proc.poll() is None, (workdir / "kafka.out").read_text()[-3000:]
        time.sleep(0.5)
    proc.terminate()
    raise AssertionError("the reference Kafka did not serve SASL within 90 s")


class SaslBroker(BrokerProcess):
    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index(f"listeners=PLAINTEXT://{HOST}:{self._port}")
        cmd[i] = f"listeners=SASL_PLAINTEXT://{HOST}:{self._port}"
        return cmd


def test_acl_and_sasl_answers_match_kafka(tmp_path):
    kafka_dir = tmp_path / "kafka"
    kafka_dir.mkdir()
    proc, kafka_port = start_kafka(kafka_dir)
    try:
        theirs = scenario(kafka_port)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    strom = SaslBroker(
        tmp_path / "strom",
        {**SECURITY, "node.id": "1", "offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"},
    ).start()
    try:
        ours = scenario(strom.port)
    finally:
        strom.stop()
    differences = {k: (theirs[k], ours.get(k)) for k in theirs if theirs[k] != ours.get(k)}
    assert not differences, "\n".join(f"{k}: kafka={a!r} strom={b!r}" for k, (a, b) in differences.items())

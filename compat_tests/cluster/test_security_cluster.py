"""Three Strom brokers in a ZooKeeper cluster that replicate over a SASL_SSL listener
(SCRAM-SHA-512, the brokers' credentials kept in ZooKeeper under /config/users as Kafka keeps
them), while clients use PLAINTEXT: replication, failover, and the SCRAM user seen by every broker."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from compat_tests.support.cluster import (
    running_cluster,
    wait,
)
from strom.testing.certs import CertificateAuthority
from strom.tools.broker_process import HOST, BrokerProcess

SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";'
)


class ReplicatingOverSaslSsl(BrokerProcess):
    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index(f"listeners=PLAINTEXT://{HOST}:{self._port}")
        cmd[i] = f"listeners=PLAINTEXT://{HOST}:{self._port},SASL_SSL://{HOST}:0"
        return cmd

    def sasl_ssl(self) -> str:
        return next(t.split("://", 1)[1] for t in self.info.listeners if t.startswith("SASL_SSL://"))


def test_replication_and_failover_over_sasl_ssl_between_brokers(zookeeper, tmp_path):
    ca = CertificateAuthority()
    ca_pem = ca.write_pem(tmp_path / "ca.pem")
    server_pem = ca.issue("broker", hosts=["127.0.0.1", "localhost"]).write_pem(tmp_path / "broker.pem")
    with running_cluster(
        zookeeper,
        tmp_path,
        "/strom-sasl-ssl",
        {
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(server_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca_pem),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:broker;User:ANONYMOUS",
        },
        broker_class=ReplicatingOverSaslSsl,
    ) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # the brokers' own SCRAM user, written to ZooKeeper through one broker, read by all
        for future in admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"broker-secret"
                )
            ]
        ).values():
            future.result(30)
        admin.create_topics([NewTopic("secure-repl", 1, 3)])["secure-repl"].result(30)

        def meta():
            return admin.list_topics("secure-repl", timeout=10).topics["secure-repl"].partitions[0]

        wait(lambda: sorted(meta().isrs) == [0, 1, 2], 60, "followers to join the ISR over SASL_SSL")
        # acks=all with the whole ISR: acknowledged only once both followers fetched the records, which
        # they do through the SASL_SSL listener (with a wrong broker password this flush fails)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(200):
            producer.produce("secure-repl", b"%05d" % i, partition=0)
        assert producer.flush(30) == 0
        leader = meta().leader
        brokers[leader].kill()
        survivors = [b for b in brokers if b.running]
        admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in survivors)})
        wait(lambda: meta().leader not in (-1, leader), 30, "a new leader")
        producer = Producer({"bootstrap.servers": ",".join(b.bootstrap for b in survivors), "acks": "all"})
        for i in range(200, 300):
            producer.produce("secure-repl", b"%05d" % i, partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": ",".join(b.bootstrap for b in survivors),
                "group.id": "check",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition("secure-repl", 0, 0)])
        values, deadline = [], time.monotonic() + 30
        while len(values) < 300 and time.monotonic() < deadline:
            values.extend(m.value() for m in consumer.consume(300, 1) if not m.error())
        consumer.close()
        assert values == [b"%05d" % i for i in range(300)]
        check_acls_shared_through_zookeeper(zookeeper, survivors, ca_pem)
        logs = "".join(b.log_tail(1 << 20) for b in brokers)
        assert "broker-secret" not in logs


def check_acls_shared_through_zookeeper(zookeeper, brokers, ca_pem) -> None:
    """An ACL created through one broker is stored in Kafka's /kafka-acl layout and enforced by
    every broker (each reloads on the change notification)."""
    import json

    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
    from kazoo.client import KazooClient

    first, last = brokers[0], brokers[-1]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    for future in admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret"
            )
        ]
    ).values():
        future.result(30)
    carol = AdminClient(
        {
            "bootstrap.servers": last.sasl_ssl(),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "carol",
            "sasl.password": "carol-secret",
            "ssl.ca.location": str(ca_pem),
        }
    )
    assert "secure-repl" not in carol.list_topics(timeout=20).topics, "no ACL yet: carol sees nothing"
    binding = AclBinding(
        ResourceType.TOPIC,
        "secure-",
        ResourcePatternType.PREFIXED,
        "User:carol",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding]).values():
        future.result(30)
    wait(
        lambda: "secure-repl" in carol.list_topics(timeout=20).topics,
        20,
        "the other broker to enforce the ACL created through the first",
    )
    zk = KazooClient(hosts=zookeeper.connect_string + "/strom-sasl-ssl")
    zk.start(timeout=20)
    try:
        data, _ = zk.get("/kafka-acl-extended/prefixed/Topic/secure-")
        assert json.loads(data) == {
            "version": 1,
            "acls": [{"principal": "User:carol", "permissionType": "Allow", "operation": "Describe", "host": "*"}],
        }
        assert zk.get_children("/kafka-acl-extended-changes")
        user, _ = zk.get("/config/users/carol")
        assert json.loads(user)["config"]["SCRAM-SHA-512"].endswith(",iterations=4096")
    finally:
        zk.stop()

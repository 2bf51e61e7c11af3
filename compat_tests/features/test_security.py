"""Real clients against a Strom broker secured as Kafka is: SSL (with and without client
certificates), SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER
(unsecured JWS), certificates made by the test. SCRAM users are created through the admin APIs
(confluent-kafka's AdminClient and Kafka's own kafka-configs.sh)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from compat_tests.support.paths import KAFKAJS_DIR, SHARED_JVM
from strom.testing.certs import CertificateAuthority
from strom.tools.broker_process import HOST, BrokerProcess

KAFKA_HOME = Path(os.environ.get("KAFKA_HOME", SHARED_JVM / "kafka-4.0.0"))
JAVA_CLIENT = Path(__file__).parent / "java" / "SecureClient.java"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
USERS = {
    "PLAIN": ("alice", "alice-secret"),
    "SCRAM-SHA-256": ("scram256", "s256-secret"),
    "SCRAM-SHA-512": ("scram512", "s512-secret"),
    "OAUTHBEARER": ("bob", ""),
}


class SecureBroker(BrokerProcess):
    """A broker with PLAINTEXT (first: the fixture's port), SSL, SASL_PLAINTEXT and SASL_SSL."""

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index(f"listeners=PLAINTEXT://{HOST}:{self._port}")
        cmd[i] = (
            f"listeners=PLAINTEXT://{HOST}:{self._port},SSL://{HOST}:0,SASL_PLAINTEXT://{HOST}:0,SASL_SSL://{HOST}:0"
        )
        return cmd

    def address(self, listener: str) -> str:
        for text in self.info.listeners:
            if text.startswith(listener + "://"):
                return text.split("://", 1)[1]
        raise KeyError(listener)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    client = ca.issue("alice", ou="eng", client=True)
    (d / "client.key").write_bytes(client.key_pem())
    (d / "client.crt").write_bytes(client.chain_pem())
    return {
        "dir": d,
        "ca": ca.write_pem(d / "ca.pem"),
        "server": server.write_pem(d / "server.pem"),
        "server_p12": server.write_pkcs12(d / "server.p12", "store-pw"),
        "client": client,
        "client_key": d / "client.key",
        "client_crt": d / "client.crt",
    }


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, pki):
    broker = SecureBroker(
        tmp_path_factory.mktemp("secure-broker"),
        {
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki["server_p12"]),
            "ssl.keystore.password": "store-pw",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki["ca"]),
            "ssl.client.auth": "requested",
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": "50",
        },
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "scram256", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"s256-secret"
                ),
                UserScramCredentialUpsertion(
                    "scram512", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"s512-secret"
                ),
            ]
        )
        for future in futures.values():
            future.result(30)
        yield broker
    finally:
        broker.stop()


def confluent_config(
    broker: SecureBroker,
    pki,
    protocol: str,
    mechanism: str | None = None,
    client_cert: bool = False,
    password: str | None = None,
) -> dict:
    conf = {"bootstrap.servers": broker.address(protocol), "security.protocol": protocol}
    if protocol.endswith("SSL"):
        conf["ssl.ca.location"] = str(pki["ca"])
    if client_cert:
        conf.update({"ssl.certificate.location": str(pki["client_crt"]), "ssl.key.location": str(pki["client_key"])})
    if mechanism == "OAUTHBEARER":
        conf.update(
            {
                "sasl.mechanism": mechanism,
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=bob",
            }
        )
    elif mechanism:
        user, secret = USERS[mechanism]
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password or secret})
    return conf


def round_trip(conf: dict, n: int = 5) -> list[bytes]:
    topic = "sec-" + uuid.uuid4().hex[:8]
    producer = Producer({**conf, "linger.ms": 0, "message.timeout.ms": 20000})
    for i in range(n):
        producer.produce(topic, b"value-%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
        return got
    finally:
        consumer.close()


CASES = [("SSL", None, False), ("SSL", None, True)] + [
    (protocol, mechanism, False) for protocol in ("SASL_PLAINTEXT", "SASL_SSL") for mechanism in MECHANISMS
]


@pytest.mark.parametrize(
    "protocol, mechanism, client_cert",
    CASES,
    ids=[f"{p}-{m or ('client-cert' if c else 'server-cert')}" for p, m, c in CASES],
)
def test_confluent_kafka_produces_and_consumes(secure_broker, pki, protocol, mechanism, client_cert):
    got = round_trip(confluent_config(secure_broker, pki, protocol, mechanism, client_cert))
    assert got == [b"value-%d" % i for i in range(5)]


@pytest.mark.parametrize(
    "protocol, mechanism", [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512")]
)
def test_wrong_password_is_an_authentication_error_not_a_hang(secure_broker, pki, protocol, mechanism):
    errors: list = []
    producer = Producer(
        {**confluent_config(secure_broker, pki, protocol, mechanism, password="wrong"), "error_cb": errors.append}
    )
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str()
    assert "wrong" not in secure_broker.log_tail(1 << 20)


def test_kafka_python(secure_broker, pki):
    kafka = pytest.importorskip("kafka")
    topic = "kp-" + uuid.uuid4().hex[:8]
    for protocol, mechanism in [("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512")]:
        conf = {"bootstrap_servers": secure_broker.address(protocol), "security_protocol": protocol}
        if protocol.endswith("SSL"):
            conf.update({"ssl_cafile": str(pki["ca"]), "ssl_check_hostname": True})
        if mechanism:
            user, secret = USERS[mechanism]
            conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": secret})
        producer = kafka.KafkaProducer(**conf)
        producer.send(topic, b"from-" + protocol.encode(), partition=0).get(timeout=30)
        producer.close()
        consumer = kafka.KafkaConsumer(**conf, auto_offset_reset="earliest", consumer_timeout_ms=10000)
        consumer.assign([kafka.TopicPartition(topic, 0)])
        values = [m.value for m in consumer]
        consumer.close()
        assert values[-1] == b"from-" + protocol.encode(), (protocol, values)


def test_aiokafka(secure_broker, pki):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    async def run(protocol, mechanism):
        topic = "aio-" + uuid.uuid4().hex[:8]
        conf = {"bootstrap_servers": secure_broker.address(protocol), "security_protocol": protocol}
        if protocol.endswith("SSL"):
            conf["ssl_context"] = create_ssl_context(cafile=str(pki["ca"]))
        if mechanism:
            user, secret = USERS[mechanism]
            conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": secret})
        producer = aiokafka.AIOKafkaProducer(**conf)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aio", partition=0)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(**conf, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            message = await asyncio.wait_for(consumer.getone(), 20)
            return message.value
        finally:
            await consumer.stop()

    for protocol, mechanism in [("SSL", None), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN")]:
        assert asyncio.run(run(protocol, mechanism)) == b"aio", (protocol, mechanism)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="no kcat")
def test_kcat_over_sasl_ssl_scram(secure_broker, pki):
    topic = "kcat-" + uuid.uuid4().hex[:8]
    user, secret = USERS["SCRAM-SHA-512"]
    args = [
        "-b",
        secure_broker.address("SASL_SSL"),
        "-X",
        "security.protocol=SASL_SSL",
        "-X",
        "sasl.mechanism=SCRAM-SHA-512",
        "-X",
        f"sasl.username={user}",
        "-X",
        f"sasl.password={secret}",
        "-X",
        f"ssl.ca.location={pki['ca']}",
    ]
    produced = subprocess.run(
        ["kcat", "-P", "-t", topic, "-p", "0", *args], input=b"one\ntwo\n", capture_output=True, timeout=60
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        ["kcat", "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", *args], capture_output=True, timeout=60
    )
    assert consumed.stdout.split() == [b"one", b"two"], consumed.stderr


def java_available() -> bool:
    return shutil.which("java") is not None and (KAFKA_HOME / "libs").is_dir()


@pytest.mark.skipif(not java_available(), reason="no java or no Kafka 4.0 jars")
def test_java_client_and_kafka_configs_manage_scram_users(secure_broker, pki, tmp_path):
    """kafka-configs.sh adds a SCRAM user; the Java 4.0 client logs in with it over SASL_SSL with a
    PEM trust store, over SSL with a PEM key store (client certificate), and with an unsecured
    OAUTHBEARER token over SASL_PLAINTEXT."""
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "KAFKA_OPTS": "-Xshare:auto -XX:TieredStopAtLevel=1"}
    added = subprocess.run(
        [
            str(KAFKA_HOME / "bin/kafka-configs.sh"),
            "--bootstrap-server",
            secure_broker.bootstrap,
            "--alter",
            "--add-config",
            "SCRAM-SHA-512=[iterations=4096,password=java-secret]",
            "--entity-type",
            "users",
            "--entity-name",
            "javauser",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert "Completed updating config for user javauser" in added.stdout, added.stdout + added.stderr
    combined = tmp_path / "client-keystore.pem"
    pki["client"].write_pem(combined)
    jaas = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="javauser" password="java-secret";'
    )
    runs = {
        "SASL_SSL": [
            "security.protocol=SASL_SSL",
            "sasl.mechanism=SCRAM-SHA-512",
            f"sasl.jaas.config={jaas}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={pki['ca']}",
        ],
        "SSL": [
            "security.protocol=SSL",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={pki['ca']}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={combined}",
        ],
        "SASL_PLAINTEXT": [
            "security.protocol=SASL_PLAINTEXT",
            "sasl.mechanism=OAUTHBEARER",
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
            'required unsecuredLoginStringClaim_sub="bob";',
        ],
    }
    for listener, configs in runs.items():
        out = subprocess.run(
            [
                "java",
                "-Xshare:auto",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                f"{KAFKA_HOME}/libs/*",
                str(JAVA_CLIENT),
                secure_broker.address(listener),
                "java-" + listener.lower(),
                "5",
                *configs,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert out.stdout.strip().splitlines()[-1:] == ["ok 5"], (listener, out.stdout[-3000:], out.stderr[-3000:])


class AclBroker(BrokerProcess):
    """PLAINTEXT for the administrator (User:ANONYMOUS is a super user) and SASL_PLAINTEXT for users."""

    def command(self) -> list[str]:
        cmd = super().command()
        i = cmd.index(f"listeners=PLAINTEXT://{HOST}:{self._port}")
        cmd[i] = f"listeners=PLAINTEXT://{HOST}:{self._port},SASL_PLAINTEXT://{HOST}:0"
        return cmd

    address = SecureBroker.address


def kafka_acls(bootstrap: str, *args: str) -> str:
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m", "KAFKA_OPTS": "-Xshare:auto -XX:TieredStopAtLevel=1"}
    out = subprocess.run(
        [str(KAFKA_HOME / "bin/kafka-acls.sh"), "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def delivery_errors(conf: dict, topic: str) -> list:
    errors = []
    producer = Producer({**conf, "message.timeout.ms": 10000, "retries": 0})
    producer.produce(topic, b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    return errors


@pytest.mark.skipif(not java_available(), reason="no java or no Kafka 4.0 jars")
def test_kafka_acls_tool_and_what_each_principal_may_do(tmp_path):
    broker = AclBroker(
        tmp_path / "acl-broker",
        {
            "num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        },
    )
    broker.start()
    try:
        from confluent_kafka.admin import NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("orders", "pay-in", "pay-secret")]).values():
            future.result(30)
        admin_producer = Producer({"bootstrap.servers": broker.bootstrap})
        admin_producer.produce("orders", b"order-1", partition=0)
        assert admin_producer.flush(20) == 0

        kafka_acls(
            broker.bootstrap,
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "orders",
            "--group",
            "app",
        )
        kafka_acls(
            broker.bootstrap,
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--topic",
            "pay-",
            "--resource-pattern-type",
            "prefixed",
        )
        kafka_acls(
            broker.bootstrap, "--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", "pay-secret"
        )
        listed = kafka_acls(broker.bootstrap, "--list")
        assert "ResourcePattern(resourceType=TOPIC, name=pay-, patternType=PREFIXED)" in listed
        assert "(principal=User:alice, host=*, operation=WRITE, permissionType=DENY)" in listed
        assert "ResourcePattern(resourceType=GROUP, name=app, patternType=LITERAL)" in listed

        alice = {
            "bootstrap.servers": broker.address("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        assert delivery_errors(alice, "pay-in") == [None], "a prefixed ACL allows pay-in"
        assert [e.code() for e in delivery_errors(alice, "pay-secret")] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        assert [e.code() for e in delivery_errors(alice, "orders")] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

        consumer = Consumer({**alice, "group.id": "app", "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        got, deadline = None, time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got = message.value()
        consumer.close()
        assert got == b"order-1"

        stranger = Consumer({**alice, "group.id": "not-mine", "auto.offset.reset": "earliest"})
        stranger.subscribe(["orders"])
        error, deadline = None, time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            message = stranger.poll(0.5)
            if message is not None and message.error():
                error = message.error()
        stranger.close()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

        admin.create_topics([NewTopic("internal-only", 1, 1)])["internal-only"].result(30)
        topics = AdminClient(alice).list_topics(timeout=10).topics
        # READ and WRITE imply DESCRIBE (a deny of WRITE does not deny DESCRIBE): internal-only is hidden
        assert set(topics) == {"orders", "pay-in", "pay-secret"}, "Metadata lists only what alice may describe"

        kafka_acls(
            broker.bootstrap,
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--topic",
            "pay-",
            "--resource-pattern-type",
            "prefixed",
        )
        assert [e.code() for e in delivery_errors(alice, "pay-in")] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
        assert "pay-" not in kafka_acls(
            broker.bootstrap, "--list", "--topic", "pay-", "--resource-pattern-type", "prefixed"
        )
    finally:
        broker.stop()


@pytest.mark.parametrize("mechanism", ["none", "scram-sha-512"])  # PLAIN, SCRAM-SHA-256 pass too (slow)
def test_kafkajs_over_ssl_and_sasl_ssl(secure_broker, pki, mechanism):
    from compat_tests.support.clients import kafkajs

    if kafkajs.unavailable() is not None:
        pytest.skip(kafkajs.unavailable())
    user, secret = USERS[mechanism.upper()] if mechanism != "none" else ("", "")
    listener = "SSL" if mechanism == "none" else "SASL_SSL"
    script = KAFKAJS_DIR / "security.js"
    done = subprocess.run(
        [
            "node",
            str(script),
            secure_broker.address(listener),
            "js-" + uuid.uuid4().hex[:8],
            str(pki["ca"]),
            mechanism,
            user,
            secret,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"values": ["a", "b", "c"]}

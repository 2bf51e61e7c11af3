"""The connection's security layer: listener config, SASL as a state before dispatch (over trio
memory streams), TLS with certificates made here, over real sockets on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import ssl
import struct

import pytest
import trio
import trio.testing

from strom.broker.config import BrokerConfig, ConfigError
from strom.broker.security.tls import PrincipalMapper, openssl_cipher_name
from strom.broker.server.connection import ConnectionHandler
from strom.broker.server.root import BrokerServer
from strom.protocol.codec import encode_request
from strom.protocol.errors import ErrorCode
from strom.protocol.sasl import scram_client_proof
from strom.protocol.schema import ApiKey
from strom.testing.certs import CertificateAuthority

from .helpers import Client

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


def sasl_props(path, **extra) -> dict:
    return {
        "log.dirs": str(path),
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "0",
        **extra,
    }


@pytest.fixture
def sasl_broker(tmp_path):
    broker = BrokerServer(BrokerConfig(sasl_props(tmp_path)))
    broker.open_storage()
    yield broker
    broker.close()


def open_listener(broker, nursery, name: str) -> Client:
    client_side, server_side = trio.testing.memory_stream_pair()
    nursery.start_soon(ConnectionHandler(broker, broker.security[name]), server_side)
    return Client(client_side)


async def closed(client: Client) -> bool:
    with trio.fail_after(5):
        try:
            await client.receive_frame()
        except EOFError:
            return True
    return False


# ---------------------------------------------------------------------------------------- config
def test_listener_names_and_protocol_map(tmp_path):
    config = BrokerConfig(
        {
            "listeners": "CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
            "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,REPLICATION:PLAINTEXT",
            "advertised.listeners": "REPLICATION://broker1:9093,CLIENT://public:9092",
            "inter.broker.listener.name": "REPLICATION",
        }
    )
    assert [(listener.name, listener.security_protocol) for listener in config.listeners] == [
        ("CLIENT", "SASL_PLAINTEXT"),
        ("REPLICATION", "PLAINTEXT"),
    ]
    assert {a.name: (a.host, a.port) for a in config.advertised} == {
        "CLIENT": ("public", 9092),
        "REPLICATION": ("broker1", 9093),
    }
    assert config.inter_broker_listener == "REPLICATION"
    assert (
        BrokerConfig(
            {
                "listeners": "PLAINTEXT://:0,SSL://:0",
                "security.inter.broker.protocol": "SSL",
                "ssl.keystore.type": "PEM",
            }
        ).inter_broker_listener
        == "SSL"
    )


@pytest.mark.parametrize(
    "props, message",
    [
        ({"listeners": "CLIENT://127.0.0.1:0"}, "add CLIENT:PROTOCOL to listener.security.protocol.map"),
        ({"listener.security.protocol.map": "A:TLS"}, "expected NAME:PROTOCOL"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "may appear once"),
        ({"advertised.listeners": "SSL://h:1"}, "names no listener"),
        ({"inter.broker.listener.name": "NOPE"}, "no such listener"),
        ({"security.inter.broker.protocol": "SSL"}, "has no SSL listener"),
    ],
)
def test_listener_config_errors_name_the_key(props, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(props)


@pytest.mark.parametrize(
    "props, message",
    [
        ({"listeners": "SASL_PLAINTEXT://:0"}, "GSSAPI/Kerberos is not supported"),
        ({"listeners": "SASL_PLAINTEXT://:0", "sasl.enabled.mechanisms": "PLAIN"}, "plain.sasl.jaas.config"),
        (
            {
                "listeners": "SASL_PLAINTEXT://:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": 'PlainLoginModule user_a="secret-pw"',
            },
            "semicolon",
        ),
        ({"listeners": "SSL://:0"}, "TLS needs a key store"),
        ({"listeners": "SSL://:0", "ssl.keystore.location": "/x.jks"}, "keytool -importkeystore"),
        (
            {"listeners": "SSL://:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent.pem"},
            "No such file",
        ),
    ],
)
def test_security_config_errors_stop_the_start_without_showing_secrets(tmp_path, props, message):
    with pytest.raises(ConfigError, match=message) as info:
        BrokerServer(BrokerConfig({"log.dirs": str(tmp_path), **props}))
    assert "secret-pw" not in str(info.value)


def test_principal_mapping_rules_as_kafka():
    mapper = PrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT")
    assert mapper.name("CN=kafka1,OU=ServiceUsers,O=Org") == "kafka1"
    assert mapper.name("CN=Alice,OU=ENG,O=Org") == "alice@eng"
    assert mapper.name("CN=x,O=Org") == "CN=x,O=Org"
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/U").name("CN=bob") == "BOB"
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=only")
    with pytest.raises(ConfigError):
        PrincipalMapper("RULE:nonsense")
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384") == "ECDHE-RSA-AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-ECDSA-CHACHA20-POLY1305"


# ---------------------------------------------------------------------------------------- SASL
async def handshake(client: Client, mechanism: str, version: int = 1):
    return await client.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


async def authenticate(client: Client, token: bytes, version: int = 2):
    return await client.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_plain_authenticates_and_then_serves_requests(sasl_broker, nursery, version):
    client = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    assert (await client.request(ApiKey.API_VERSIONS, 2, {})).error_code == ErrorCode.NONE, "allowed before"
    shake = await handshake(client, "PLAIN")
    assert (shake.error_code, shake.mechanisms) == (
        ErrorCode.NONE,
        ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"],
    )
    done = await authenticate(client, b"\x00alice\x00alice-secret", version)
    assert (done.error_code, done.error_message, done.auth_bytes) == (ErrorCode.NONE, None, b"")
    metadata = await client.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert [b.port for b in metadata.brokers] == [sasl_broker.advertised_for("SASL_PLAINTEXT").port]


@pytest.mark.parametrize("token", [b"\x00alice\x00wrong", b"\x00nobody\x00alice-secret", b"garbage", b"\x00\x00"])
async def test_plain_failure_answers_kafkas_error_and_closes(sasl_broker, nursery, token, caplog):
    client = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    await handshake(client, "PLAIN")
    failed = await authenticate(client, token)
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert failed.error_message in (
        "Authentication failed: Invalid username or password",
        "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN",
    )
    assert await closed(client)
    assert "wrong" not in caplog.text and "alice-secret" not in caplog.text


async def test_failed_authentication_is_delayed(tmp_path, nursery, autojump_clock):
    broker = BrokerServer(BrokerConfig(sasl_props(tmp_path, **{"connection.failed.authentication.delay.ms": "5000"})))
    broker.open_storage()
    try:
        client = open_listener(broker, nursery, "SASL_PLAINTEXT")
        await handshake(client, "PLAIN")
        start = trio.current_time()
        failed = await authenticate(client, b"\x00alice\x00wrong")
        assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert trio.current_time() - start >= 5
    finally:
        broker.close()


@pytest.mark.parametrize(
    "api_key, version, body",
    [
        (ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}),
        (ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00alice-secret"}),
    ],
)
async def test_requests_before_authentication_close_the_connection(sasl_broker, nursery, api_key, version, body):
    client = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    await client.send(api_key, version, body)
    assert await closed(client)


async def test_unsupported_mechanism_lists_the_enabled_ones_and_closes(sasl_broker, nursery):
    client = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    shake = await handshake(client, "GSSAPI")
    assert shake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and "PLAIN" in shake.mechanisms
    assert await closed(client)


async def test_v0_handshake_takes_bare_tokens(sasl_broker, nursery):
    client = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    assert (await handshake(client, "PLAIN", version=0)).error_code == ErrorCode.NONE
    token = b"\x00alice\x00alice-secret"
    await client.stream.send_all(struct.pack(">i", len(token)) + token)
    assert await client.receive_frame() == b"", "an empty bare token answers a PLAIN success"
    assert (await client.request(ApiKey.API_VERSIONS, 2, {})).error_code == ErrorCode.NONE
    bad = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    await handshake(bad, "PLAIN", version=0)
    await bad.stream.send_all(struct.pack(">i", 11) + b"\x00alice\x00bad!")
    assert await closed(bad)


async def scram_login(client: Client, mechanism: str, user: str, password: str):
    await handshake(client, mechanism)
    bare = f"n={user},r=clientnonce"
    first = await authenticate(client, f"n,,{bare}".encode())
    assert first.error_code == ErrorCode.NONE
    attrs = dict(item.split("=", 1) for item in first.auth_bytes.decode().split(","))
    without = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{first.auth_bytes.decode()},{without}".encode()
    proof = scram_client_proof(mechanism, password, base64.b64decode(attrs["s"]), int(attrs["i"]), auth)
    return await authenticate(client, f"{without},p={base64.b64encode(proof).decode()}".encode())


async def test_scram_users_managed_with_the_admin_apis_authenticate(sasl_broker, nursery):
    import hashlib

    admin = open_listener(sasl_broker, nursery, "PLAINTEXT")
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha512", b"carol-pw", salt, 4096)
    altered = await admin.request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        {
            "deletions": [],
            "upsertions": [
                {"name": "carol", "mechanism": 2, "iterations": 4096, "salt": salt, "salted_password": salted},
                {"name": "few", "mechanism": 1, "iterations": 100, "salt": salt, "salted_password": salted},
            ],
        },
    )
    assert [(r.user, r.error_code, r.error_message) for r in altered.results] == [
        ("carol", ErrorCode.NONE, None),
        ("few", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
    ]
    described = await admin.request(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "carol"}, {"name": "few"}]}
    )
    assert [
        (r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in described.results
    ] == [("carol", 0, [(2, 4096)]), ("few", ErrorCode.RESOURCE_NOT_FOUND, [])]
    stored = json.loads((sasl_broker.config.log_dirs[0] / "strom-metadata.json").read_text())["users"]
    assert stored["carol"]["SCRAM-SHA-512"].endswith(",iterations=4096") and "carol-pw" not in json.dumps(stored)

    ok = await scram_login(open_listener(sasl_broker, nursery, "SASL_PLAINTEXT"), "SCRAM-SHA-512", "carol", "carol-pw")
    assert ok.error_code == ErrorCode.NONE and ok.auth_bytes.startswith(b"v=")
    wrong = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    failed = await scram_login(wrong, "SCRAM-SHA-512", "carol", "nope")
    assert (failed.error_code, failed.error_message) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
    )
    assert await closed(wrong)
    other_mechanism = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    assert (await scram_login(other_mechanism, "SCRAM-SHA-256", "carol", "carol-pw")).error_code != ErrorCode.NONE

    deleted = await admin.request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        {"upsertions": [], "deletions": [{"name": "carol", "mechanism": 2}, {"name": "carol2", "mechanism": 1}]},
    )
    assert [r.error_code for r in deleted.results] == [ErrorCode.NONE, ErrorCode.RESOURCE_NOT_FOUND]
    gone = await scram_login(
        open_listener(sasl_broker, nursery, "SASL_PLAINTEXT"), "SCRAM-SHA-512", "carol", "carol-pw"
    )
    assert gone.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def unsecured_token(sub: str, exp: float) -> bytes:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"n,,\x01auth=Bearer {enc({'alg': 'none'})}.{enc({'sub': sub, 'exp': exp})}.\x01\x01".encode()


async def test_oauthbearer_unsecured_token_and_its_error_challenge(sasl_broker, nursery):
    import time

    client = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    await handshake(client, "OAUTHBEARER")
    done = await authenticate(client, unsecured_token("bob", time.time() + 3600))
    assert done.error_code == ErrorCode.NONE and 3_500_000 < done.session_lifetime_ms <= 3_600_000
    expired = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    await handshake(expired, "OAUTHBEARER")
    challenge = await authenticate(expired, unsecured_token("bob", time.time() - 10))
    assert (challenge.error_code, json.loads(challenge.auth_bytes)) == (ErrorCode.NONE, {"status": "invalid_token"})
    failed = await authenticate(expired, b"\x01")
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert await closed(expired)


async def test_reauthentication_within_connections_max_reauth_ms(tmp_path, nursery, autojump_clock):
    broker = BrokerServer(BrokerConfig(sasl_props(tmp_path, **{"connections.max.reauth.ms": "10000"})))
    broker.open_storage()
    try:
        client = open_listener(broker, nursery, "SASL_PLAINTEXT")
        await handshake(client, "PLAIN")
        first = await authenticate(client, b"\x00alice\x00alice-secret")
        assert first.session_lifetime_ms == 10000
        await trio.sleep(8)
        await handshake(client, "PLAIN")
        again = await authenticate(client, b"\x00alice\x00alice-secret")
        assert again.error_code == ErrorCode.NONE and again.session_lifetime_ms == 10000
        await trio.sleep(8)  # 16 s after the first login, 8 after the second: still valid
        assert (await client.request(ApiKey.API_VERSIONS, 2, {})).error_code == ErrorCode.NONE
        await trio.sleep(3)
        await client.send(ApiKey.API_VERSIONS, 2, {})
        assert await closed(client), "a request after the session expired closes the connection"
        other = open_listener(broker, nursery, "SASL_PLAINTEXT")
        await handshake(other, "PLAIN")
        await authenticate(other, b"\x00alice\x00alice-secret")
        await handshake(other, "PLAIN")
        switched = await authenticate(other, b"\x00admin\x00admin-secret")
        assert switched.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, "no change of principal"
    finally:
        broker.close()


# ---------------------------------------------------------------------------------------- TLS
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    client = ca.issue("alice", ou="eng", client=True)
    return {
        "dir": d,
        "ca": ca,
        "server": server,
        "client": client,
        "ca_pem": ca.write_pem(d / "ca.pem"),
        "server_pem": server.write_pem(d / "server.pem"),
        "server_p12": server.write_pkcs12(d / "server.p12", "store-pw"),
        "ca_p12": ca.write_pkcs12(d / "ca.p12", "trust-pw"),
    }


async def serve(props: dict, nursery) -> BrokerServer:
    broker = BrokerServer(BrokerConfig(props))
    await nursery.start(broker.run)
    return broker


def client_context(pki, cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca_pem"]))
    if cert:
        d = pki["dir"]
        (d / "client.crt").write_bytes(pki["client"].chain_pem())
        (d / "client.key").write_bytes(pki["client"].key_pem())
        ctx.load_cert_chain(d / "client.crt", d / "client.key")
    return ctx


async def tls_request(port: int, ctx, api_key=ApiKey.API_VERSIONS, version=2, body=None):
    stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=ctx, https_compatible=False)
    try:
        client = Client(stream)
        return await client.request(api_key, version, body or {})
    finally:
        await stream.aclose()


def tls_port(broker: BrokerServer, name: str = "SSL") -> int:
    return broker.advertised_for(name).port


@pytest.mark.parametrize("store", ["pem-file", "pem-inline", "pkcs12"])
async def test_tls_listener_with_each_key_store_kind(tmp_path, nursery, pki, store):
    props = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"}
    if store == "pem-file":
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["server_pem"])})
    elif store == "pem-inline":
        props.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.key": pki["server"].key_pem("key-pw").decode(),
                "ssl.key.password": "key-pw",
                "ssl.keystore.certificate.chain": pki["server"].chain_pem().decode(),
            }
        )
    else:
        props.update(
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(pki["server_p12"]),
                "ssl.keystore.password": "store-pw",
            }
        )
    async with trio.open_nursery() as inner:
        broker = await serve(props, inner)
        metadata = await tls_request(
            tls_port(broker),
            client_context(pki, False),
            ApiKey.METADATA,
            12,
            {"topics": None, "allow_auto_topic_creation": False},
        )
        assert [b.port for b in metadata.brokers] == [tls_port(broker)], "Metadata names the SSL listener's endpoint"
        inner.cancel_scope.cancel()


async def test_tls_client_auth_required_and_principal_from_the_certificate(tmp_path, pki, caplog):
    from strom.broker import context
    from strom.broker.apis import api_versions

    seen = []
    original = api_versions.handle

    async def recording(broker, request):
        seen.append(context.principal.get())
        return await original(broker, request)

    props = {
        "log.dirs": str(tmp_path),
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki["server_p12"]),
        "ssl.keystore.password": "store-pw",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(pki["ca_p12"]),
        "ssl.truststore.password": "trust-pw",
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT",
    }
    api_versions.handle = recording
    caplog.set_level("INFO", logger="strom.security")
    try:
        async with trio.open_nursery() as nursery:
            broker = await serve(props, nursery)
            ok = await tls_request(tls_port(broker), client_context(pki, True))
            assert ok.error_code == ErrorCode.NONE and seen == ["User:alice@eng"]
            with pytest.raises((trio.BrokenResourceError, EOFError, ssl.SSLError)):
                await tls_request(tls_port(broker), client_context(pki, False))
            assert "TLS handshake failed" in caplog.text
            nursery.cancel_scope.cancel()
    finally:
        api_versions.handle = original


async def test_tls_garbage_and_plaintext_requests_close_only_their_connection(tmp_path, pki):
    props = {
        "log.dirs": str(tmp_path),
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki["server_pem"]),
        "ssl.enabled.protocols": "TLSv1.3",
    }
    async with trio.open_nursery() as nursery:
        broker = await serve(props, nursery)
        port = tls_port(broker)
        for junk in (
            encode_request(ApiKey.API_VERSIONS, 3, 1, "x", {}),
            b"\x16\x03\x01\x00\x05hello",
            bytes(range(256)),
        ):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(junk)
            with trio.fail_after(5):
                try:
                    while await stream.receive_some(4096):
                        pass
                except trio.BrokenResourceError:
                    pass
            await stream.aclose()
        ctx = client_context(pki, False)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((trio.BrokenResourceError, ssl.SSLError)):
            await tls_request(port, ctx)
        assert (await tls_request(port, client_context(pki, False))).error_code == ErrorCode.NONE
        nursery.cancel_scope.cancel()


async def test_fetch_over_tls_sends_the_segment_bytes(tmp_path, pki):
    from .test_apis import batch, fetch_body, produce_body

    props = {
        "log.dirs": str(tmp_path),
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki["server_pem"]),
    }
    async with trio.open_nursery() as nursery:
        broker = await serve(props, nursery)
        stream = await trio.open_ssl_over_tcp_stream(
            "127.0.0.1", tls_port(broker), ssl_context=client_context(pki, False), https_compatible=False
        )
        client = Client(stream)
        records = batch(50)
        await client.request(
            ApiKey.METADATA, 12, {"topics": [{"name": "tls", "topic_id": bytes(16)}], "allow_auto_topic_creation": True}
        )  # creates it, as a client's
        produced = await client.request(ApiKey.PRODUCE, 9, produce_body("tls", records))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        fetched = await client.request(ApiKey.FETCH, 12, fetch_body("tls", 0))
        assert bytes(fetched.responses[0].partitions[0].records)[16:] == records[16:], "all but offset and leader epoch"
        await stream.aclose()
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------------------------- fuzz
async def _outcome(client: Client) -> str:
    """'closed', or 'answered' with the first frame's bytes discarded."""
    with trio.fail_after(5):
        try:
            await client.receive_frame()
        except EOFError:
            return "closed"
    return "answered"


async def test_fuzz_random_bytes_and_mutated_sasl_tokens_never_authenticate(sasl_broker, nursery):
    import random

    rng = random.Random(1414)
    valid_plain = b"\x00alice\x00alice-secret"
    for round_ in range(60):
        client = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
        kind = round_ % 3
        if kind == 0:  # random bytes, framed or not
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            if rng.random() < 0.5:
                junk = struct.pack(">i", len(junk)) + junk
            await client.stream.send_all(junk)
            await client.stream.send_all(
                encode_request(ApiKey.METADATA, 12, 99, "x", {"topics": None, "allow_auto_topic_creation": False})
            )
            with trio.fail_after(5):
                try:
                    while True:
                        frame = await client.receive_frame()
                        assert int.from_bytes(frame[:4], "big") != 99, "Metadata answered without authentication"
                except EOFError:
                    pass
            continue
        mechanism = "PLAIN" if kind == 1 else "SCRAM-SHA-256"
        version = rng.choice([0, 1]) if kind == 1 else 1
        await handshake(client, mechanism, version=version)
        if kind == 1:
            token = bytearray(valid_plain)
            for _ in range(rng.randrange(1, 4)):
                token[rng.randrange(len(token))] = rng.randrange(256)
            if bytes(token) == valid_plain:
                continue
            if version == 0:  # a bare token; a failure closes without an answer
                await client.stream.send_all(struct.pack(">i", len(token)) + bytes(token))
            else:
                response = await authenticate(client, bytes(token))
                assert response.error_code != ErrorCode.NONE
        else:
            await sasl_broker.credentials.alter(
                {
                    ("alice", "SCRAM-SHA-256"): __import__("strom.protocol.sasl", fromlist=["x"]).scram_credential(
                        "SCRAM-SHA-256", "pw"
                    )
                },
                set(),
            )
            first = await authenticate(client, b"n,,n=alice,r=abc")
            attrs = dict(item.split("=", 1) for item in first.auth_bytes.decode().split(","))
            without = f"c=biws,r={attrs['r']}"
            auth = f"n=alice,r=abc,{first.auth_bytes.decode()},{without}".encode()
            proof = bytearray(
                scram_client_proof("SCRAM-SHA-256", "pw", base64.b64decode(attrs["s"]), int(attrs["i"]), auth)
            )
            proof[rng.randrange(len(proof))] ^= 1 << rng.randrange(8)
            final = f"{without},p={base64.b64encode(bytes(proof)).decode()}".encode()
            cut = rng.choice([None, rng.randrange(len(final))])
            response = await authenticate(client, final if cut is None else final[:cut])
            assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert await _outcome(client) == "closed"
    ok = open_listener(sasl_broker, nursery, "SASL_PLAINTEXT")
    await handshake(ok, "PLAIN")
    assert (await authenticate(ok, valid_plain)).error_code == ErrorCode.NONE, "the broker still serves"


async def test_fuzz_mutated_tls_client_hellos_close_only_their_connection(tmp_path, pki):
    import random

    rng = random.Random(7)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello_ctx = client_context(pki, False)
    tls = hello_ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    props = {
        "log.dirs": str(tmp_path),
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki["server_pem"]),
    }
    async with trio.open_nursery() as nursery:
        broker = await serve(props, nursery)
        port = tls_port(broker)
        for _ in range(25):
            mutated = bytearray(hello)
            for _ in range(rng.randrange(1, 6)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            try:
                await stream.send_all(bytes(mutated[: rng.randrange(1, len(mutated) + 1)]))
                await stream.send_eof()
                with trio.fail_after(10):
                    while await stream.receive_some(4096):
                        pass
            except trio.BrokenResourceError:
                pass
            finally:
                await stream.aclose()
        assert (await tls_request(port, client_context(pki, False))).error_code == ErrorCode.NONE
        nursery.cancel_scope.cancel()


def test_inter_broker_security_from_the_listener_config():
    from strom.broker.security.interbroker import inter_broker_security

    base = {
        "zookeeper.connect": "127.0.0.1:2181",
        "listeners": "PLAINTEXT://:0,SASL_PLAINTEXT://:0",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
    }
    with pytest.raises(ConfigError, match="needs username"):
        inter_broker_security(BrokerConfig(base))
    security = inter_broker_security(
        BrokerConfig(
            {
                **base,
                "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                    'org.apache.kafka.common.security.scram.ScramLoginModule required username="b" password="pw";'
                ),
            }
        )
    )
    assert (security.protocol, security.mechanism, security.username, security.password) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "b",
        "pw",
    )
    assert "pw" not in repr(security)
    assert inter_broker_security(BrokerConfig({"listeners": "SASL_PLAINTEXT://:0"})) is None, "standalone"


def test_scram_client_and_server_agree():
    from strom.protocol.sasl import ScramClient, ScramServer, scram_credential

    credential = scram_credential("SCRAM-SHA-512", "pw")
    server = ScramServer("SCRAM-SHA-512", lambda u: credential if u == "b,=x" else None)
    client = ScramClient("SCRAM-SHA-512", "b,=x", "pw")
    client.verify(server.final(client.final(server.first(client.first()))))

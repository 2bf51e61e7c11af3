"""SASL messages, sans-IO: PLAIN, SCRAM (RFC 7677's test vector) and OAUTHBEARER's unsecured JWS."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.sasl import (
    SaslError,
    ScramCredential,
    ScramServer,
    parse_oauthbearer_initial,
    parse_plain,
    scram_client_proof,
    scram_credential,
    validate_unsecured_jws,
)

RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_plain_token_parts():
    assert parse_plain(b"\x00alice\x00secret") == ("", "alice", "secret")
    assert parse_plain(b"admin\x00alice\x00p\xc3\xa4ss") == ("admin", "alice", "päss")
    for bad in (b"alice\x00secret", b"\x00\x00secret", b"\x00alice\x00", b"\xff\x00a\x00b", b"a\x00b\x00c\x00d"):
        with pytest.raises(SaslError):
            parse_plain(bad)


def rfc7677_server() -> ScramServer:
    credential = scram_credential("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)
    return ScramServer(
        "SCRAM-SHA-256",
        lambda user: credential if user == "user" else None,
        nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )


def test_scram_sha_256_matches_rfc_7677_example():
    server = rfc7677_server()
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.user == "user"


def _client_final(server_first: bytes, password: str, mechanism: str, client_first_bare: str) -> bytes:
    attrs = dict(item.split("=", 1) for item in server_first.decode().split(","))
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    proof = scram_client_proof(mechanism, password, base64.b64decode(attrs["s"]), int(attrs["i"]), auth)
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user_fail_only_at_the_proof(mechanism):
    credential = scram_credential(mechanism, "right")
    for user, password in [("alice", "wrong"), ("nobody", "right")]:
        server = ScramServer(mechanism, lambda u: credential if u == "alice" else None)
        bare = f"n={user},r=abcdef"
        first = server.first(f"n,,{bare}".encode())
        assert b",s=" in first and b",i=4096" in first, "unknown users get a salt too: no user enumeration"
        with pytest.raises(SaslError, match="Invalid client credentials"):
            server.final(_client_final(first, password, mechanism, bare))
    server = ScramServer(mechanism, lambda u: credential)
    first = server.first(b"n,,n=alice,r=abcdef")
    assert server.final(_client_final(first, "right", mechanism, "n=alice,r=abcdef")).startswith(b"v=")


def test_scram_rejects_malformed_messages_and_replays():
    for bad in (
        b"",
        b"x",
        b"p=tls-unique,,n=u,r=x",
        b"n,,r=x,n=u",
        b"n,,n=,r=x",
        b"n,,n=u,r=a,b",
        b"\xff",
        b"n,,n=a=b,r=x",
        b"n,,n=u,r=x,tokenauth=true",
    ):
        with pytest.raises(SaslError):
            rfc7677_server().first(bad)
    server = rfc7677_server()
    server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslError, match="nonce"):
        server.final(b"c=biws,r=other,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server = rfc7677_server()
    server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(SaslError, match="Invalid client credentials"):  # nonce accepted, proof is for the other
        server.final(
            b"c=biws,r=rOprNGfwEbeRWgbNEkqOrOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        )
    with pytest.raises(SaslError, match="Unexpected"):
        server.final(b"c=biws,r=x,p=AAAA")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_scram_random_messages_raise_only_sasl_errors(first, final):
    server = rfc7677_server()
    try:
        server.first(first)
        server.final(final)
    except SaslError:
        return
    raise AssertionError("random bytes authenticated")


def test_scram_credential_round_trips_kafka_string_form():
    credential = scram_credential("SCRAM-SHA-512", "pw", 8192)
    text = credential.to_kafka_string()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert ScramCredential.from_kafka_string(text) == credential


def jws(payload: dict[str, Any], alg: str = "none") -> str:
    def enc(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return f"{enc({'alg': alg})}.{enc(payload)}."


def test_oauthbearer_initial_response_and_unsecured_jws():
    token = jws({"sub": "bob", "exp": 2000, "iat": 1000, "scope": "a b"})
    authzid, bearer, ext = parse_oauthbearer_initial(f"n,a=bob,\x01auth=Bearer {token}\x01ext=1\x01\x01".encode())
    assert (authzid, bearer, ext) == ("bob", token, {"ext": "1"})
    checked = validate_unsecured_jws(bearer, 1500_000, required_scope=("a",))
    assert (checked.principal, checked.expires_ms, checked.scope) == ("bob", 2000_000, ("a", "b"))
    with pytest.raises(SaslError, match="expired"):
        validate_unsecured_jws(token, 2000_000)
    with pytest.raises(SaslError, match="future"):
        validate_unsecured_jws(token, 500_000)
    with pytest.raises(SaslError, match="scope"):
        validate_unsecured_jws(token, 1500_000, required_scope=("c",))
    for bad in (
        jws({"sub": "bob", "exp": 2000}, alg="HS256"),
        jws({"exp": 2000}),
        jws({"sub": "bob"}),
        token + "sig",
        "a.b",
        "!!.!!.",
    ):
        with pytest.raises(SaslError):
            validate_unsecured_jws(bad, 1500_000)
    for bad_initial in (
        b"n,,auth=Bearer x\x01\x01",
        b"y,,\x01auth=Bearer x\x01\x01",
        b"n,,\x01auth=Basic x\x01\x01",
        b"\xff",
    ):
        with pytest.raises(SaslError):
            parse_oauthbearer_initial(bad_initial)

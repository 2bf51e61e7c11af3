"""SASL mechanisms' messages, sans-IO: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677)
and OAUTHBEARER (RFC 7628) with Kafka's unsecured JWS tokens.

Nothing here reads a socket, a clock or a credential store: the caller passes the credential
lookup and the current time. Every parse error raises ``SaslError``; ``SaslAuthenticationError``
marks a failure Kafka reports with the mechanism's own message rather than its generic one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _hashlib import HASH  # what hashlib.sha256() returns

__all__ = [
    "SaslError",
    "SaslAuthenticationError",
    "parse_plain",
    "ScramCredential",
    "ScramServer",
    "scram_credential",
    "scram_client_proof",
    "SCRAM_MECHANISMS",
    "SCRAM_MECHANISM_TYPES",
    "parse_oauthbearer_initial",
    "UnsecuredJws",
    "validate_unsecured_jws",
]


class SaslError(Exception):
    """A token that is malformed or does not authenticate."""


class SaslAuthenticationError(SaslError):
    """An authentication failure whose message Kafka passes to the client as it is."""


def _utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(f"{what} is not UTF-8") from None


# --------------------------------------------------------------------------- PLAIN
def parse_plain(token: bytes) -> tuple[str, str, str]:
    """(authorization id, user name, password) of a PLAIN token ``authzid NUL authcid NUL passwd``."""
    parts = _utf8(token, "PLAIN token").split("\x00")
    if len(parts) != 3:
        raise SaslError("Invalid SASL/PLAIN response: expected 3 tokens")
    authzid, user, password = parts
    if not user:
        raise SaslError("Authentication failed: username not specified")
    if not password:
        raise SaslError("Authentication failed: password not specified")
    return authzid, user, password


# --------------------------------------------------------------------------- SCRAM
SCRAM_MECHANISMS = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
# Kafka's ScramMechanism codes in DescribeUserScramCredentials/AlterUserScramCredentials
SCRAM_MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka_string(self) -> str:
        """As Kafka keeps it in ``/config/users/<user>``: ``salt=..,stored_key=..,server_key=..,iterations=N``."""

        def b64(b: bytes) -> str:
            return base64.b64encode(b).decode()

        return (
            f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
            f"iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError, binascii.Error):
            raise ValueError(f"not a SCRAM credential: {text[:20]}...") from None


def _hmac(hash_fn: Callable[..., HASH], key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_fn).digest()


def scram_credential_from_salted(
    mechanism: str, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """Stored and server keys from a salted password (what AlterUserScramCredentials sends)."""
    hash_fn = SCRAM_MECHANISMS[mechanism]
    client_key = _hmac(hash_fn, salted_password, b"Client Key")
    return ScramCredential(
        salt, hash_fn(client_key).digest(), _hmac(hash_fn, salted_password, b"Server Key"), iterations
    )


def scram_credential(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    hash_fn = SCRAM_MECHANISMS[mechanism]
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac(hash_fn().name, password.encode("utf-8"), salt, iterations)
    return scram_credential_from_salted(mechanism, salted, salt, iterations)


def scram_client_proof(mechanism: str, password: str, salt: bytes, iterations: int, auth_message: bytes) -> bytes:
    """The client side of the proof (tests and the inter-broker client use it)."""
    hash_fn = SCRAM_MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(hash_fn().name, password.encode("utf-8"), salt, iterations)
    client_key = _hmac(hash_fn, salted, b"Client Key")
    signature = _hmac(hash_fn, hash_fn(client_key).digest(), auth_message)
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


_SASLNAME = re.compile(r"(?:[^=,]|=2C|=3D)+")
_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")


def _decode_saslname(name: str) -> str:
    if not _SASLNAME.fullmatch(name):
        raise SaslError(f"Invalid username: {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=":
            raise SaslError(f"Invalid SCRAM message: attribute {item[:10]!r}")
        out.append((item[0], item[2:]))
    return out


class ScramServer:
    """One SCRAM exchange: ``first(client-first)`` -> server-first, ``final(client-final)`` ->
    server-final. ``lookup(user)`` returns the user's ScramCredential for this mechanism or None.

    Kafka's extension ``tokenauth`` (delegation tokens) is refused; other extensions are ignored."""

    def __init__(
        self, mechanism: str, lookup: Callable[[str], ScramCredential | None], nonce: Callable[[], str] | None = None
    ):
        self.mechanism = mechanism
        self.hash_fn = SCRAM_MECHANISMS[mechanism]
        self.lookup = lookup
        self._nonce = nonce or (lambda: base64.b64encode(os.urandom(24)).decode().replace(",", "-"))
        self.user: str | None = None
        self._state = "first"

    def first(self, token: bytes) -> bytes:
        if self._state != "first":
            raise SaslError("Unexpected SCRAM message")
        text = _utf8(token, "SCRAM client-first message")
        match = re.fullmatch(r"([ny]|p=[^,]*),(a=[^,]*)?,(.*)", text, re.S)
        if not match:
            raise SaslError("Invalid SCRAM client first message format")
        if match.group(1).startswith("p="):
            raise SaslError("Channel binding is not supported")
        bare = match.group(3)
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise SaslError("Invalid SCRAM client first message format")
        user = _decode_saslname(attrs[0][1])
        client_nonce = attrs[1][1]
        if not _PRINTABLE_NONCE.fullmatch(client_nonce):
            raise SaslError("Invalid SCRAM client nonce")
        if "tokenauth=true" in bare:
            raise SaslError("Delegation tokens are not supported")
        self.user = user
        self._credential = self.lookup(user)
        # Kafka fails an unknown user only after the client's proof; answer with a fake salt so
        # the exchange reveals nothing about which users exist.
        if self._credential is None:
            fake = hashlib.sha256(b"strom-unknown-user\x00" + user.encode()).digest()[:16]
            self._salt, self._iterations = fake, MIN_ITERATIONS
        else:
            self._salt, self._iterations = self._credential.salt, self._credential.iterations
        self._nonce_full = client_nonce + self._nonce()
        self._client_first_bare = bare
        self._server_first = f"r={self._nonce_full},s={base64.b64encode(self._salt).decode()},i={self._iterations}"
        self._state = "final"
        return self._server_first.encode()

    def final(self, token: bytes) -> bytes:
        if self._state != "final":
            raise SaslError("Unexpected SCRAM message")
        self._state = "done"
        text = _utf8(token, "SCRAM client-final message")
        head, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise SaslError("Invalid SCRAM client final message format")
        attrs = _attributes(head)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise SaslError("Invalid SCRAM client final message format")
        # Kafka checks that the nonce *ends with* the one it sent (older librdkafka, kcat's among
        # them, sends the client nonce twice), and so do we
        if not attrs[1][1].endswith(self._nonce_full):
            raise SaslError("Invalid client nonce in the final client message.")
        try:
            binding = base64.b64decode(attrs[0][1], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error:
            raise SaslError("Invalid SCRAM client final message: bad base64") from None
        if not binding.startswith((b"n,", b"y,")):
            raise SaslError("Invalid channel binding")
        auth_message = f"{self._client_first_bare},{self._server_first},{head}".encode()
        credential = self._credential
        if credential is None or len(proof) != self.hash_fn().digest_size:
            raise SaslError("Invalid client credentials")
        signature = _hmac(self.hash_fn, credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self.hash_fn(client_key).digest(), credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = _hmac(self.hash_fn, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


# --------------------------------------------------------------------------- OAUTHBEARER
def parse_oauthbearer_initial(token: bytes) -> tuple[str, str, dict[str, str]]:
    """(authorization id, bearer token, extensions) of an RFC 7628 client initial response:
    ``n,[a=authzid],\\x01auth=Bearer <token>\\x01[key=value\\x01]*\\x01``."""
    text = _utf8(token, "OAUTHBEARER client response")
    match = re.fullmatch(r"n,(?:a=([^,]*))?,\x01(.*)\x01\x01", text, re.S)
    if not match:
        raise SaslError("Invalid OAUTHBEARER client first message")
    pairs = {}
    for item in match.group(2).split("\x01"):
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z]+", key):
            raise SaslError("Invalid OAUTHBEARER client first message: bad key/value pair")
        pairs[key] = value
    auth = pairs.pop("auth", "")
    if not auth.lower().startswith("bearer "):
        raise SaslError("Invalid OAUTHBEARER client first message: no bearer token")
    return match.group(1) or "", auth[7:].strip(), pairs


@dataclass(frozen=True)
class UnsecuredJws:
    principal: str
    expires_ms: int
    scope: tuple[str, ...]


def _b64url_json(part: str, what: str) -> dict[str, Any]:
    try:
        data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(data)
    except (binascii.Error, ValueError):
        raise SaslError(f"invalid_token: the {what} is not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise SaslError(f"invalid_token: the {what} is not a JSON object")
    return value


def validate_unsecured_jws(
    token: str,
    now_ms: int,
    *,
    principal_claim: str = "sub",
    scope_claim: str = "scope",
    required_scope: tuple[str, ...] = (),
    clock_skew_ms: int = 0,
) -> UnsecuredJws:
    """Kafka's ``OAuthBearerUnsecuredJws`` checks: ``header.payload.`` with ``alg: none``, a string
    principal claim, a numeric ``exp`` in the future, ``iat`` not in the future, required scopes."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise SaslError("invalid_token: an unsecured JWS has three dot-separated parts, the last empty")
    header, payload = _b64url_json(parts[0], "header"), _b64url_json(parts[1], "payload")
    if header.get("alg") != "none":
        raise SaslError("invalid_token: the unsecured JWS header's alg must be none")
    principal = payload.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise SaslError(f"invalid_token: no principal claim {principal_claim!r}")
    exp = payload.get("exp")
    if not isinstance(exp, (int, float)) or isinstance(exp, bool):
        raise SaslError("invalid_token: no numeric exp claim")
    expires_ms = int(exp * 1000)
    if now_ms >= expires_ms + clock_skew_ms:
        raise SaslError("invalid_token: the token has expired")
    iat = payload.get("iat")
    if iat is not None:
        if not isinstance(iat, (int, float)) or isinstance(iat, bool):
            raise SaslError("invalid_token: iat is not a number")
        if int(iat * 1000) > now_ms + clock_skew_ms:
            raise SaslError("invalid_token: the token was issued in the future")
    raw_scope = payload.get(scope_claim, [])
    scope = (
        tuple(raw_scope.split())
        if isinstance(raw_scope, str)
        else tuple(str(s) for s in raw_scope)
        if isinstance(raw_scope, list)
        else ()
    )
    missing = [s for s in required_scope if s not in scope]
    if missing:
        raise SaslError(f"insufficient_scope: missing {' '.join(missing)}")
    return UnsecuredJws(principal, expires_ms, scope)


class ScramClient:
    """The client side of SCRAM (a broker connecting to another broker): ``first()`` ->
    client-first, ``final(server-first)`` -> client-final, ``verify(server-final)``."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None):
        self.mechanism, self.user, self.password = mechanism, user, password
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self._bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _utf8(server_first, "SCRAM server-first message")
        attrs = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        if "e" in attrs:
            raise SaslAuthenticationError(f"SCRAM server error: {attrs['e']}")
        try:
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (KeyError, ValueError, binascii.Error):
            raise SaslError("Invalid SCRAM server first message") from None
        if not nonce.startswith(self.nonce) or not MIN_ITERATIONS <= iterations <= 10 * MAX_ITERATIONS:
            raise SaslError("Invalid SCRAM server first message: nonce or iterations")
        without_proof = f"c=biws,r={nonce}"
        self._auth = f"{self._bare},{text},{without_proof}".encode()
        self._salted = hashlib.pbkdf2_hmac(
            SCRAM_MECHANISMS[self.mechanism]().name, self.password.encode(), salt, iterations
        )
        hash_fn = SCRAM_MECHANISMS[self.mechanism]
        client_key = _hmac(hash_fn, self._salted, b"Client Key")
        signature = _hmac(hash_fn, hash_fn(client_key).digest(), self._auth)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        hash_fn = SCRAM_MECHANISMS[self.mechanism]
        expected = _hmac(hash_fn, _hmac(hash_fn, self._salted, b"Server Key"), self._auth)
        if server_final != b"v=" + base64.b64encode(expected):
            raise SaslError("the server's SCRAM signature does not match: not the broker we trust")

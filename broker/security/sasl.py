"""SASL as a state of the connection, before any request is dispatched (Kafka's
``SaslServerAuthenticator``).

A connection on a SASL listener starts unauthenticated. It may send ApiVersions (answered as
usual) and SaslHandshake; after a v1 handshake it sends SaslAuthenticate requests, after a v0
handshake bare tokens framed only by a 4-byte size (the clients of Kafka 0.10). Anything else
before authentication closes the connection, as Kafka does. A failed authentication is answered
with SASL_AUTHENTICATION_FAILED and Kafka's message after ``connection.failed.authentication.delay.ms``
and the connection closes. With ``connections.max.reauth.ms`` the session has a lifetime
(KIP-368): the client re-authenticates with a new handshake; a request after expiry closes it.

Passwords and tokens are never logged; a log line names the peer, the mechanism and the user.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import trio

from strom.protocol.errors import ErrorCode
from strom.protocol.sasl import (
    SCRAM_MECHANISMS,
    SaslAuthenticationError,
    SaslError,
    ScramServer,
    parse_oauthbearer_initial,
    parse_plain,
    validate_unsecured_jws,
)
from strom.protocol.schema import ApiKey

from . import SaslSettings

log = logging.getLogger("strom.security")

HANDSHAKE, AUTHENTICATE, AUTHENTICATED, FAILED = "handshake", "authenticate", "authenticated", "failed"


@dataclass
class Outcome:
    """What the connection does with one request: answer ``body`` (None: nothing), send
    ``raw`` (a v0 token, size-prefixed), wait ``delay_s`` first, then ``close`` or go on; a request
    with ``dispatch`` set is handed to the API handlers as usual (ApiVersions)."""

    body: dict | None = None
    raw: bytes | None = None
    close: bool = False
    delay_s: float = 0.0
    dispatch: bool = False


def _failure_message(mechanism: str, reauth: bool) -> str:
    what = "re-authentication" if reauth else "authentication"
    return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


class SaslSession:
    def __init__(self, settings: SaslSettings, credentials, peer: str, clock=trio.current_time, wall=time.time):
        self.settings = settings
        self.credentials = credentials
        self.peer = peer
        self.clock = clock
        self.wall = wall
        self.state = HANDSHAKE
        self.raw_tokens = False  # after a v0 handshake
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expires_at: float | None = None  # monotonic seconds
        self.reauthenticating = False
        self._scram: ScramServer | None = None
        self._oauth_failed = False

    @property
    def authenticated(self) -> bool:
        return self.state == AUTHENTICATED

    def expired(self) -> bool:
        return self.expires_at is not None and self.clock() >= self.expires_at

    def may_reauthenticate(self) -> bool:
        return self.settings.max_reauth_ms > 0

    # ------------------------------------------------------------------ requests
    async def on_request(self, request) -> Outcome:
        key, version = request.header.api_key, request.header.api_version
        if self.state == AUTHENTICATED:  # a SaslHandshake starting re-authentication (KIP-368)
            self.reauthenticating = True
            self.state = HANDSHAKE
        if key == ApiKey.API_VERSIONS and self.state == HANDSHAKE and not self.reauthenticating:
            return Outcome(dispatch=True)
        if key == ApiKey.SASL_HANDSHAKE and self.state == HANDSHAKE:
            return self._handshake(request.body.mechanism, version)
        if key == ApiKey.SASL_AUTHENTICATE and self.state == AUTHENTICATE and not self.raw_tokens:
            return await self._authenticate(request.body.auth_bytes, version)
        log.warning(
            "closing connection peer=%s: api_key=%d before SASL authentication completed (state %s)",
            self.peer,
            key,
            self.state,
        )
        return Outcome(close=True)

    async def on_raw_token(self, token: bytes) -> Outcome:
        """A v0 token (no request header)."""
        outcome = await self._authenticate(token, None)
        return outcome

    def _handshake(self, mechanism: str, version: int) -> Outcome:
        enabled = self.settings.mechanisms
        if mechanism not in enabled or (self.reauthenticating and mechanism != self.mechanism):
            log.warning(
                "closing connection peer=%s: SASL mechanism %r is not enabled (enabled: %s)",
                self.peer,
                mechanism[:40],
                ",".join(enabled),
            )
            self.state = FAILED
            return Outcome({"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled}, close=True)
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self.state = AUTHENTICATE
        self._scram = None
        self._oauth_failed = False
        return Outcome({"error_code": ErrorCode.NONE, "mechanisms": enabled})

    async def _authenticate(self, token: bytes, version: int | None) -> Outcome:
        mechanism = self.mechanism
        try:
            reply, principal, lifetime_ms = await self._step(token)
        except SaslAuthenticationError as exc:
            return self._fail(str(exc), version)
        except SaslError as exc:
            log.info("SASL %s exchange failed peer=%s: %s", mechanism, self.peer, exc)
            return self._fail(_failure_message(mechanism, self.reauthenticating), version)
        if principal is None:  # more rounds to go
            return self._reply(reply, version, 0)
        if self.reauthenticating and principal != self.principal:
            log.warning(
                "closing connection peer=%s: re-authenticated as %s, not %s", self.peer, principal, self.principal
            )
            return self._fail("Cannot change principals during re-authentication", version)
        session_ms = self.settings.max_reauth_ms
        if lifetime_ms is not None:
            session_ms = min(session_ms, lifetime_ms) if session_ms else lifetime_ms
        if version is not None and version < 1:
            session_ms = 0  # v0 clients cannot re-authenticate (Kafka only limits SaslAuthenticate v1+)
        self.expires_at = self.clock() + session_ms / 1000 if session_ms else None
        self.principal = principal
        self.state = AUTHENTICATED
        log.debug(
            "%s peer=%s principal=%s mechanism=%s",
            "re-authenticated" if self.reauthenticating else "authenticated",
            self.peer,
            principal,
            mechanism,
        )
        self.reauthenticating = False
        return self._reply(reply, version, session_ms)

    def _reply(self, reply: bytes, version: int | None, session_ms: int) -> Outcome:
        if version is None:
            return Outcome(raw=reply)
        return Outcome(
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "auth_bytes": reply,
                "session_lifetime_ms": session_ms,
            }
        )

    def _fail(self, message: str, version: int | None) -> Outcome:
        self.state = FAILED
        log.info("authentication failed peer=%s mechanism=%s: %s", self.peer, self.mechanism, message)
        delay = self.settings.failed_delay_s
        if version is None:
            return Outcome(close=True, delay_s=delay)
        return Outcome(
            {
                "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                "error_message": message,
                "auth_bytes": b"",
                "session_lifetime_ms": 0,
            },
            close=True,
            delay_s=delay,
        )

    # ------------------------------------------------------------------ mechanisms
    async def _step(self, token: bytes) -> tuple[bytes, str | None, int | None]:
        """(reply, principal when done else None, token lifetime in ms or None)."""
        mechanism = self.mechanism
        if mechanism == "PLAIN":
            authzid, user, password = parse_plain(token)
            expected = self.settings.plain_users.get(user)
            if expected is None or not _equal(expected, password):
                raise SaslAuthenticationError("Authentication failed: Invalid username or password")
            if authzid and authzid != user:
                raise SaslAuthenticationError(
                    "Authentication failed: Client requested an authorization id that is different from username"
                )
            return b"", "User:" + user, None
        if mechanism in SCRAM_MECHANISMS:
            if self._scram is None:
                user = _scram_user(token)
                credential = await self.credentials.scram(user, mechanism) if user else None
                self._scram = ScramServer(mechanism, lambda _u: credential)
                return self._scram.first(token), None, None
            reply = self._scram.final(token)
            return reply, "User:" + self._scram.user, None
        if mechanism == "OAUTHBEARER":
            return self._oauthbearer(token)
        raise SaslError(f"mechanism {mechanism} is not supported")

    def _oauthbearer(self, token: bytes) -> tuple[bytes, str | None, int | None]:
        if self._oauth_failed:
            # the client's answer (a single 0x01) to our error challenge: now fail (RFC 7628 3.2.3)
            raise SaslAuthenticationError("Authentication failed: " + self._oauth_error)
        _, bearer, _ = parse_oauthbearer_initial(token)
        options = self.settings.oauth_options
        try:
            scope = tuple(options.get("unsecuredValidatorRequiredScope", "").replace(",", " ").split())
            jws = validate_unsecured_jws(
                bearer,
                int(self.wall() * 1000),
                principal_claim=options.get("unsecuredValidatorPrincipalClaimName", "sub"),
                scope_claim=options.get("unsecuredValidatorScopeClaimName", "scope"),
                required_scope=scope,
                clock_skew_ms=int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0) * 1,
            )
        except SaslError as exc:
            status = str(exc).split(":", 1)[0]
            self._oauth_failed = True
            self._oauth_error = str(exc)
            log.info("OAUTHBEARER token refused peer=%s: %s", self.peer, exc)
            return f'{{"status":"{status}"}}'.encode(), None, None
        lifetime = max(jws.expires_ms - int(self.wall() * 1000), 1)
        return b"", "User:" + jws.principal, lifetime


def _equal(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _scram_user(token: bytes) -> str | None:
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for item in text.split(",")[2:3]:
        if item.startswith("n="):
            return item[2:].replace("=2C", ",").replace("=3D", "=")
    return None

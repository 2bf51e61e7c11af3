"""The security layer of one connection: the TLS handshake (SSL, SASL_SSL) and the SASL session
(SASL_PLAINTEXT, SASL_SSL) that answers requests until the client has authenticated.

``ConnectionHandler`` asks ``intercepts(event)`` for every event; what the session takes is
answered here, everything else is dispatched to the API handlers as usual."""

from __future__ import annotations

import logging
import ssl

import trio

from strom.protocol.connection import Connection, RawFrame, Request
from strom.protocol.schema import ApiKey

from .. import context
from . import ANONYMOUS, ListenerSecurity
from .sasl import AUTHENTICATE, SaslSession
from .tls import certificate_principal

log = logging.getLogger("strom.security")

TLS_HANDSHAKE_TIMEOUT_S = 10.0
SASL_MAX_RECEIVE_SIZE = 524288  # Kafka's sasl.server.max.receive.size
DISPATCH = "dispatch"


class SecureConnection:
    def __init__(self, security: ListenerSecurity, broker, peer: str, conn: Connection):
        self.security = security
        self.broker = broker
        self.peer = peer
        self.conn = conn
        self.session: SaslSession | None = None
        if security.sasl is not None:
            self.session = SaslSession(security.sasl, broker.credentials, peer)
            conn.set_max_frame_size(SASL_MAX_RECEIVE_SIZE)

    async def start(self, stream):
        """The stream to serve (TLS-wrapped on SSL listeners), or None when the TLS handshake
        failed (logged; the caller closes the socket)."""
        principal = ANONYMOUS
        if self.security.tls is not None:
            tls_stream = trio.SSLStream(stream, self.security.tls, server_side=True)
            try:
                with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                    await tls_stream.do_handshake()
            except trio.TooSlowError:
                log.warning(
                    "closing connection peer=%s: TLS handshake not completed within %.0f s",
                    self.peer,
                    TLS_HANDSHAKE_TIMEOUT_S,
                )
                return None
            except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError) as exc:
                # INFO as Kafka's "Failed authentication ... (SSL handshake failed)": health checks and
                # port scans do this all day
                log.info(
                    "closing connection peer=%s listener=%s: TLS handshake failed: %s",
                    self.peer,
                    self.security.name,
                    _reason(exc),
                )
                return None
            try:
                principal = certificate_principal(
                    tls_stream.getpeercert(binary_form=True), self.security.principal_mapper
                )
            except ValueError as exc:
                log.warning("closing connection peer=%s: %s", self.peer, exc)
                await _close(tls_stream)
                return None
            stream = tls_stream
        context.principal.set(principal)
        return stream

    def intercepts(self, event) -> bool:
        session = self.session
        if session is None:
            return False
        if isinstance(event, RawFrame):
            return True
        if not isinstance(event, Request):
            return False
        if not session.authenticated or session.expired():
            return True
        return event.header.api_key == ApiKey.SASL_HANDSHAKE and session.may_reauthenticate()

    async def answer(self, event, stream, send) -> bool | str:
        """Answer ``event``; False to close the connection, DISPATCH to hand it to the API handlers."""
        session, conn = self.session, self.conn
        if isinstance(event, RawFrame):
            outcome = await session.on_raw_token(event.data)
        elif session.authenticated and session.expired():
            log.info(
                "closing connection peer=%s principal=%s: the SASL session expired "
                "(connections.max.reauth.ms) without re-authentication",
                self.peer,
                session.principal,
            )
            return False
        else:
            outcome = await session.on_request(event)
        if outcome.dispatch:
            return DISPATCH
        if outcome.delay_s:
            await trio.sleep(outcome.delay_s)
        if outcome.body is not None:
            await send(stream, conn.send_response(event, outcome.body))
        elif outcome.raw is not None:
            await send(stream, conn.send_raw(outcome.raw))
        conn.raw_frames = session.raw_tokens and session.state == AUTHENTICATE
        if session.authenticated:
            context.principal.set(session.principal)
            conn.set_max_frame_size(self.broker.config["socket.request.max.bytes"])
        return not outcome.close


def _reason(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    return getattr(cause, "reason", None) or str(cause) or type(cause).__name__


async def _close(stream) -> None:
    with trio.move_on_after(1):
        await stream.aclose()

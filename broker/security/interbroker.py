"""How this broker connects to the others (replication, transaction markers): over the
listener ``inter.broker.listener.name`` names, with its TLS settings as a client and, on SASL
listeners, ``sasl.mechanism.inter.broker.protocol`` with the ``username``/``password`` of that
listener's JAAS entry (Kafka's PlainLoginModule / ScramLoginModule options)."""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field

import trio

from strom.protocol.connection import CLIENT, NEED_DATA, Connection, ConnectionClosed, Response
from strom.protocol.errors import ErrorCode
from strom.protocol.sasl import SCRAM_MECHANISMS, ScramClient
from strom.protocol.schema import ApiKey

from ..config import BrokerConfig, ConfigError
from .jaas import parse_jaas

log = logging.getLogger("strom.security")


class InterBrokerAuthError(Exception):
    """The other broker refused this broker's credentials (or its TLS certificate)."""


@dataclass
class InterBrokerSecurity:
    listener: str
    protocol: str
    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def inter_broker_security(config: BrokerConfig) -> InterBrokerSecurity | None:
    """None standalone (no other brokers to connect to)."""
    if not config["zookeeper.connect"]:
        return None
    name = config.inter_broker_listener
    protocol = next(listener.security_protocol for listener in config.listeners if listener.name == name)
    out = InterBrokerSecurity(name, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        from .tls import client_context

        out.tls = client_context(config, name)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = config.listener_value(name, "sasl.mechanism.inter.broker.protocol").upper()
        if mechanism != "PLAIN" and mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(
                f"sasl.mechanism.inter.broker.protocol={mechanism}: brokers authenticate to each other "
                f"with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 here"
            )
        key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        raw = config.listener_raw(name, f"{mechanism.lower()}.sasl.jaas.config")
        options = parse_jaas(raw, key)[1] if raw else {}
        if not options.get("username") or "password" not in options:
            raise ConfigError(
                f'{key}: the inter-broker listener {name} needs username="..." password="..." '
                f"(this broker's own credentials) in its login module"
            )
        out.mechanism, out.username, out.password = mechanism, options["username"], options["password"]
    return out


async def secure(stream, host: str, security: InterBrokerSecurity | None, client_id: str):
    """Wrap and authenticate a fresh connection to another broker; return the stream to use."""
    if security is None:
        return stream
    if security.tls is not None:
        stream = trio.SSLStream(stream, security.tls, server_hostname=host)
        try:
            await stream.do_handshake()
        except (trio.BrokenResourceError, ssl.SSLError) as exc:
            raise InterBrokerAuthError(f"TLS handshake with {host} failed: {exc.__cause__ or exc}") from None
    if security.mechanism is not None:
        await _sasl(stream, security, client_id)
    return stream


async def _sasl(stream, security: InterBrokerSecurity, client_id: str) -> None:
    conn = Connection(CLIENT, client_id=client_id, first_correlation_id=0x7FFF0000)

    async def call(api_key: int, version: int, body: dict):
        await stream.send_all(conn.send_request(api_key, version, body))
        while (event := conn.next_event()) is NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        if isinstance(event, ConnectionClosed):
            raise InterBrokerAuthError("the other broker closed the connection during SASL authentication")
        if not isinstance(event, Response):
            raise InterBrokerAuthError(f"unreadable answer during SASL authentication: {event}")
        return event.body

    shake = await call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
    if shake.error_code != ErrorCode.NONE:
        raise InterBrokerAuthError(f"the other broker does not offer {security.mechanism} ({shake.mechanisms})")

    async def step(token: bytes) -> bytes:
        response = await call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if response.error_code != ErrorCode.NONE:
            raise InterBrokerAuthError(f"authentication as {security.username} failed: {response.error_message}")
        return bytes(response.auth_bytes)

    if security.mechanism == "PLAIN":
        await step(f"\x00{security.username}\x00{security.password}".encode())
        return
    scram = ScramClient(security.mechanism, security.username, security.password)
    server_first = await step(scram.first())
    scram.verify(await step(scram.final(server_first)))

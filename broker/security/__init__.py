"""Security of the connection layer: what each listener requires (TLS, SASL) and who a
connection's principal is. Built once per listener when the broker starts; invalid settings raise
``ConfigError`` naming the key (never a secret)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from ..config import BrokerConfig, ConfigError
from .jaas import parse_jaas
from .tls import ANONYMOUS, PrincipalMapper, server_context

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@dataclass
class SaslSettings:
    mechanisms: list[str]
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    oauth_options: dict[str, str] = field(default_factory=dict, repr=False)
    failed_delay_s: float = 0.1
    max_reauth_ms: int = 0


@dataclass
class ListenerSecurity:
    name: str
    protocol: str
    tls: ssl.SSLContext | None = None
    principal_mapper: PrincipalMapper | None = None
    sasl: SaslSettings | None = None


PLAINTEXT = ListenerSecurity("PLAINTEXT", "PLAINTEXT")


def _jaas(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, dict[str, str]] | None:
    key = f"{mechanism.lower()}.sasl.jaas.config"
    raw = config.listener_raw(listener, key)
    if raw is None:
        raw = config.listener_raw(listener, "sasl.jaas.config")
        key = "sasl.jaas.config"
    if raw is None:
        return None
    return parse_jaas(raw, f"listener.name.{listener.lower()}.{key}")


def listener_security(config: BrokerConfig, name: str, protocol: str) -> ListenerSecurity:
    out = ListenerSecurity(name, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        out.tls = server_context(config, name)
        out.principal_mapper = PrincipalMapper(config.listener_value(name, "ssl.principal.mapping.rules") or "DEFAULT")
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        out.sasl = _sasl_settings(config, name)
    return out


def _sasl_settings(config: BrokerConfig, name: str) -> SaslSettings:
    mechanisms = [m.upper() for m in config.listener_value(name, "sasl.enabled.mechanisms")]
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported or not mechanisms:
        raise ConfigError(
            f"sasl.enabled.mechanisms of listener {name}: {','.join(unsupported) or 'none'} "
            f"cannot be offered; choose from {', '.join(SUPPORTED_MECHANISMS)} "
            f"(GSSAPI/Kerberos is not supported)"
        )
    settings = SaslSettings(
        mechanisms,
        failed_delay_s=config["connection.failed.authentication.delay.ms"] / 1000,
        max_reauth_ms=config.listener_value(name, "connections.max.reauth.ms") or 0,
    )
    if "PLAIN" in mechanisms:
        entry = _jaas(config, name, "PLAIN")
        if entry is None or entry[0] != PLAIN_MODULE:
            raise ConfigError(
                f"listener {name} offers PLAIN: set listener.name.{name.lower()}.plain.sasl.jaas.config "
                f"to '{PLAIN_MODULE} required user_<name>=\"<password>\" ...;'"
            )
        settings.plain_users = {k[5:]: v for k, v in entry[1].items() if k.startswith("user_")}
    if "OAUTHBEARER" in mechanisms:
        entry = _jaas(config, name, "OAUTHBEARER")
        if entry is not None:
            if entry[0] != OAUTH_MODULE:
                raise ConfigError(f"listener.name.{name.lower()}.oauthbearer.sasl.jaas.config: expected {OAUTH_MODULE}")
            settings.oauth_options = entry[1]
        handler = config.listener_raw(name, "oauthbearer.sasl.server.callback.handler.class")
        if handler:
            raise ConfigError(
                f"listener {name}: OAUTHBEARER validates Kafka's unsecured JWS tokens only; "
                f"{handler} (a real identity provider's validator) is not supported"
            )
    return settings


__all__ = ["ANONYMOUS", "ListenerSecurity", "SaslSettings", "listener_security", "PLAINTEXT", "SUPPORTED_MECHANISMS"]

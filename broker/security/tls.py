"""TLS for SSL and SASL_SSL listeners: Kafka's ``ssl.*`` settings turned into an ``ssl.SSLContext``,
and the principal of a client certificate.

Key stores: PEM (a file with the private key and certificate chain, or the inline
``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``) and PKCS12 (read with the
``cryptography`` package). Python's ``ssl`` loads keys only from files, so converted material is
written to a private temporary file (mode 0600, encrypted with a one-time password) that is removed
right after loading. JKS stores cannot be read here; the error says how to convert them.
"""

from __future__ import annotations

import os
import re
import secrets
import ssl
import tempfile
from pathlib import Path

from ..config import BrokerConfig, ConfigError

_TLS_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
ANONYMOUS = "User:ANONYMOUS"


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of one listener (``listener.name.<name>.ssl.*`` overrides the broker's)."""
    value = lambda key: config.listener_value(listener, key)  # noqa: E731
    what = f"listener {listener}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(ctx, value("ssl.enabled.protocols"), what)
    _set_ciphers(ctx, value("ssl.cipher.suites"), what)
    _load_keystore(ctx, value, what)
    ctx.verify_mode = _CLIENT_AUTH[value("ssl.client.auth")]
    if ctx.verify_mode != ssl.CERT_NONE:
        if not _load_truststore(ctx, value, what):
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context this broker uses to connect to another broker's ``listener`` (replication)."""
    value = lambda key: config.listener_value(listener, key)  # noqa: E731
    what = f"inter-broker listener {listener}"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(ctx, value("ssl.enabled.protocols"), what)
    _set_ciphers(ctx, value("ssl.cipher.suites"), what)
    if not _load_truststore(ctx, value, what):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = (value("ssl.endpoint.identification.algorithm") or "").lower() == "https"
    if value("ssl.keystore.location") or value("ssl.keystore.certificate.chain"):
        _load_keystore(ctx, value, what)
    return ctx


def _set_versions(ctx: ssl.SSLContext, enabled: list[str], what: str) -> None:
    versions = sorted(_TLS_VERSIONS[v] for v in enabled)
    if not versions:
        raise ConfigError(f"ssl.enabled.protocols of {what}: at least one TLS version is needed")
    try:
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    except (ValueError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.enabled.protocols of {what}: {exc}") from None


def openssl_cipher_name(name: str) -> str:
    """Kafka names cipher suites as IANA does (TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384); OpenSSL as
    ECDHE-RSA-AES256-GCM-SHA384. Names already in OpenSSL's form pass unchanged."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[4:].partition("_WITH_")
    cipher = re.sub(r"^AES_(\d+)_", r"AES\1-", cipher)
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305").replace("_", "-")
    kx = kx.replace("_", "-")
    return f"{kx}-{cipher}" if kx != "RSA" else cipher


def _set_ciphers(ctx: ssl.SSLContext, suites: list[str], what: str) -> None:
    tls12 = [openssl_cipher_name(s) for s in suites if not re.fullmatch(r"TLS_(AES|CHACHA20)_\w+", s)]
    if not tls12:
        return  # only TLS 1.3 suites named: Python's ssl keeps OpenSSL's TLS 1.3 suites
    try:
        ctx.set_ciphers(":".join(tls12))
    except ssl.SSLError:
        raise ConfigError(
            f"ssl.cipher.suites of {what}: none of {','.join(suites)} is a cipher suite this OpenSSL offers"
        ) from None


def _read(path: str, key: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}={path} of {what}: {exc.strerror}") from None


def _password(raw) -> bytes | None:
    return raw.encode() if raw else None


def _load_keystore(ctx: ssl.SSLContext, value, what: str) -> None:
    kind = value("ssl.keystore.type")
    location, chain, key = (
        value("ssl.keystore.location"),
        value("ssl.keystore.certificate.chain"),
        value("ssl.keystore.key"),
    )
    key_password = value("ssl.key.password")
    if chain or key:
        if not (chain and key):
            raise ConfigError(f"{what}: set both ssl.keystore.certificate.chain and ssl.keystore.key")
        if kind != "PEM":
            raise ConfigError(f"{what}: inline key stores need ssl.keystore.type=PEM")
        pem_key, pem_chain = key.encode(), chain.encode()
    elif not location:
        raise ConfigError(
            f"{what}: TLS needs a key store: set ssl.keystore.location (PEM or PKCS12) or "
            f"ssl.keystore.certificate.chain and ssl.keystore.key"
        )
    elif kind == "JKS":
        raise ConfigError(
            f"ssl.keystore.location of {what}: JKS key stores cannot be read here; convert it: "
            f"keytool -importkeystore -srckeystore {location} -destkeystore store.p12 "
            f"-deststoretype PKCS12, and set ssl.keystore.type=PKCS12"
        )
    elif kind == "PKCS12":
        pem_key, pem_chain = _pkcs12_key_and_chain(
            _read(location, "ssl.keystore.location", what), value("ssl.keystore.password"), what
        )
        key_password = None
    else:
        data = _read(location, "ssl.keystore.location", what)
        pem_key, pem_chain = data, data
    _load_pem_pair(ctx, pem_key, pem_chain, key_password, what)


def _pkcs12_key_and_chain(data: bytes, password, what: str) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, _password(password))
    except (ValueError, TypeError):
        raise ConfigError(
            f"ssl.keystore.location of {what}: not a PKCS12 store, or ssl.keystore.password is wrong"
        ) from None
    if key is None or cert is None:
        raise ConfigError(f"ssl.keystore.location of {what}: the PKCS12 store holds no private key entry")
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem_chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
    return pem_key, pem_chain


def _load_pem_pair(ctx: ssl.SSLContext, pem_key: bytes, pem_chain: bytes, key_password, what: str) -> None:
    """Load a key and chain held in memory through private temporary files, removed at once."""
    one_time = None
    if key_password is None and b"ENCRYPTED" not in pem_key:
        # re-encrypt with a one-time password so the key never sits on disk in the clear
        from cryptography.hazmat.primitives import serialization

        try:
            loaded = serialization.load_pem_private_key(pem_key, None)
        except (ValueError, TypeError):
            raise ConfigError(f"{what}: the key store holds no readable PEM private key") from None
        one_time = secrets.token_urlsafe(24)
        pem_key = loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(one_time.encode()),
        )
    with tempfile.TemporaryDirectory(prefix="strom-tls-") as tmp:
        os.chmod(tmp, 0o700)
        key_file, chain_file = Path(tmp, "key.pem"), Path(tmp, "chain.pem")
        key_file.write_bytes(pem_key)
        chain_file.write_bytes(pem_chain)
        try:
            ctx.load_cert_chain(chain_file, key_file, password=one_time or key_password or "")
        except ssl.SSLError as exc:
            raise ConfigError(
                f"{what}: cannot use the key store ({exc.reason or exc}); check the certificate "
                f"chain, the key and ssl.key.password"
            ) from None


def _load_truststore(ctx: ssl.SSLContext, value, what: str) -> bool:
    kind = value("ssl.truststore.type")
    inline, location = value("ssl.truststore.certificates"), value("ssl.truststore.location")
    try:
        if inline:
            ctx.load_verify_locations(cadata=inline)
        elif not location:
            return False
        elif kind == "JKS":
            raise ConfigError(
                f"ssl.truststore.location of {what}: JKS trust stores cannot be read here; convert "
                f"it to PKCS12 with keytool -importkeystore, or give the CA certificates as PEM"
            )
        elif kind == "PKCS12":
            ctx.load_verify_locations(
                cadata=_pkcs12_certificates(
                    _read(location, "ssl.truststore.location", what), value("ssl.truststore.password"), what
                )
            )
        else:
            ctx.load_verify_locations(
                cadata=_read(location, "ssl.truststore.location", what).decode("ascii", "replace")
            )
    except ssl.SSLError as exc:
        raise ConfigError(f"trust store of {what}: no readable CA certificate ({exc.reason or exc})") from None
    return True


def _pkcs12_certificates(data: bytes, password, what: str) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, _password(password))
    except (ValueError, TypeError):
        raise ConfigError(
            f"ssl.truststore.location of {what}: not a PKCS12 store, or ssl.truststore.password is wrong"
        ) from None
    certs = [c for c in [cert, *extra] if c is not None]
    if not certs:
        raise ConfigError(f"ssl.truststore.location of {what}: the PKCS12 store holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


# --------------------------------------------------------------------------- principals
class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: ``RULE:pattern/replacement/[LU]`` entries and
    ``DEFAULT`` (the distinguished name itself), tried in order on the RFC 2253 name."""

    _RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])+)/((?:\\.|[^\\/])*)/([LU]?)(?=\s*(?:,|$)))\s*(?:,|$)")

    def __init__(self, rules: str):
        self.rules: list[tuple[re.Pattern, str, str] | None] = []
        text, pos = rules.strip() or "DEFAULT", 0
        while pos < len(text):
            match = self._RULE.match(text, pos)
            if not match or match.end() == pos:
                raise ConfigError(
                    f"ssl.principal.mapping.rules: cannot read {text[pos:]!r}; expected "
                    f"RULE:pattern/replacement/[LU] or DEFAULT, comma separated"
                )
            pos = match.end()
            if match.group(1):
                self.rules.append(None)
                continue
            try:
                pattern = re.compile(match.group(2).replace("\\/", "/"))
            except re.error as exc:
                raise ConfigError(f"ssl.principal.mapping.rules: bad pattern {match.group(2)!r}: {exc}") from None
            replacement = re.sub(r"\$(\d)", r"\\\1", match.group(3).replace("\\/", "/"))
            self.rules.append((pattern, replacement, match.group(4)))

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            if rule is None:
                return distinguished_name
            pattern, replacement, case = rule
            if pattern.fullmatch(distinguished_name):
                out = pattern.sub(replacement, distinguished_name, count=1)
                return out.lower() if case == "L" else out.upper() if case == "U" else out
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {distinguished_name!r}")


def certificate_principal(der: bytes | None, mapper: PrincipalMapper) -> str:
    """``User:<mapped name>`` of a client certificate; ``User:ANONYMOUS`` without one."""
    if not der:
        return ANONYMOUS
    from cryptography import x509

    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return "User:" + mapper.name(subject)

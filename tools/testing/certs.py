"""Certificates for tests: a throw-away CA and certificates it signs, made with ``cryptography``.

    ca = CertificateAuthority()
    server = ca.issue("localhost", hosts=["localhost", "127.0.0.1"])
    server.write_pem(path)                 # key + chain in one PEM file (ssl.keystore.type=PEM)
    server.write_pkcs12(path, "secret")    # ssl.keystore.type=PKCS12
    ca.write_pem(path)                     # the trust store (ssl.truststore.type=PEM)

Keys are EC P-256 (fast to make); certificates are valid for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str, ou: str | None = None, org: str = "Strom Test") -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _validity(builder):
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=1)
    )


@dataclass
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    chain: list[x509.Certificate]

    def key_pem(self, password: str | None = None) -> bytes:
        encryption = (
            serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        )
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)

    def chain_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [self.cert, *self.chain])

    def write_pem(self, path: Path, password: str | None = None) -> Path:
        path.write_bytes(self.key_pem(password) + self.chain_pem())
        return path

    def write_pkcs12(self, path: Path, password: str) -> Path:
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                b"strom", self.key, self.cert, self.chain, serialization.BestAvailableEncryption(password.encode())
            )
        )
        return path

    @property
    def subject(self) -> str:
        return self.cert.subject.rfc4514_string()


class CertificateAuthority:
    def __init__(self, name: str = "Strom Test CA"):
        self.key = ec.generate_private_key(ec.SECP256R1())
        builder = _validity(
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
        )
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        self.cert = builder.sign(self.key, hashes.SHA256())

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write_pem(self, path: Path) -> Path:
        path.write_bytes(self.pem())
        return path

    def write_pkcs12(self, path: Path, password: str) -> Path:
        """A trust store: the CA certificate alone."""
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                None, None, None, [self.cert], serialization.BestAvailableEncryption(password.encode())
            )
        )
        return path

    def issue(self, cn: str, *, hosts: list[str] = (), ou: str | None = None, client: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _validity(
            x509.CertificateBuilder()
            .subject_name(_name(cn, ou))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
        )
        names = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        usage = (
            [ExtendedKeyUsageOID.CLIENT_AUTH]
            if client
            else [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        return Issued(key, builder.sign(self.key, hashes.SHA256()), [])

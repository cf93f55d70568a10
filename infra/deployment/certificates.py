"""A local certificate authority: a CA and the certificates it signs, written as owner-only PEM files.

The deployment gives every process a certificate signed by its own CA (``make pipeline-up``), and the tests
make theirs the same way (a broker's, a client's, an expired one, one from another CA). Built on the
``cryptography`` package: ECDSA P-256 keys, SHA-256 signatures, subject alternative names for the host names
and addresses a certificate answers to.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "IssuedCertificate"]

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class IssuedCertificate:
    """The files of one certificate: ``cert`` (the certificate then the CA's), ``key`` (its private key) and
    ``bundle`` (both, the PEM "keystore" Kafka's ssl.keystore.location takes)."""

    name: str
    cert: Path
    key: Path
    bundle: Path


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class CertificateAuthority:
    """A CA kept in ``directory`` (``ca.pem``, ``ca-key.pem``): created on first use, loaded afterwards."""

    def __init__(self, directory: Path | str, name: str = "kafka-pipeline local CA") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.cert_path = self.directory / "ca.pem"
        key_path = self.directory / "ca-key.pem"
        if self.cert_path.exists() and key_path.exists():
            self._key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            return
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 3650 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        _write_private(key_path, _key_pem(self._key))
        _write_private(self.cert_path, _cert_pem(self._cert))

    def issue(self, name: str, *, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), days: int = 825,
              expired: bool = False, organization: str | None = None) -> IssuedCertificate:
        """Sign a certificate for ``name`` (its subject's CN; usable as a TLS server and client) valid for the
        DNS names and IP addresses in ``hosts``, and write ``<name>.pem``, ``<name>-key.pem`` and
        ``<name>-bundle.pem``. ``expired`` makes one whose validity ended yesterday (for tests)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
        if organization:
            attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = (now - 30 * _DAY, now - _DAY) if expired else (now - _DAY, now + days * _DAY)
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name(attributes)).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        chain = _cert_pem(cert) + _cert_pem(self._cert)
        issued = IssuedCertificate(name, self.directory / f"{name}.pem", self.directory / f"{name}-key.pem",
                                   self.directory / f"{name}-bundle.pem")
        _write_private(issued.cert, chain)
        _write_private(issued.key, _key_pem(key))
        _write_private(issued.bundle, chain + _key_pem(key))
        return issued

"""TLS for the tests: a certificate authority with the certificates the tests need, brokers with PLAINTEXT and SSL
listeners, and each stock client's TLS settings.

The brokers keep a PLAINTEXT listener on their ``port`` (what BrokerProcess's readiness check and the test
helpers dial) and add an SSL one on ``ssl_port``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from infra.deployment.certificates import CertificateAuthority, IssuedCertificate
from tests.support.ports import free_port

HOSTS = ("localhost", "127.0.0.1")


@dataclass
class TestPki:
    """A CA and what it signs for the tests, and a second CA nobody trusts."""

    __test__ = False  # not a test class, whatever its name

    ca: CertificateAuthority
    broker: IssuedCertificate
    client: IssuedCertificate
    expired_client: IssuedCertificate
    expired_broker: IssuedCertificate
    misnamed_broker: IssuedCertificate
    untrusted_broker: IssuedCertificate
    untrusted_client: IssuedCertificate

    @property
    def ca_file(self) -> str:
        return str(self.ca.cert_path)

    @classmethod
    def create(cls, directory: Path) -> "TestPki":
        ca = CertificateAuthority(directory / "ca")
        other = CertificateAuthority(directory / "other-ca", name="someone else's CA")
        return cls(ca=ca, broker=ca.issue("broker", hosts=HOSTS),
                   client=ca.issue("alice", hosts=(), organization="acme"),
                   expired_client=ca.issue("expired-client", hosts=(), expired=True),
                   expired_broker=ca.issue("expired-broker", hosts=HOSTS, expired=True),
                   misnamed_broker=ca.issue("misnamed-broker", hosts=("broker.elsewhere.example",)),
                   untrusted_broker=other.issue("untrusted-broker", hosts=HOSTS),
                   untrusted_client=other.issue("untrusted-client", hosts=()))


def ssl_listener_overrides(pki: TestPki, port: int, ssl_port: int, *, keystore: IssuedCertificate | None = None,
                           client_auth: str = "none", inter_broker: str = "PLAINTEXT") -> dict[str, object]:
    """Broker settings for a PLAINTEXT listener on ``port`` and an SSL one on ``ssl_port``."""
    return {"listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
            "ssl.keystore.location": str((keystore or pki.broker).bundle),
            "ssl.truststore.location": pki.ca_file, "ssl.client.auth": client_auth,
            "inter.broker.listener.name": inter_broker}


def start_ssl_broker(factory: Any, pki: TestPki, **options: Any) -> Any:
    """A standalone broker from the broker_factory fixture with PLAINTEXT and SSL listeners (``ssl_port`` is set on
    the returned broker; ``ssl_bootstrap`` is its SSL ``host:port``)."""
    port, ssl_port = free_port(), free_port()
    extra: Mapping[str, object] = options.pop("overrides", {})
    broker = factory(overrides={**ssl_listener_overrides(pki, port, ssl_port, **options), **extra}, port=port)
    broker.ssl_port = ssl_port
    broker.ssl_bootstrap = f"127.0.0.1:{ssl_port}"
    return broker


def librdkafka_settings(pki: TestPki, cert: IssuedCertificate | None = None, ca_file: str | None = None) -> dict:
    """kcat's -X and confluent-kafka's configuration for SSL."""
    settings = {"security.protocol": "ssl", "ssl.ca.location": ca_file or pki.ca_file}
    if cert is not None:
        settings.update({"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key)})
    return settings


def kcat_args(settings: Mapping[str, str]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]


def kafka_python_settings(pki: TestPki, cert: IssuedCertificate | None = None, ca_file: str | None = None) -> dict:
    settings: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": ca_file or pki.ca_file,
                                "ssl_check_hostname": True}
    if cert is not None:
        settings.update(ssl_certfile=str(cert.cert), ssl_keyfile=str(cert.key))
    return settings


def aiokafka_settings(pki: TestPki, cert: IssuedCertificate | None = None, ca_file: str | None = None) -> dict:
    from aiokafka.helpers import create_ssl_context

    context = create_ssl_context(cafile=ca_file or pki.ca_file, certfile=str(cert.cert) if cert else None,
                                 keyfile=str(cert.key) if cert else None)
    return {"security_protocol": "SSL", "ssl_context": context}

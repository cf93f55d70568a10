"""The broker's server TLS context from its ssl.* settings, its one-line errors, and the principal of a client
certificate in Kafka's form."""

from __future__ import annotations

import ssl

import pytest
from cryptography.hazmat.primitives import serialization

from broker.security.ssl_factory import SslSettings, certificate_principal, server_context
from infra.deployment.certificates import CertificateAuthority
from pipeline.config import ConfigError


@pytest.fixture(scope="module")
def issued(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(root / "ca")
    broker = ca.issue("broker")
    # The same key encrypted with a password, in a keystore of its own.
    key = serialization.load_pem_private_key(broker.key.read_bytes(), None)
    encrypted = root / "encrypted.pem"
    encrypted.write_bytes(broker.cert.read_bytes() + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret")))
    return {"ca": ca, "broker": broker, "encrypted": encrypted, "alice": ca.issue("alice", organization="acme")}


def test_context_with_client_auth(issued):
    context = server_context(SslSettings(keystore=str(issued["broker"].bundle), truststore=str(issued["ca"].cert_path),
                                         client_auth="required", enabled_protocols=("TLSv1.3",)))
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_3
    assert context.options & ssl.OP_NO_RENEGOTIATION and context.num_tickets == 0
    requested = server_context(SslSettings(keystore=str(issued["broker"].bundle),
                                           truststore=str(issued["ca"].cert_path), client_auth="requested"))
    assert requested.verify_mode == ssl.CERT_OPTIONAL


def test_encrypted_key_needs_its_password(issued):
    server_context(SslSettings(keystore=str(issued["encrypted"]), key_password="s3cret"))
    with pytest.raises(ConfigError, match="cannot load the certificate and key .*wrong ssl.key.password") as error:
        server_context(SslSettings(keystore=str(issued["encrypted"]), key_password="wrong"))
    assert "wrong\n" not in str(error.value) and "s3cret" not in str(error.value)


@pytest.mark.parametrize("settings,words", [
    (SslSettings(), "needs ssl.keystore.location"),
    (SslSettings(keystore="/nonexistent/broker.pem"), "no such file"),
    (SslSettings(keystore="BROKER", client_auth="required"), "needs ssl.truststore.location"),
    (SslSettings(keystore="BROKER", truststore="/nonexistent/ca.pem"), "ssl.truststore.location .*no such file"),
    (SslSettings(keystore="BROKER", cipher_suites="NO-SUCH-CIPHER"), "ssl.cipher.suites"),
])
def test_errors_are_one_line(issued, settings, words):
    if settings.keystore == "BROKER":
        settings = SslSettings(**{**settings.__dict__, "keystore": str(issued["broker"].bundle)})
    with pytest.raises(ConfigError, match=words) as error:
        server_context(settings)
    assert "\n" not in str(error.value)


def test_a_key_file_that_is_not_a_key(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a pem file")
    with pytest.raises(ConfigError, match="cannot load the certificate and key"):
        server_context(SslSettings(keystore=str(bad)))


def test_certificate_principal_is_the_subject_in_rfc2253_form(issued):
    der = ssl.PEM_cert_to_DER_cert(issued["alice"].cert.read_text().split("-----END CERTIFICATE-----")[0]
                                   + "-----END CERTIFICATE-----\n")
    assert str(certificate_principal(der)) == "User:CN=alice,O=acme"
    assert certificate_principal(None) is None
    assert certificate_principal(b"") is None


def test_settings_repr_hides_the_password():
    assert "s3cret" not in repr(SslSettings(keystore="k", key_password="s3cret"))

"""The local certificate authority: certificates a TLS client accepts, and those it refuses."""

from __future__ import annotations

import socket
import ssl
import stat
import threading

import pytest

from infra.deployment.certificates import CertificateAuthority


def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext, host: str) -> None:
    """One TLS handshake over a socket pair; raises what the client raises."""
    left, right = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_context.wrap_socket(right, server_side=True):
                pass
        except (ssl.SSLError, OSError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(left, server_hostname=host):
            pass
    finally:
        left.close()
        thread.join(10)
        right.close()


def _server(issued) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(issued.cert, issued.key)
    return context


def test_a_certificate_is_trusted_for_its_hosts_and_files_are_owner_only(tmp_path):
    ca = CertificateAuthority(tmp_path / "ca")
    broker = ca.issue("broker-1", hosts=("localhost", "127.0.0.1"))
    client = ssl.create_default_context(cafile=str(ca.cert_path))
    _handshake(_server(broker), client, "localhost")
    _handshake(_server(broker), client, "127.0.0.1")
    for path in (ca.cert_path, broker.cert, broker.key, broker.bundle):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The bundle is a PEM keystore: certificate chain and key in one file.
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(broker.bundle)
    # The CA is loaded, not replaced, the second time.
    assert CertificateAuthority(tmp_path / "ca").cert_path.read_bytes() == ca.cert_path.read_bytes()


def test_hostname_mismatch_expired_and_foreign_certificates_are_refused(tmp_path):
    ca = CertificateAuthority(tmp_path / "ca")
    client = ssl.create_default_context(cafile=str(ca.cert_path))
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch|doesn't match"):
        _handshake(_server(ca.issue("other", hosts=("example.org",))), client, "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        _handshake(_server(ca.issue("old", expired=True)), client, "localhost")
    foreign = CertificateAuthority(tmp_path / "elsewhere").issue("broker")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer|self.signed"):
        _handshake(_server(foreign), client, "localhost")

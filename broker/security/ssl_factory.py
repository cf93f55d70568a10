"""The broker's TLS settings made into a server ``ssl.SSLContext`` (Kafka's SslFactory), and the principal of a
client certificate (Kafka's DefaultKafkaPrincipalBuilder).

Key stores and trust stores are PEM files: ``ssl.keystore.location`` holds the certificate chain and the private
key (or give the key's file as ``ssl.key.location``), ``ssl.truststore.location`` the CA bundle client certificates
are checked against. A problem with them is one ConfigError line at start-up, never a stack trace.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cryptography import x509

from pipeline.config import ConfigError, Property, parse_choice, parse_str
from pipeline.security.principal import KafkaPrincipal

__all__ = ["CLIENT_AUTH", "SSL_PROPERTIES", "SslSettings", "server_context", "certificate_principal"]

# ssl.client.auth -> what the server asks of a client certificate.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class SslSettings:
    """The ssl.* broker properties a TLS listener uses."""

    keystore: str = ""
    key_file: str = ""
    key_password: str = ""
    truststore: str = ""
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: str = ""

    def __repr__(self) -> str:
        # Never show the key's password (configurations get logged).
        return (f"SslSettings(keystore={self.keystore!r}, truststore={self.truststore!r}, "
                f"client_auth={self.client_auth}, protocols={','.join(self.enabled_protocols)})")


def parse_protocols(text: str) -> tuple[str, ...]:
    """``ssl.enabled.protocols``: a comma-separated subset of TLSv1.2 and TLSv1.3."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in _VERSIONS]
    if unknown or not names:
        raise ValueError(f"expected TLSv1.2 and/or TLSv1.3, got {text!r}")
    return names


def _protocol(text: str) -> str:
    value = text.strip()
    if value not in (*_VERSIONS, "TLS"):
        raise ValueError(f"expected TLSv1.3, TLSv1.2 or TLS, got {text!r}")
    return value


def _store_type(text: str) -> str:
    if text.strip().upper() != "PEM":
        raise ValueError(f"only PEM files are supported, got {text!r}")
    return "PEM"


SSL_PROPERTIES: tuple[Property, ...] = (
    Property("ssl.keystore.location", parse_str, "",
             "PEM file of the broker's certificate chain and private key, for SSL and SASL_SSL listeners (and its "
             "identity towards other brokers that ask for client certificates)."),
    Property("ssl.keystore.type", _store_type, "PEM", "Format of ssl.keystore.location: PEM."),
    Property("ssl.key.password", parse_str, "", "Password of the keystore's private key, if it is encrypted.",
             aliases=("ssl.keystore.password",)),
    Property("ssl.truststore.location", parse_str, "",
             "PEM bundle of the certificate authorities trusted for client certificates and for other brokers' "
             "certificates (empty: the system's for the latter)."),
    Property("ssl.truststore.type", _store_type, "PEM", "Format of ssl.truststore.location: PEM."),
    Property("ssl.client.auth", parse_choice(*CLIENT_AUTH), "none",
             "Client certificates on TLS listeners: none, requested (checked when sent) or required; a client "
             "certificate's subject is the connection's principal (User:CN=...)."),
    Property("ssl.enabled.protocols", parse_protocols, ("TLSv1.2", "TLSv1.3"),
             "TLS versions the listeners accept: TLSv1.2 and/or TLSv1.3."),
    Property("ssl.protocol", _protocol, "TLSv1.3",
             "Kafka's SSLContext protocol name, accepted for compatibility (the versions are ssl.enabled.protocols)."),
    Property("ssl.cipher.suites", parse_str, "", "OpenSSL cipher list for TLS 1.2 (empty: OpenSSL's defaults)."),
    Property("ssl.endpoint.identification.algorithm", parse_choice("https", ""), "https",
             "https: the inter-broker client checks that a broker's certificate names its advertised host; empty: "
             "it does not."),
)


def server_context(settings: SslSettings) -> ssl.SSLContext:
    """A server context presenting the keystore's certificate and checking client certificates as
    ``ssl.client.auth`` says; ConfigError (one line) if a file is missing, unreadable or the password wrong."""
    if not settings.keystore:
        raise ConfigError("a TLS listener (SSL, SASL_SSL) needs ssl.keystore.location: a PEM file with the broker's "
                          "certificate chain and private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_VERSIONS[name] for name in settings.enabled_protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    # Session tickets would make each connection's first read carry an extra message for nothing: clients of a
    # broker keep their connections. Renegotiation (TLS 1.2) is refused, as Java's TLS does by default: a client
    # asking for it again and again costs the broker a handshake each time.
    context.options |= ssl.OP_NO_TICKET | ssl.OP_NO_RENEGOTIATION
    context.num_tickets = 0
    try:
        context.load_cert_chain(settings.keystore, settings.key_file or None, settings.key_password or None)
    except FileNotFoundError:
        raise ConfigError(f"ssl.keystore.location {settings.keystore}: no such file") from None
    except PermissionError:
        raise ConfigError(f"ssl.keystore.location {settings.keystore}: not readable by this process") from None
    except ssl.SSLError as exc:
        raise ConfigError(f"ssl.keystore.location {settings.keystore}: cannot load the certificate and key "
                          f"({_reason(exc)}; a wrong ssl.key.password, or the key is missing)") from None
    if settings.cipher_suites:
        try:
            context.set_ciphers(settings.cipher_suites)
        except ssl.SSLError:
            raise ConfigError(f"ssl.cipher.suites {settings.cipher_suites!r}: no cipher OpenSSL knows") from None
    mode = CLIENT_AUTH[settings.client_auth]
    if settings.truststore:
        try:
            context.load_verify_locations(settings.truststore)
        except FileNotFoundError:
            raise ConfigError(f"ssl.truststore.location {settings.truststore}: no such file") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl.truststore.location {settings.truststore}: cannot load it ({_reason(exc)})"
                              ) from None
    elif mode != ssl.CERT_NONE:
        raise ConfigError(f"ssl.client.auth={settings.client_auth} needs ssl.truststore.location: the PEM bundle of "
                          "the certificate authorities client certificates are checked against")
    context.verify_mode = mode
    return context


def certificate_principal(der: bytes | None) -> KafkaPrincipal | None:
    """``User:<subject>`` of a client certificate, the subject in RFC 2253 form as Java's X500Principal.getName()
    gives it (``User:CN=alice,O=acme``); None without a certificate."""
    if not der:
        return None
    subject = x509.load_der_x509_certificate(der).subject
    return KafkaPrincipal.user(subject.rfc4514_string())


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)

"""The client's security settings: Kafka's and librdkafka's property names, one table, one value object.

Every client of the project (producer, consumers, AdminClient, the CLI, the mirror, the ETL, the audit, the
emulators) takes the same rows, :data:`SECURITY_PROPERTIES`, in its configuration table, and turns them into a
:class:`ClientSecurity` with :meth:`ClientSecurity.from_values`, which every BrokerConnection it opens is given.
Java's names and librdkafka's are both accepted (``ssl.truststore.location`` or ``ssl.ca.location``,
``sasl.jaas.config`` or ``sasl.username``/``sasl.password``); certificates and keys are PEM files.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Any, Mapping

from pipeline.config import ConfigError, Property, parse_choice, parse_str

__all__ = ["SECURITY_PROTOCOLS", "SASL_MECHANISMS", "SECURITY_PROPERTIES", "ClientSecurity", "PLAINTEXT_SECURITY",
           "security_settings"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _protocol(text: str) -> str:
    value = text.strip().upper()
    if value not in SECURITY_PROTOCOLS:
        raise ValueError(f"expected one of {', '.join(SECURITY_PROTOCOLS)}, got {text!r}")
    return value


def _mechanism(text: str) -> str:
    value = text.strip().upper()
    if value not in SASL_MECHANISMS:
        raise ValueError(f"expected one of {', '.join(SASL_MECHANISMS)}, got {text!r}")
    return value


def _identification(text: str) -> str:
    value = text.strip().lower()
    return "" if value in ("", "none") else parse_choice("https")(value)


SECURITY_PROPERTIES: tuple[Property, ...] = (
    Property("security.protocol", _protocol, "PLAINTEXT",
             "How to talk to the brokers: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)."),
    Property("sasl.mechanism", _mechanism, "PLAIN",
             "SASL mechanism of SASL_* protocols: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
             aliases=("sasl.mechanisms",)),
    Property("sasl.username", parse_str, "", "SASL user name (or give sasl.jaas.config)."),
    Property("sasl.password", parse_str, "", "SASL password (or give sasl.jaas.config)."),
    Property("sasl.jaas.config", parse_str, "",
             "Java clients' form of the SASL login: '<LoginModule> required username=\"...\" password=\"...\";'."),
    Property("ssl.ca.location", parse_str, "",
             "PEM file of the certificate authorities trusted to sign the brokers' certificates (empty: the "
             "system's).", aliases=("ssl.truststore.location",)),
    Property("ssl.certificate.location", parse_str, "",
             "PEM file of this client's certificate, for brokers with ssl.client.auth (a PEM keystore holding the "
             "key too is fine).", aliases=("ssl.keystore.location",)),
    Property("ssl.key.location", parse_str, "", "PEM file of this client's private key (empty: in the certificate "
             "file)."),
    Property("ssl.key.password", parse_str, "", "Password of the private key, if it is encrypted.",
             aliases=("ssl.keystore.password",)),
    Property("ssl.endpoint.identification.algorithm", _identification, "https",
             "https: check that a broker's certificate names the host connected to; none (or empty): do not."),
)

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects to brokers: the protocol, TLS trust and identity, and SASL credentials."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: str = ""
    password: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    key_password: str = ""
    check_hostname: bool = True

    def __repr__(self) -> str:
        # Never show the password (configurations get logged).
        return (f"ClientSecurity({self.protocol}, mechanism={self.sasl_mechanism}, user={self.username!r}, "
                f"ca={self.ca_file!r}, cert={self.cert_file!r}, check_hostname={self.check_hostname})")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "ClientSecurity":
        """From a configuration holding the :data:`SECURITY_PROPERTIES` (parsed values by name); missing names
        take their defaults. Raises ConfigError when SASL is asked for without credentials."""
        def get(name: str) -> Any:
            value = values.get(name)
            if value is None:
                return next(p.default for p in SECURITY_PROPERTIES if p.name == name)
            return value

        protocol = get("security.protocol")
        username, password = get("sasl.username"), get("sasl.password")
        jaas = get("sasl.jaas.config")
        if jaas and not (username or password):
            options = {key: bytes(value, "utf-8").decode("unicode_escape") for key, value in _JAAS_OPTION.findall(jaas)}
            username, password = options.get("username", ""), options.get("password", "")
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL") and not username:
            raise ConfigError(f"security.protocol={protocol} needs sasl.username and sasl.password "
                              "(or sasl.jaas.config)")
        return cls(protocol=protocol, sasl_mechanism=get("sasl.mechanism"), username=username, password=password,
                   ca_file=get("ssl.ca.location"), cert_file=get("ssl.certificate.location"),
                   key_file=get("ssl.key.location"), key_password=get("ssl.key.password"),
                   check_hostname=get("ssl.endpoint.identification.algorithm") == "https")

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context: the configured (or system) trust, this client's certificate if any, and
        hostname verification unless switched off."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file or None)
            context.check_hostname = self.check_hostname
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file or None, self.key_password or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot set up TLS: {exc}") from None
        return context


PLAINTEXT_SECURITY = ClientSecurity()


def security_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`SECURITY_PROPERTIES` of a service's configuration (``Config`` or mapping), by name: what a service
    passes on to the Producer and consumer configurations it builds."""
    return {p.name: values.get(p.name, p.default) for p in SECURITY_PROPERTIES}

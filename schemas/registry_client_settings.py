"""How a client reaches a secured schema registry: Confluent's client settings, one table, one value object.

Every service that builds a :class:`~schemas.registry_client.SchemaRegistryClient` (the emulators, the mirror, the
ETL, the audit) carries :data:`REGISTRY_CLIENT_PROPERTIES` in its configuration table beside
``schema.registry.url``: ``basic.auth.credentials.source`` (``USER_INFO``, or ``URL`` for
``https://user:password@host``), ``basic.auth.user.info`` (``user:password``; the ``schema.registry.``-prefixed
names of Confluent's serializers are accepted) and ``schema.registry.ssl.{ca,certificate,key}.location`` for HTTPS
(PEM files; Java's ``truststore``/``keystore`` names accepted).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Mapping

from pipeline.config import ConfigError, Property, parse_str
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity

__all__ = ["REGISTRY_CLIENT_PROPERTIES", "RegistryClientSettings", "NO_REGISTRY_SECURITY"]


def _source(text: str) -> str:
    value = text.strip().upper()
    if value not in ("", "USER_INFO", "URL"):
        raise ValueError(f"expected USER_INFO or URL, got {text!r}")
    return value


REGISTRY_CLIENT_PROPERTIES: tuple[Property, ...] = (
    Property("basic.auth.credentials.source", _source, "",
             "where the schema registry login comes from: USER_INFO (basic.auth.user.info) or URL "
             "(https://user:password@host); empty: USER_INFO when basic.auth.user.info is set",
             aliases=("schema.registry.basic.auth.credentials.source",)),
    Property("basic.auth.user.info", parse_str, "", "schema registry login, user:password",
             aliases=("schema.registry.basic.auth.user.info",)),
    Property("schema.registry.ssl.ca.location", parse_str, "",
             "PEM file of the certificate authorities trusted to sign the registry's certificate (empty: the "
             "system's)", aliases=("schema.registry.ssl.truststore.location",)),
    Property("schema.registry.ssl.certificate.location", parse_str, "",
             "PEM file of this client's certificate, for a registry asking for one (may hold the key too)",
             aliases=("schema.registry.ssl.keystore.location",)),
    Property("schema.registry.ssl.key.location", parse_str, "",
             "PEM file of this client's private key (empty: in the certificate file)"),
    Property("schema.registry.ssl.key.password", parse_str, "", "password of that private key, if encrypted",
             aliases=("schema.registry.ssl.keystore.password",)),
)


@dataclass(frozen=True)
class RegistryClientSettings:
    """The login and TLS settings of a registry client (picklable: the ETL ships it to its Spark tasks); ``tls``
    holds the trust and the client certificate as a broker client's would."""

    username: str = ""
    password: str = ""
    tls: ClientSecurity = PLAINTEXT_SECURITY

    def __repr__(self) -> str:
        # Configurations get logged: never the password.
        return f"RegistryClientSettings(user={self.username!r}, tls={self.tls!r})"

    @classmethod
    def from_config(cls, values: Mapping[str, Any] | Any) -> "RegistryClientSettings":
        """From a configuration holding :data:`REGISTRY_CLIENT_PROPERTIES`, or a plain mapping of them by any of their
        names (missing ones take their defaults)."""
        def get(name: str) -> Any:
            prop = next(p for p in REGISTRY_CLIENT_PROPERTIES if p.name == name)
            for key in (prop.name, *prop.aliases):
                try:
                    value = values[key]
                except KeyError:
                    continue
                if value is not None:
                    return value
            return prop.default

        source, user_info = get("basic.auth.credentials.source").upper(), get("basic.auth.user.info")
        username = password = ""
        if source == "USER_INFO" or (source == "" and user_info):
            username, sep, password = user_info.partition(":")
            if not sep or not username:
                raise ConfigError("basic.auth.user.info must be user:password")
        tls = ClientSecurity("SSL", ca_file=get("schema.registry.ssl.ca.location"),
                             cert_file=get("schema.registry.ssl.certificate.location"),
                             key_file=get("schema.registry.ssl.key.location"),
                             key_password=get("schema.registry.ssl.key.password"))
        return cls(username, password, tls)

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.username, self.password) if self.username else None

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context for https URLs: the configured (or system) trust, hostname checked, and this client's
        certificate if any."""
        return self.tls.ssl_context()


NO_REGISTRY_SECURITY = RegistryClientSettings()

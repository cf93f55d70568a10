"""An HTTP service's security settings, with the names Confluent's REST services use: authentication
(``authentication.method=BASIC``, ``authentication.realm``, ``authentication.roles``, the users file), HTTPS
(``ssl.keystore.location`` -- a PEM file holding the certificate chain and the key --, ``ssl.key.password``,
``ssl.truststore.location``, ``ssl.client.authentication=NONE|REQUESTED|REQUIRED``) and ``listeners``.

:func:`http_security_properties` gives the rows for a service's table (the audit puts them under ``http.``);
:class:`HttpSecurity` reads them back, builds the server's TLS context and the authenticator.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from pipeline.config import ConfigError, Property, parse_choice, parse_str

from .http_auth import ANY_ROLE, BasicAuthenticator, FailedLogins
from .password_file import UsersFile

__all__ = ["http_security_properties", "HttpSecurity", "Listener", "Names", "parse_listeners", "parse_names"]


def _upper_choice(*choices: str) -> Any:
    lower = parse_choice(*(choice.lower() for choice in choices))
    return lambda text: lower(text).upper()


class Names(tuple):
    """A comma-separated list setting's value (names, listeners), shown as it is written."""

    def __str__(self) -> str:
        return ",".join(map(str, self))


def parse_names(text: str) -> Names:
    return Names(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class Listener:
    """Where a service listens: ``http`` or ``https``, host, port."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def parse_listeners(text: str) -> Names:
    """``http://host:port,https://host:port`` (an empty host: every interface)."""
    listeners = []
    for part in parse_names(text):
        url = urlsplit(part)
        if url.scheme.lower() not in ("http", "https") or url.port is None:
            raise ValueError(f"a listener is http://HOST:PORT or https://HOST:PORT, got {part!r}")
        listeners.append(Listener(url.scheme.lower(), url.hostname or "0.0.0.0", url.port))
    return Names(listeners)


def http_security_properties(prefix: str = "", realm: str = "") -> tuple[Property, ...]:
    """The authentication and TLS rows of a service's table, each name behind ``prefix``; ``realm`` is the
    default of ``authentication.realm``."""
    p = prefix
    return (
        Property(f"{p}authentication.method", _upper_choice("NONE", "BASIC"), "NONE",
                 "NONE: anyone may call; BASIC: HTTP basic authentication against the users file"),
        Property(f"{p}authentication.realm", parse_str, realm, "the realm of the basic authentication challenge"),
        Property(f"{p}authentication.roles", parse_names, Names((ANY_ROLE,)),
                 "roles let in, comma-separated (*: every user of the users file)"),
        Property(f"{p}authentication.users.file", parse_str, "",
                 "users file, Jetty's form: 'user: password[,role...]' per line; passwords hashed as "
                 "PBKDF2:/SCRYPT: (python -m pipeline.security.password_file), Jetty's MD5:/CRYPT:/OBF:, or plain text"),
        Property(f"{p}authentication.skip.paths", parse_names, Names(),
                 "paths answered without authentication, comma-separated (e.g. /metrics)"),
        Property(f"{p}ssl.keystore.location", parse_str, "",
                 "PEM file of the server's certificate chain and private key (for HTTPS)"),
        Property(f"{p}ssl.key.password", parse_str, "", "password of the private key, if it is encrypted",
                 aliases=(f"{p}ssl.keystore.password",)),
        Property(f"{p}ssl.truststore.location", parse_str, "",
                 "PEM file of the certificate authorities whose client certificates are accepted"),
        Property(f"{p}ssl.client.authentication", _upper_choice("NONE", "REQUESTED", "REQUIRED"), "NONE",
                 "TLS client certificates: NONE, REQUESTED (checked if sent) or REQUIRED"),
    )


@dataclass(frozen=True)
class HttpSecurity:
    """A service's authentication and TLS settings, read from its configuration."""

    method: str = "NONE"
    realm: str = ""
    roles: tuple[str, ...] = (ANY_ROLE,)
    users_file: str = ""
    skip_paths: tuple[str, ...] = ()
    keystore: str = ""
    key_password: str = ""
    truststore: str = ""
    client_authentication: str = "NONE"

    def __repr__(self) -> str:
        return (f"HttpSecurity({self.method}, realm={self.realm!r}, users={self.users_file!r}, "
                f"keystore={self.keystore!r}, client_authentication={self.client_authentication})")

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any, prefix: str = "") -> "HttpSecurity":
        """From a configuration holding :func:`http_security_properties` ``(prefix)``. Raises ConfigError when
        BASIC has no users file or client certificates are asked for without a truststore."""
        def get(name: str) -> Any:
            return config[prefix + name]

        security = cls(get("authentication.method"), get("authentication.realm"), tuple(get("authentication.roles")),
                       get("authentication.users.file"), tuple(get("authentication.skip.paths")),
                       get("ssl.keystore.location"), get("ssl.key.password"), get("ssl.truststore.location"),
                       get("ssl.client.authentication"))
        if security.method == "BASIC" and not security.users_file:
            raise ConfigError(f"{prefix}authentication.method=BASIC needs {prefix}authentication.users.file")
        if security.client_authentication != "NONE" and not security.truststore:
            raise ConfigError(f"{prefix}ssl.client.authentication={security.client_authentication} needs "
                              f"{prefix}ssl.truststore.location (the CA of the clients' certificates)")
        return security

    @property
    def basic(self) -> bool:
        return self.method == "BASIC"

    def ssl_context(self) -> ssl.SSLContext:
        """The server's TLS context: its certificate and key, and the client certificates it asks for."""
        if not self.keystore:
            raise ConfigError("an https listener needs ssl.keystore.location (PEM: certificate chain and key)")
        try:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.truststore or None)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(self.keystore, password=self.key_password or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot set up TLS: {exc}") from None
        context.verify_mode = {"NONE": ssl.CERT_NONE, "REQUESTED": ssl.CERT_OPTIONAL,
                               "REQUIRED": ssl.CERT_REQUIRED}[self.client_authentication]
        return context

    def authenticator(self, service: str, failed_logins: Any) -> BasicAuthenticator | None:
        """The authenticator of BASIC (None for NONE); ``failed_logins`` is a Counter labelled by reason."""
        if not self.basic:
            return None
        try:
            users = UsersFile(self.users_file)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return BasicAuthenticator(users, self.realm, FailedLogins(failed_logins, service), self.roles)

"""An HTTP service's security settings: listeners, the rows under a prefix, the server's TLS context per
ssl.client.authentication, and the checks of settings that cannot work."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from infra.deployment.certificates import CertificateAuthority
from pipeline.config import Config, ConfigError
from pipeline.security.http_settings import HttpSecurity, Listener, http_security_properties, parse_listeners


def test_listeners_are_http_or_https_urls() -> None:
    assert parse_listeners("http://127.0.0.1:8081, https://:8443") == (Listener("http", "127.0.0.1", 8081),
                                                                       Listener("https", "0.0.0.0", 8443))
    assert str(parse_listeners("HTTPS://h:1")) == "https://h:1"
    for wrong in ("tcp://h:1", "http://h", "h:1"):
        with pytest.raises(ValueError):
            parse_listeners(wrong)


def config(prefix: str = "", **values: str) -> Config:
    return Config(http_security_properties(prefix, realm="R"), {prefix + k.replace("_", "."): v
                                                                for k, v in values.items()})


def test_the_rows_live_under_a_prefix_and_read_back() -> None:
    security = HttpSecurity.from_config(config("http.", authentication_method="basic",
                                               authentication_users_file="/u", authentication_roles="a, b"), "http.")
    assert (security.method, security.realm, security.roles, security.users_file) == ("BASIC", "R", ("a", "b"), "/u")
    assert security.basic and not HttpSecurity.from_config(config()).basic
    assert config(ssl_keystore_password="x")["ssl.key.password"] == "x"  # Java's name of it


@pytest.mark.parametrize("mode, verify", [("NONE", ssl.CERT_NONE), ("REQUESTED", ssl.CERT_OPTIONAL),
                                          ("REQUIRED", ssl.CERT_REQUIRED)])
def test_the_server_context_asks_for_client_certificates_as_set(tmp_path: Path, mode: str, verify: int) -> None:
    authority = CertificateAuthority(tmp_path / "ca")
    bundle = authority.issue("server").bundle
    context = HttpSecurity.from_config(config(ssl_keystore_location=str(bundle), ssl_client_authentication=mode,
                                              ssl_truststore_location=str(authority.cert_path))).ssl_context()
    assert context.verify_mode == verify and context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_settings_that_cannot_work_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="authentication.users.file"):
        HttpSecurity.from_config(config(authentication_method="BASIC"))
    with pytest.raises(ConfigError, match="ssl.truststore.location"):
        HttpSecurity.from_config(config(ssl_client_authentication="REQUIRED"))
    with pytest.raises(ConfigError, match="keystore"):
        HttpSecurity.from_config(config()).ssl_context()
    with pytest.raises(ConfigError, match="cannot set up TLS"):
        HttpSecurity.from_config(config(ssl_keystore_location=str(tmp_path / "absent.pem"))).ssl_context()
    with pytest.raises(ConfigError, match="cannot read the users file"):
        HttpSecurity.from_config(config(authentication_method="BASIC",
                                        authentication_users_file=str(tmp_path / "absent"))).authenticator("s", None)
    with pytest.raises(ConfigError, match="expected one of"):
        config(authentication_method="DIGEST")


def test_the_repr_never_shows_the_key_password() -> None:
    assert "k3y" not in repr(HttpSecurity.from_config(config(ssl_key_password="k3y")))

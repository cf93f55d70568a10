"""Files of a secured HTTP service for tests: a local CA, a server certificate for 127.0.0.1/localhost, and a users
file with a reader, a writer and an admin (random passwords; the admin's stored hashed)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from infra.deployment.certificates import CertificateAuthority, IssuedCertificate
from pipeline.security.password_file import hash_password

ROLES = {"reader": "read", "writer": "write", "admin": "admin"}


@dataclass(frozen=True)
class HttpSecurityFiles:
    """The CA, the server's certificate, the users file and each user's (name, password)."""

    authority: CertificateAuthority
    server: IssuedCertificate
    users_file: Path
    logins: dict[str, tuple[str, str]]

    @property
    def ca_file(self) -> Path:
        return self.authority.cert_path

    def settings(self, prefix: str = "") -> list[str]:
        """``--set`` options of a service with BASIC authentication and its keystore (``prefix``: the audit's
        ``http.``)."""
        values = {"authentication.method": "BASIC", "authentication.users.file": self.users_file,
                  "ssl.keystore.location": self.server.bundle}
        return [option for name, value in values.items() for option in ("--set", f"{prefix}{name}={value}")]


def http_security_files(directory: Path) -> HttpSecurityFiles:
    directory.mkdir(parents=True, exist_ok=True)
    authority = CertificateAuthority(directory / "ca")
    server = authority.issue("server", hosts=("localhost", "127.0.0.1"))
    logins = {user: (user, secrets.token_urlsafe(12)) for user in ROLES}
    lines = [f"{user}: {hash_password(password) if user == 'admin' else password},{ROLES[user]}"
             for user, password in logins.values()]
    users_file = directory / "users.properties"
    users_file.write_text("\n".join(lines) + "\n")
    users_file.chmod(0o600)
    return HttpSecurityFiles(authority, server, users_file, logins)

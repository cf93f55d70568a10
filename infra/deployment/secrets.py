"""The secured deployment's secrets under ``var/secrets``: a CA and certificates, passwords, the ZooKeeper digest.

:func:`ensure` creates what is missing and never replaces what exists (a restart keeps every password and
certificate): the directory (0700, every file 0600), a local certificate authority and a certificate per process
that serves TLS (each broker, the registry, the audit's dashboard), a random password per user (one identity per
service, used for SCRAM on the brokers and for basic authentication on the registry and the dashboard), the
registry's and the dashboard's users files (passwords hashed), and the ZooKeeper digest every process of the
deployment authenticates with. :class:`Secrets` tells the other modules where each is and reads the passwords.
"""

from __future__ import annotations

import json
import os
import secrets as random
from dataclasses import dataclass
from pathlib import Path

from infra.deployment.certificates import CertificateAuthority, IssuedCertificate
from infra.deployment.topology import Topology
from pipeline.security.password_file import hash_password

__all__ = ["ADMIN", "BROKER", "KAFKA_USERS", "PROMETHEUS", "SERVICE_USERS", "Secrets", "ensure", "write_private"]

BROKER = "broker"
ADMIN = "admin"
PROMETHEUS = "prometheus"
# Every identity of the deployment: the brokers among themselves, people (admin), each service, and Prometheus
# (it scrapes the registry's and the audit's /metrics).
SERVICE_USERS = (BROKER, ADMIN, "emulators", "mirror", "etl", "audit", PROMETHEUS)
# The SCRAM users of the brokers (Prometheus does not talk to them).
KAFKA_USERS = tuple(user for user in SERVICE_USERS if user != PROMETHEUS)
ZOOKEEPER_USER = "pipeline"
# Roles in the registry's users file (its authorization.*.roles defaults: write registers, admin deletes).
REGISTRY_ROLES = {ADMIN: "admin,write", "emulators": "write", "mirror": "write", "etl": "write", "audit": "write",
                  PROMETHEUS: "metrics"}
DASHBOARD_USERS = (ADMIN, PROMETHEUS)
PASSWORD_BYTES = 24


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (from the first byte on)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)


@dataclass(frozen=True)
class Secrets:
    """Where the secrets of a deployment are (``directory``: its var/secrets)."""

    directory: Path

    @classmethod
    def of(cls, topology: Topology) -> "Secrets":
        return cls(topology.var_dir / "secrets")

    @property
    def ca_dir(self) -> Path:
        return self.directory / "ca"

    @property
    def ca_file(self) -> Path:
        """The CA's certificate: the truststore of every client and service."""
        return self.ca_dir / "ca.pem"

    @property
    def passwords_file(self) -> Path:
        return self.directory / "passwords.json"

    @property
    def zookeeper_digest_file(self) -> Path:
        return self.directory / "zookeeper.digest"

    @property
    def registry_users_file(self) -> Path:
        return self.directory / "registry-users.properties"

    @property
    def dashboard_users_file(self) -> Path:
        return self.directory / "dashboard-users.properties"

    def password_file(self, user: str) -> Path:
        """A file holding only ``user``'s password (Prometheus's basic_auth password_file)."""
        return self.directory / f"{user}.password"

    def certificate(self, name: str) -> IssuedCertificate:
        return IssuedCertificate(name, self.ca_dir / f"{name}.pem", self.ca_dir / f"{name}-key.pem",
                                 self.ca_dir / f"{name}-bundle.pem")

    def client_properties(self, user: str) -> Path:
        """The client properties file of ``user`` (admin.properties is the one people use with the CLI)."""
        return self.directory / f"{user}.properties"

    def passwords(self) -> dict[str, str]:
        return json.loads(self.passwords_file.read_text())

    def password(self, user: str) -> str:
        return self.passwords()[user]


def certificate_names(topology: Topology) -> list[str]:
    """The processes that serve TLS: every broker run here, the registry (unless external), the audit."""
    names = [f"broker-{cluster.name}-{broker_id}" for cluster in topology.clusters for broker_id in cluster.broker_ids()]
    if not topology.registry.external:
        names.append("registry")
    names.append("audit")
    return names


def _users_file(path: Path, roles: dict[str, str], passwords: dict[str, str]) -> None:
    """Jetty's users file of ``roles`` ({user: comma-separated roles}), the passwords hashed."""
    if path.exists():
        return
    lines = [f"{user}: {hash_password(passwords[user])}" + (f",{roles[user]}" if roles[user] else "")
             for user in roles]
    write_private(path, "\n".join(lines) + "\n")


def ensure(topology: Topology) -> Secrets:
    """Create whatever secret of ``topology`` is missing under var/secrets; replace nothing."""
    found = Secrets.of(topology)
    found.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    found.directory.chmod(0o700)
    authority = CertificateAuthority(found.ca_dir)
    hosts = tuple(dict.fromkeys((topology.host, "localhost", "127.0.0.1")))
    for name in certificate_names(topology):
        if not found.certificate(name).bundle.exists():
            authority.issue(name, hosts=hosts)
    passwords = found.passwords() if found.passwords_file.exists() else {}
    missing = [user for user in SERVICE_USERS if user not in passwords]
    if missing:
        passwords.update({user: random.token_urlsafe(PASSWORD_BYTES) for user in missing})
        write_private(found.passwords_file, json.dumps(passwords, indent=1, sort_keys=True) + "\n")
    for user in SERVICE_USERS:
        if not found.password_file(user).exists():
            write_private(found.password_file(user), passwords[user])
    if not found.zookeeper_digest_file.exists():
        write_private(found.zookeeper_digest_file, f"{ZOOKEEPER_USER}:{random.token_urlsafe(PASSWORD_BYTES)}\n")
    _users_file(found.registry_users_file, REGISTRY_ROLES, passwords)
    _users_file(found.dashboard_users_file, {user: "" for user in DASHBOARD_USERS}, passwords)
    return found

"""Protecting a cluster's znodes: ZooKeeper digest authentication and the ACLs of what a process creates.

With ``zookeeper.set.acl=true`` every znode a process creates gets Kafka's secure ACLs: all rights for the
creator's identity, read for everyone else, so that another ZooKeeper client cannot rewrite the cluster's state
(brokers, topics, partition states, committed offsets); the SCRAM credentials under ``/config/users`` are not even
readable by others. ``/consumers`` itself stays open to create in (any client may start a group there), each
group's nodes are its creator's. The identity is a ZooKeeper digest, ``USER:PASSWORD`` read from the file
``zookeeper.digest.file``: Debian's ZooKeeper (3.8) checks digest authentication out of the box, whereas SASL
(Kafka's choice) needs a JAAS login configuration on every server. Processes that share the digest may change one
another's znodes; a process without it only reads (and cannot create beside them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kazoo.security import ACL, READ_ACL_UNSAFE, make_acl, make_digest_acl

from pipeline.config import ConfigError, Property, parse_bool, parse_str

__all__ = ["ZOOKEEPER_SECURITY_PROPERTIES", "ZooKeeperSecurity", "OPEN_ZOOKEEPER", "SENSITIVE_PATHS",
           "read_digest"]

ZOOKEEPER_SECURITY_PROPERTIES: tuple[Property, ...] = (
    Property("zookeeper.set.acl", parse_bool, False,
             "Create znodes with ACLs: all rights for this process's ZooKeeper identity (zookeeper.digest.file), "
             "read for others, none for others on the credentials under /config/users."),
    Property("zookeeper.digest.file", parse_str, "",
             "File holding USER:PASSWORD, the ZooKeeper digest identity this process authenticates with (empty: "
             "none; required by zookeeper.set.acl=true)."),
)

# Znodes no other identity may read (Kafka's sensitive paths: the SCRAM credentials).
SENSITIVE_PATHS = ("/config/users",)
# Znodes anyone may create children in (but not delete them): where consumer groups are born.
OPEN_PARENTS = ("/consumers",)
_WORLD_READ_CREATE = make_acl("world", "anyone", read=True, create=True)


def read_digest(path: str | Path) -> str:
    """``USER:PASSWORD`` from ``path`` (surrounding whitespace dropped); ConfigError when it is not that."""
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"zookeeper.digest.file {path}: {exc.strerror or exc}") from None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise ConfigError(f"zookeeper.digest.file {path} must hold USER:PASSWORD")
    return text


@dataclass(frozen=True)
class ZooKeeperSecurity:
    """A process's ZooKeeper identity (a digest, or none) and whether its znodes get ACLs."""

    set_acl: bool = False
    digest: str = ""

    def __repr__(self) -> str:
        # Never show the password (configurations get logged).
        return f"ZooKeeperSecurity(set_acl={self.set_acl}, user={self.user!r})"

    @property
    def user(self) -> str:
        return self.digest.partition(":")[0]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "ZooKeeperSecurity":
        """From a configuration holding :data:`ZOOKEEPER_SECURITY_PROPERTIES` (missing names take their defaults);
        ConfigError when ACLs are asked for without a digest, or the digest file cannot be read."""
        set_acl = bool(values.get("zookeeper.set.acl") or False)
        digest_file = values.get("zookeeper.digest.file") or ""
        if set_acl and not digest_file:
            raise ConfigError("zookeeper.set.acl=true needs zookeeper.digest.file (a file holding USER:PASSWORD)")
        return cls(set_acl, read_digest(digest_file) if digest_file else "")

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: the digest to authenticate the session with."""
        return [("digest", self.digest)] if self.digest else []

    def owner_acl(self) -> ACL:
        user, _, password = self.digest.partition(":")
        return make_digest_acl(user, password, all=True)

    def acl_for(self, path: str) -> list[ACL] | None:
        """The ACL a znode at ``path`` (relative to the chroot) is created with; None: ZooKeeper's open default."""
        if not self.set_acl:
            return None
        path = "/" + path.strip("/")
        if path in OPEN_PARENTS:
            return [self.owner_acl(), _WORLD_READ_CREATE]
        if any(path == p or path.startswith(p + "/") for p in SENSITIVE_PATHS):
            return [self.owner_acl()]
        return [self.owner_acl(), *READ_ACL_UNSAFE]


OPEN_ZOOKEEPER = ZooKeeperSecurity()

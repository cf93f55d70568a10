"""ACLs for tests: bindings written with a word, and the ACLs a broker starts with (its log dir's file, or a
cluster's ZooKeeper, in Kafka's format) so a test principal can administer the rest."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from kazoo.client import KazooClient

from broker.security.acl_store import FileAclStore
from pipeline.security import acl_zk
from pipeline.security.acl import (CLUSTER_NAME, AccessControlEntry, AclBinding, AclOperation, AclPermissionType,
                                   PatternType, ResourcePattern, ResourceType)

ANONYMOUS = "User:ANONYMOUS"
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}


def acl(kind: ResourceType, name: str, *operations: AclOperation, principal: str = ANONYMOUS,
        pattern: PatternType = PatternType.LITERAL, deny: bool = False, host: str = "*") -> list[AclBinding]:
    """One binding per operation: ``principal`` allowed (or denied) ``operations`` on the resource."""
    permission = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    return [AclBinding(ResourcePattern(kind, name, pattern), AccessControlEntry(principal, host, op, permission))
            for op in operations]


def administrator(principal: str = ANONYMOUS) -> list[AclBinding]:
    """What managing topics and ACLs takes: CREATE, ALTER and DESCRIBE on the cluster."""
    return acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
               principal=principal)


def _by_pattern(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for binding in bindings:
        grouped.setdefault(binding.pattern, set()).add(binding.entry)
    return {pattern: frozenset(entries) for pattern, entries in grouped.items()}


def seed_log_dir(log_dir: Path, bindings: Iterable[AclBinding]) -> None:
    """Store ``bindings`` where a standalone broker with ``log_dir`` reads its ACLs at start."""
    log_dir.mkdir(parents=True, exist_ok=True)
    store = FileAclStore(log_dir)
    acls = store.load()
    for pattern, entries in _by_pattern(bindings).items():
        acls[pattern] = acls.get(pattern, frozenset()) | entries
    store.write(acls)


def seed_zookeeper(zk: KazooClient, bindings: Iterable[AclBinding]) -> None:
    """Write ``bindings`` straight into a cluster's ZooKeeper (``zk`` rooted at its chroot) in Kafka's format, as
    the deployment does before brokers start."""
    acl_zk.add_acls(zk, bindings)


class MemoryAclStore:
    """An AclStore in memory, for unit tests of the authorizer."""

    def __init__(self) -> None:
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}

    def load(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        return dict(self.acls)

    def alter(self, pattern: ResourcePattern, change) -> frozenset[AccessControlEntry]:
        self.acls[pattern] = new = frozenset(change(self.acls.get(pattern, frozenset())))
        return new

    def start(self, on_change) -> None:
        pass

    def close(self) -> None:
        pass

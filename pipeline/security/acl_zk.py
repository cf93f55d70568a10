"""Where Kafka keeps ACLs in ZooKeeper and the JSON of those znodes (ZkAclStore's, as of Kafka 2.x).

Relative to the cluster's chroot::

    /kafka-acl/<Type>/<name>                        literal ACLs of one resource (``*``: the wildcard)
    /kafka-acl-extended/prefixed/<Type>/<prefix>    prefixed ACLs
    /kafka-acl-changes/acl_changes_<seq>            change notification of a literal resource: ``Topic:name``
    /kafka-acl-extended-changes/acl_changes_<seq>   of a prefixed one: {"version":1,"resourceType",...}

Each resource znode holds ``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}``. The
broker, the deployment (which may write ACLs before brokers start) and the tests use these functions, so
stock Kafka tools reading the same ZooKeeper see the same ACLs.
"""

from __future__ import annotations

import json
from typing import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from pipeline.security.acl import (AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType,
                                   ResourcePattern, ResourceType)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
#: The resource types stored in ZooKeeper (their znode names are the display names: Topic, Group, ...).
STORED_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
                ResourceType.DELEGATION_TOKEN)


def type_root(resource_type: ResourceType, pattern_type: PatternType) -> str:
    """The znode whose children are the resources of one type and pattern type."""
    root = PREFIXED_ROOT if pattern_type == PatternType.PREFIXED else LITERAL_ROOT
    return f"{root}/{resource_type.display}"


def resource_path(pattern: ResourcePattern) -> str:
    """The znode of one resource pattern's ACLs."""
    return f"{type_root(pattern.resource_type, pattern.pattern_type)}/{pattern.name}"


def entries_json(entries: Iterable[AccessControlEntry]) -> bytes:
    """A resource znode's data."""
    acls = [{"principal": e.principal, "permissionType": e.permission_type.display, "operation": e.operation.display,
             "host": e.host} for e in sorted(entries, key=_entry_order)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def parse_entries(data: bytes | None) -> frozenset[AccessControlEntry]:
    """The entries of a resource znode's data (empty for an empty znode)."""
    if not data:
        return frozenset()
    return frozenset(AccessControlEntry(a["principal"], a["host"], AclOperation.parse(a["operation"]),
                                        AclPermissionType.parse(a["permissionType"]))
                     for a in json.loads(data.decode())["acls"])


def change_root(pattern_type: PatternType) -> str:
    return EXTENDED_CHANGES if pattern_type == PatternType.PREFIXED else LITERAL_CHANGES


def change_json(pattern: ResourcePattern) -> bytes:
    """A change notification's data: ``Type:name`` for literal patterns, JSON for prefixed ones."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.display}:{pattern.name}".encode()
    return json.dumps({"version": 1, "resourceType": pattern.resource_type.display, "name": pattern.name,
                       "patternType": pattern.pattern_type.display}, separators=(",", ":")).encode()


def parse_change(data: bytes, extended: bool) -> ResourcePattern:
    """The resource pattern a change notification names."""
    text = data.decode()
    if not extended:
        kind, _, name = text.partition(":")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
    value = json.loads(text)
    return ResourcePattern(ResourceType.parse(value["resourceType"]), value["name"],
                           PatternType.parse(value["patternType"]))


def add_acls(zk: KazooClient, bindings: Iterable[AclBinding]) -> None:
    """Add ``bindings`` to the ACLs a cluster keeps in ZooKeeper (``zk`` rooted at its chroot), each resource
    changed atomically and announced by a change notification, as a broker does: for a deployment writing its
    ACLs before (or while) brokers run."""
    grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for binding in bindings:
        grouped.setdefault(binding.pattern, set()).add(binding.entry)
    for pattern, entries in grouped.items():
        path = resource_path(pattern)
        while True:
            try:
                data, stat = zk.get(path)
            except NoNodeError:
                try:
                    zk.create(path, entries_json(entries), makepath=True)
                except NodeExistsError:
                    continue
                break
            current = parse_entries(data)
            if entries <= current:
                break
            try:
                zk.set(path, entries_json(current | entries), version=stat.version)
            except BadVersionError:
                continue
            break
        zk.create(f"{change_root(pattern.pattern_type)}/{CHANGE_PREFIX}", change_json(pattern), sequence=True,
                  makepath=True)


def _entry_order(entry: AccessControlEntry) -> tuple:
    return entry.principal, entry.host, entry.operation, entry.permission_type

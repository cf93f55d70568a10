"""Kafka's ACL model (KIP-140, KIP-290): resource patterns, access control entries, bindings and their filters.

The codes are Kafka's wire values (ResourceType, PatternType, AclOperation, AclPermissionType), shared by the
broker's authorizer, the AdminClient and the ``acls`` CLI. A binding grants or denies one principal, from one
host, one operation on the resources one pattern names; a filter selects bindings as Kafka's
``AclBindingFilter.matches`` does (None and ANY match everything; MATCH finds the literal, wildcard and
prefixed patterns that apply to one resource name).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

#: The wildcard resource name (all resources of a type) and principal (every user); the host ``*`` is any host.
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
#: The name of the cluster resource (the only one Kafka accepts).
CLUSTER_NAME = "kafka-cluster"


class _Named(IntEnum):
    """An enum with Kafka's display names (``Topic``, ``DescribeConfigs``) and a parser that takes any case."""

    @property
    def display(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> "_Named":
        key = text.strip().replace("-", "_").replace(" ", "").upper()
        for member in cls:
            if key in (member.name, member.name.replace("_", "")):
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r} (one of {', '.join(m.display for m in cls if m)})")


class ResourceType(_Named):
    """What an ACL protects (Kafka's ResourceType codes)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class PatternType(_Named):
    """How a resource name matches (KIP-290): LITERAL (or the wildcard ``*``) and PREFIXED; ANY and MATCH in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    """What an ACL allows or denies (Kafka's AclOperation codes)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(_Named):
    """Whether an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The operations an allow ACL of the key grants besides itself (Kafka's AclAuthorizer): read, write, delete and
#: alter imply describe; alter_configs implies describe_configs. ALL implies everything.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALL}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                              AclOperation.ALL}),
}


def granting_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The ACL operations whose ALLOW grants ``operation``."""
    return IMPLIED_BY.get(operation) or frozenset({operation, AclOperation.ALL})


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource type and a name that is literal (``*``: every resource of the type) or a prefix."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (``User:alice``), from where (a host or ``*``), what operation, and allow or deny."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: an entry bound to a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry


def validate_binding(binding: AclBinding) -> str | None:
    """Why the broker would refuse to store ``binding`` (None when it is valid), as Kafka checks CreateAcls."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "the resource type must be a concrete type"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "the pattern type must be LITERAL or PREFIXED"
    if not pattern.name:
        return "the resource name must not be empty"
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if entry.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return "the operation must be a concrete operation"
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return "the permission type must be ALLOW or DENY"
    kind, sep, name = entry.principal.partition(":")
    if not sep or not kind or not name:
        return f"{entry.principal!r} is not a principal: expected Type:name, e.g. User:alice"
    if not entry.host:
        return "the host must not be empty (* for any host)"
    return None


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Selects resource patterns: a type (ANY: all), a name (None: all) and a pattern type (ANY, MATCH or exact)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        wanted = self.pattern_type
        if wanted not in (PatternType.ANY, PatternType.MATCH) and wanted != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if wanted == PatternType.ANY or wanted == pattern.pattern_type:
            return self.name == pattern.name
        # MATCH: the patterns that apply to a resource called ``name``.
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return pattern.pattern_type == PatternType.PREFIXED and self.name.startswith(pattern.name)


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Selects entries: principal and host (None: any), operation and permission type (ANY: any)."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects ACL bindings (DescribeAcls, DeleteAcls); the default filter selects every literal ACL."""

    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


#: Selects every ACL of every pattern type.
ANY_BINDING = AclBindingFilter(ResourcePatternFilter(pattern_type=PatternType.ANY))

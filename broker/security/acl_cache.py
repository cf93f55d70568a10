"""AclCache: every ACL the broker knows, indexed for the authorizer's look-ups.

Literal patterns are found by (resource type, name) -- the name itself and the wildcard ``*`` -- and
prefixed patterns by looking up the name's prefixes of the lengths some prefixed ACL of that type has, so
one look-up costs a few dict accesses whatever the number of ACLs. Read and changed on the event loop only.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

from pipeline.security.acl import (WILDCARD_RESOURCE, AccessControlEntry, AclBinding, AclBindingFilter, PatternType,
                                   ResourcePattern, ResourceType)

Entries = frozenset[AccessControlEntry]


class AclCache:
    """The ACLs of every resource pattern, with a literal and a prefix index."""

    def __init__(self, acls: Mapping[ResourcePattern, Entries] | None = None) -> None:
        self._acls: dict[ResourcePattern, Entries] = {}
        self._literal: dict[tuple[ResourceType, str], Entries] = {}
        self._prefixed: dict[tuple[ResourceType, str], Entries] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        for pattern, entries in (acls or {}).items():
            self.replace(pattern, entries)

    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Set the ACLs of ``pattern`` (none: the pattern is forgotten)."""
        entries = frozenset(entries)
        key = (pattern.resource_type, pattern.name)
        index = self._prefixed if pattern.pattern_type == PatternType.PREFIXED else self._literal
        if entries:
            self._acls[pattern] = entries
            index[key] = entries
        else:
            self._acls.pop(pattern, None)
            index.pop(key, None)
        if pattern.pattern_type == PatternType.PREFIXED:
            kind = pattern.resource_type
            self._prefix_lengths[kind] = tuple(sorted({len(name) for t, name in self._prefixed if t == kind}))

    def matching(self, resource_type: ResourceType, name: str) -> list[Entries]:
        """The entry sets of every pattern that applies to the resource ``name``: literal, wildcard, prefixed."""
        found = []
        literal = self._literal
        entries = literal.get((resource_type, name))
        if entries:
            found.append(entries)
        entries = literal.get((resource_type, WILDCARD_RESOURCE))
        if entries and name != WILDCARD_RESOURCE:
            found.append(entries)
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for length in lengths:
                if length > len(name):
                    break
                entries = prefixed.get((resource_type, name[:length]))
                if entries:
                    found.append(entries)
        return found

    def entries(self, pattern: ResourcePattern) -> Entries:
        return self._acls.get(pattern, frozenset())

    def patterns(self, resource_type: ResourceType) -> Iterator[tuple[ResourcePattern, Entries]]:
        """Every pattern of one resource type with its entries."""
        return ((p, e) for p, e in self._acls.items() if p.resource_type == resource_type)

    def bindings(self, selector: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``selector`` matches."""
        return [binding for pattern, entries in self._acls.items() if selector.pattern.matches(pattern)
                for entry in entries if selector.entry.matches(entry)
                for binding in (AclBinding(pattern, entry),)]

    def __len__(self) -> int:
        return sum(len(e) for e in self._acls.values())

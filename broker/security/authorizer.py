"""AclAuthorizer: whether a connection's principal may perform an operation on a resource (Kafka's AclAuthorizer).

Semantics as Kafka's: a super user may do anything; otherwise the ACLs that apply to the resource are its
literal ones, the wildcard ``*`` of its type and every prefixed pattern its name starts with. With none,
``allow.everyone.if.no.acl.found`` decides (default: deny). A DENY of the principal (or ``User:*``) from the
connection's host (or ``*``) for the operation (or ALL) refuses; else an ALLOW for an operation that grants it
(itself, ALL, or one implying it: READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies
DESCRIBE_CONFIGS) permits; else refused. Decisions are cached per (principal, host, operation, resource) until
the ACLs change, so the hot paths pay one dict look-up per topic.
"""

from __future__ import annotations

import asyncio
from typing import Iterable, Protocol

from pipeline.security.acl import (WILDCARD_HOST, WILDCARD_PRINCIPAL, WILDCARD_RESOURCE, AccessControlEntry,
                                   AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
                                   ResourcePattern, ResourceType, granting_operations, validate_binding)
from pipeline.security.principal import KafkaPrincipal
from broker.security.acl_cache import AclCache, Entries
from broker.security.acl_store import AclStore

#: The authorizer.class.name values that switch this authorizer on (Kafka's two names and ours).
AUTHORIZER_CLASS_NAMES = frozenset({"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                                    "broker.security.authorizer.AclAuthorizer"})
#: Decisions kept before the cache starts over (each is a few hundred bytes).
MAX_CACHED_DECISIONS = 100_000

_ALLOW, _DENY, _ALL = AclPermissionType.ALLOW, AclPermissionType.DENY, AclOperation.ALL


class Requester(Protocol):
    """Who asks: a connection's principal and the address it connects from (broker.server's Session)."""

    principal: KafkaPrincipal
    address: str


class AclAuthorizer:
    """Authorizes requests against the ACLs of ``store``, kept in memory and updated by the store's changes."""

    def __init__(self, store: AclStore, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.cache = AclCache()
        self._decisions: dict[tuple, bool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Watch the store for others' changes, then load every ACL (both off the event loop)."""
        loop = self._loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.store.start, self._changed_elsewhere)
        acls = await loop.run_in_executor(None, self.store.load)
        for pattern, entries in acls.items():
            self.cache.replace(pattern, entries)
        self._decisions.clear()

    def close(self) -> None:
        self.store.close()
        self._loop = None

    def _changed_elsewhere(self, pattern: ResourcePattern, entries: Entries) -> None:
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self.apply, pattern, entries)
            except RuntimeError:
                pass  # the loop closed: the broker is stopping

    def apply(self, pattern: ResourcePattern, entries: Entries) -> None:
        """Take the new ACLs of ``pattern`` (on the event loop)."""
        self.cache.replace(pattern, entries)
        self._decisions.clear()

    # -- decisions -------------------------------------------------------------------------------

    def authorize(self, requester: Requester, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether ``requester`` may perform ``operation`` on the resource ``name`` of ``resource_type``."""
        principal = requester.principal
        # The principal's fields, not the principal: strings keep their hash, a dataclass computes it every time.
        key = (principal.name, principal.principal_type, requester.address, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(str(principal), requester.address, operation, resource_type, name)
            if len(self._decisions) >= MAX_CACHED_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        entry_sets = self.cache.matching(resource_type, name)
        if not entry_sets:
            return self.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD_HOST)
        for entries in entry_sets:
            for e in entries:
                if (e.permission_type == _DENY and e.principal in principals and e.host in hosts
                        and (e.operation == operation or e.operation == _ALL)):
                    return False
        granting = granting_operations(operation)
        for entries in entry_sets:
            for e in entries:
                if (e.permission_type == _ALLOW and e.principal in principals and e.host in hosts
                        and e.operation in granting):
                    return True
        return False

    def authorize_any(self, requester: Requester, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether ``requester`` may perform ``operation`` on at least one resource of ``resource_type`` (Kafka's
        authorizeByResourceType, KIP-679): some ALLOW pattern not covered by a DENY (a DENY of the wildcard
        covers all; a DENY prefix covers the literal names and longer prefixes it starts)."""
        principal = str(requester.principal)
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (requester.address, WILDCARD_HOST)
        granting = granting_operations(operation)
        allowed: list[ResourcePattern] = []
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        seen_any = False
        for pattern, entries in self.cache.patterns(resource_type):
            seen_any = True
            for e in entries:
                if e.principal not in principals or e.host not in hosts:
                    continue
                if e.permission_type == _DENY and (e.operation == operation or e.operation == _ALL):
                    if pattern.pattern_type == PatternType.PREFIXED:
                        denied_prefixes.append(pattern.name)
                    else:
                        denied_literal.add(pattern.name)
                elif e.permission_type == _ALLOW and e.operation in granting:
                    allowed.append(pattern)
        if not seen_any:
            return self.allow_everyone_if_no_acl_found
        if WILDCARD_RESOURCE in denied_literal:
            return False
        for pattern in allowed:
            if any(pattern.name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if pattern.pattern_type == PatternType.LITERAL and pattern.name in denied_literal:
                continue
            return True
        return False

    # -- administration (DescribeAcls, CreateAcls, DeleteAcls) -----------------------------------

    def acls(self, selector: AclBindingFilter) -> list[AclBinding]:
        return self.cache.bindings(selector)

    async def create_acls(self, bindings: list[AclBinding]) -> list[str | None]:
        """Store each binding; per binding, why it was refused (None: stored). Bindings of one resource pattern
        are written together."""
        errors: list[str | None] = [validate_binding(b) for b in bindings]
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding, error in zip(bindings, errors):
            if error is None:
                by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        failed = await asyncio.gather(*(self._alter(pattern, lambda current, add=frozenset(added): current | add)
                                        for pattern, added in by_pattern.items()), return_exceptions=True)
        failures = {p: f for p, f in zip(by_pattern, failed) if isinstance(f, BaseException)}
        return [error if error is not None or b.pattern not in failures else f"could not store: {failures[b.pattern]}"
                for b, error in zip(bindings, errors)]

    async def delete_acls(self, selectors: list[AclBindingFilter]) -> list[list[AclBinding] | str]:
        """Delete what each filter matches; per filter, the deleted bindings, or why the deletion failed."""
        matched = [self.cache.bindings(s) for s in selectors]
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for bindings in matched:
            for b in bindings:
                by_pattern.setdefault(b.pattern, set()).add(b.entry)
        failed = await asyncio.gather(*(self._alter(pattern, lambda current, drop=frozenset(dropped): current - drop)
                                        for pattern, dropped in by_pattern.items()), return_exceptions=True)
        failures = {p: f for p, f in zip(by_pattern, failed) if isinstance(f, BaseException)}
        results: list[list[AclBinding] | str] = []
        for bindings in matched:
            errors = [failures[b.pattern] for b in bindings if b.pattern in failures]
            results.append(f"could not delete: {errors[0]}" if errors else bindings)
        return results

    async def _alter(self, pattern: ResourcePattern, change) -> None:
        new = await asyncio.get_running_loop().run_in_executor(None, self.store.alter, pattern, change)
        self.apply(pattern, new)

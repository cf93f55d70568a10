"""AclAuthorizer: Kafka's decisions (literal, wildcard and prefixed ACLs, implied operations, deny wins, hosts,
super users, allow.everyone.if.no.acl.found), by-resource-type checks, and changes through the store."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from broker.security.acl_store import FileAclStore
from broker.security.authorizer import AclAuthorizer
from pipeline.security.acl import (ANY_BINDING, AccessControlEntry, AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, PatternType, ResourcePattern, ResourcePatternFilter,
                                   ResourceType)
from pipeline.security.principal import KafkaPrincipal
from tests.support.acls import MemoryAclStore

READ, WRITE, DESCRIBE, ALL = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


@dataclass
class Who:
    principal: KafkaPrincipal
    address: str = "10.0.0.1"


ALICE, BOB = Who(KafkaPrincipal.user("alice")), Who(KafkaPrincipal.user("bob"))


def authorizer(*acls, super_users=(), allow_everyone=False) -> AclAuthorizer:
    auth = AclAuthorizer(MemoryAclStore(), super_users, allow_everyone)
    for kind, name, pattern, principal, host, operation, permission in acls:
        pattern = ResourcePattern(kind, name, pattern)
        auth.apply(pattern, auth.cache.entries(pattern) | {AccessControlEntry(principal, host, operation, permission)})
    return auth


def acl(name, operation, permission=ALLOW, principal="User:alice", host="*", kind=TOPIC,
        pattern=PatternType.LITERAL):
    return kind, name, pattern, principal, host, operation, permission


def test_no_acl_denies_unless_allow_everyone():
    assert not authorizer().authorize(ALICE, READ, TOPIC, "t")
    assert authorizer(allow_everyone=True).authorize(ALICE, READ, TOPIC, "t")
    # allow.everyone only applies to resources no ACL names.
    auth = authorizer(acl("t", READ, principal="User:bob"), allow_everyone=True)
    assert not auth.authorize(ALICE, READ, TOPIC, "t")
    assert auth.authorize(ALICE, READ, TOPIC, "other")


def test_literal_acl_grants_its_operation_its_principal_and_its_resource():
    auth = authorizer(acl("t", WRITE))
    assert auth.authorize(ALICE, WRITE, TOPIC, "t")
    assert not auth.authorize(ALICE, READ, TOPIC, "t")
    assert not auth.authorize(BOB, WRITE, TOPIC, "t")
    assert not auth.authorize(ALICE, WRITE, TOPIC, "t2")
    assert not auth.authorize(ALICE, WRITE, GROUP, "t")


@pytest.mark.parametrize("granted", [READ, WRITE, AclOperation.DELETE, AclOperation.ALTER, ALL])
def test_implied_describe(granted):
    assert authorizer(acl("t", granted)).authorize(ALICE, DESCRIBE, TOPIC, "t")


def test_alter_configs_implies_describe_configs_and_all_implies_everything():
    auth = authorizer(acl("t", AclOperation.ALTER_CONFIGS), acl("u", ALL))
    assert auth.authorize(ALICE, AclOperation.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not auth.authorize(ALICE, AclOperation.ALTER_CONFIGS, TOPIC, "x")
    assert all(auth.authorize(ALICE, op, TOPIC, "u") for op in (READ, WRITE, AclOperation.CREATE, DESCRIBE))
    assert not authorizer(acl("t", DESCRIBE)).authorize(ALICE, READ, TOPIC, "t")


def test_wildcard_resource_and_principal():
    auth = authorizer(acl("*", READ), acl("shared", WRITE, principal="User:*"))
    assert auth.authorize(ALICE, READ, TOPIC, "anything")
    assert auth.authorize(BOB, WRITE, TOPIC, "shared")
    assert not auth.authorize(BOB, READ, TOPIC, "anything")


def test_prefixed_acl_grants_a_family_of_topics():
    auth = authorizer(acl("payments-", WRITE, pattern=PatternType.PREFIXED),
                      acl("p", READ, pattern=PatternType.PREFIXED))
    assert auth.authorize(ALICE, WRITE, TOPIC, "payments-eu")
    assert auth.authorize(ALICE, WRITE, TOPIC, "payments-")
    assert not auth.authorize(ALICE, WRITE, TOPIC, "payment")
    assert auth.authorize(ALICE, READ, TOPIC, "payments-eu")
    assert not auth.authorize(ALICE, READ, TOPIC, "orders")


def test_deny_wins_over_allow():
    auth = authorizer(acl("payments-", WRITE, pattern=PatternType.PREFIXED), acl("payments-secret", WRITE, DENY),
                      acl("x", ALL), acl("x", READ, DENY, principal="User:*"))
    assert auth.authorize(ALICE, WRITE, TOPIC, "payments-eu")
    assert not auth.authorize(ALICE, WRITE, TOPIC, "payments-secret")
    assert not auth.authorize(ALICE, READ, TOPIC, "x")
    assert auth.authorize(ALICE, WRITE, TOPIC, "x")
    assert not authorizer(acl("t", ALL), acl("t", ALL, DENY)).authorize(ALICE, DESCRIBE, TOPIC, "t")


def test_hosts():
    auth = authorizer(acl("t", READ, host="10.0.0.1"), acl("t", WRITE, DENY, host="10.0.0.2"), acl("t", WRITE))
    assert auth.authorize(ALICE, READ, TOPIC, "t")
    assert not auth.authorize(Who(ALICE.principal, "10.0.0.9"), READ, TOPIC, "t")
    assert auth.authorize(ALICE, WRITE, TOPIC, "t")
    assert not auth.authorize(Who(ALICE.principal, "10.0.0.2"), WRITE, TOPIC, "t")


def test_super_users_pass_whatever_the_acls():
    auth = authorizer(acl("t", ALL, DENY, principal="User:*"), super_users={"User:admin"})
    admin = Who(KafkaPrincipal.user("admin"))
    assert auth.authorize(admin, WRITE, TOPIC, "t")
    assert auth.authorize(admin, AclOperation.ALTER, CLUSTER, "kafka-cluster")
    assert not auth.authorize(ALICE, WRITE, TOPIC, "t")


def test_decisions_follow_changes():
    auth = authorizer()
    assert not auth.authorize(ALICE, READ, TOPIC, "t")
    pattern = ResourcePattern(TOPIC, "t")
    auth.apply(pattern, {AccessControlEntry("User:alice", "*", READ, ALLOW)})
    assert auth.authorize(ALICE, READ, TOPIC, "t")
    auth.apply(pattern, frozenset())
    assert not auth.authorize(ALICE, READ, TOPIC, "t")


def test_authorize_any_topic():
    assert authorizer(acl("t", WRITE)).authorize_any(ALICE, WRITE, TOPIC)
    assert authorizer(acl("p-", WRITE, pattern=PatternType.PREFIXED)).authorize_any(ALICE, WRITE, TOPIC)
    assert not authorizer(acl("t", READ)).authorize_any(ALICE, WRITE, TOPIC)
    assert not authorizer(acl("t", WRITE), acl("*", WRITE, DENY)).authorize_any(ALICE, WRITE, TOPIC)
    assert not authorizer(acl("p-x", WRITE), acl("p-", WRITE, DENY, pattern=PatternType.PREFIXED)).authorize_any(
        ALICE, WRITE, TOPIC)
    assert authorizer(acl("t", WRITE), acl("u", WRITE, DENY)).authorize_any(ALICE, WRITE, TOPIC)
    assert authorizer(allow_everyone=True).authorize_any(ALICE, WRITE, TOPIC)


def test_create_list_and_delete_acls(tmp_path):
    async def scenario():
        auth = AclAuthorizer(FileAclStore(tmp_path))
        await auth.start()
        read = AclBinding(ResourcePattern(TOPIC, "t"), AccessControlEntry("User:alice", "*", READ, ALLOW))
        write = AclBinding(ResourcePattern(TOPIC, "p-", PatternType.PREFIXED),
                           AccessControlEntry("User:bob", "*", WRITE, ALLOW))
        bad = AclBinding(ResourcePattern(CLUSTER, "other"), AccessControlEntry("User:bob", "*", ALL, ALLOW))
        errors = await auth.create_acls([read, write, bad])
        assert errors[:2] == [None, None] and "kafka-cluster" in errors[2]
        assert auth.authorize(ALICE, READ, TOPIC, "t") and auth.authorize(BOB, WRITE, TOPIC, "p-1")
        assert set(auth.acls(ANY_BINDING)) == {read, write}
        assert auth.acls(AclBindingFilter()) == [read]  # the default filter: literal patterns
        reloaded = AclAuthorizer(FileAclStore(tmp_path))
        await reloaded.start()
        assert set(reloaded.acls(ANY_BINDING)) == {read, write}
        deleted = await auth.delete_acls([AclBindingFilter(ResourcePatternFilter(TOPIC, "p-1", PatternType.MATCH))])
        assert deleted == [[write]]
        assert not auth.authorize(BOB, WRITE, TOPIC, "p-1")
        return (tmp_path / "__acls.json").stat().st_mode & 0o777
    assert asyncio.run(scenario()) == 0o600

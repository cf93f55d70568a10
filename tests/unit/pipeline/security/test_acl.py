"""Kafka's ACL model: wire codes, display names, filters' matching rules and binding validation."""

from __future__ import annotations

import pytest

from pipeline.security.acl import (ANY_BINDING, AccessControlEntry, AccessControlEntryFilter, AclBinding,
                                   AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                   ResourcePatternFilter, ResourceType, granting_operations, validate_binding)
from pipeline.security import acl_zk


def test_codes_are_kafkas():
    assert [ResourceType.ANY, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
            ResourceType.TRANSACTIONAL_ID] == [1, 2, 3, 4, 5]
    assert [PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED] == [1, 2, 3, 4]
    assert [AclOperation.ANY, AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
            AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE] == list(range(1, 13))
    assert [AclPermissionType.ANY, AclPermissionType.DENY, AclPermissionType.ALLOW] == [1, 2, 3]


def test_names_display_and_parse_as_kafkas():
    assert AclOperation.IDEMPOTENT_WRITE.display == "IdempotentWrite"
    assert ResourceType.TRANSACTIONAL_ID.display == "TransactionalId"
    assert AclOperation.parse("DescribeConfigs") is AclOperation.DESCRIBE_CONFIGS
    assert AclOperation.parse("describe-configs") is AclOperation.DESCRIBE_CONFIGS
    assert AclOperation.parse("CLUSTER_ACTION") is AclOperation.CLUSTER_ACTION
    with pytest.raises(ValueError):
        AclOperation.parse("Fly")


def test_implied_operations():
    assert AclOperation.READ in granting_operations(AclOperation.DESCRIBE)
    assert AclOperation.ALTER_CONFIGS in granting_operations(AclOperation.DESCRIBE_CONFIGS)
    assert granting_operations(AclOperation.WRITE) == {AclOperation.WRITE, AclOperation.ALL}


def _literal(name, kind=ResourceType.TOPIC):
    return ResourcePattern(kind, name, PatternType.LITERAL)


def test_match_filter_finds_literal_wildcard_and_prefixed_patterns():
    selector = ResourcePatternFilter(ResourceType.TOPIC, "payments-eu", PatternType.MATCH)
    assert selector.matches(_literal("payments-eu"))
    assert selector.matches(_literal("*"))
    assert selector.matches(ResourcePattern(ResourceType.TOPIC, "payments-", PatternType.PREFIXED))
    assert not selector.matches(ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED))
    assert not selector.matches(_literal("payments-eu", ResourceType.GROUP))


def test_exact_and_any_pattern_filters():
    prefixed = ResourcePattern(ResourceType.TOPIC, "payments-", PatternType.PREFIXED)
    assert not ResourcePatternFilter(ResourceType.TOPIC, "payments-").matches(prefixed)  # LITERAL by default
    assert ResourcePatternFilter(ResourceType.ANY, "payments-", PatternType.ANY).matches(prefixed)
    assert ResourcePatternFilter(ResourceType.TOPIC, None, PatternType.PREFIXED).matches(prefixed)
    assert not ResourcePatternFilter(ResourceType.TOPIC, "payments-eu", PatternType.ANY).matches(prefixed)


def test_entry_filter():
    entry = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    assert AccessControlEntryFilter().matches(entry)
    assert AccessControlEntryFilter("User:alice", operation=AclOperation.READ).matches(entry)
    assert not AccessControlEntryFilter("User:bob").matches(entry)
    assert not AccessControlEntryFilter(permission_type=AclPermissionType.DENY).matches(entry)
    assert ANY_BINDING.matches(AclBinding(_literal("t"), entry))
    assert not AclBindingFilter(entry=AccessControlEntryFilter(host="10.0.0.1")).matches(AclBinding(_literal("t"), entry))


@pytest.mark.parametrize(("pattern", "entry", "why"), [
    (ResourcePattern(ResourceType.ANY, "t"), ("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW), "type"),
    (ResourcePattern(ResourceType.TOPIC, "t", PatternType.MATCH),
     ("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW), "pattern"),
    (ResourcePattern(ResourceType.CLUSTER, "c"), ("User:a", "*", AclOperation.ALTER, AclPermissionType.ALLOW),
     "kafka-cluster"),
    (_literal("t"), ("User:a", "*", AclOperation.ANY, AclPermissionType.ALLOW), "operation"),
    (_literal("t"), ("User:a", "*", AclOperation.READ, AclPermissionType.ANY), "permission"),
    (_literal("t"), ("alice", "*", AclOperation.READ, AclPermissionType.ALLOW), "principal"),
])
def test_invalid_bindings_are_refused(pattern, entry, why):
    assert why in validate_binding(AclBinding(pattern, AccessControlEntry(*entry)))


def test_zookeeper_json_is_kafkas():
    entry = AccessControlEntry("User:alice", "*", AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW)
    assert acl_zk.entries_json([entry]) == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                                            b'"operation":"IdempotentWrite","host":"*"}]}')
    assert acl_zk.parse_entries(acl_zk.entries_json([entry])) == {entry}
    prefixed = ResourcePattern(ResourceType.TOPIC, "pay", PatternType.PREFIXED)
    assert acl_zk.resource_path(prefixed) == "/kafka-acl-extended/prefixed/Topic/pay"
    assert acl_zk.resource_path(_literal("g", ResourceType.GROUP)) == "/kafka-acl/Group/g"
    assert acl_zk.change_json(_literal("t")) == b"Topic:t"
    assert acl_zk.change_json(prefixed) == (b'{"version":1,"resourceType":"Topic","name":"pay",'
                                            b'"patternType":"Prefixed"}')
    assert acl_zk.parse_change(acl_zk.change_json(prefixed), extended=True) == prefixed
    assert acl_zk.parse_change(b"Topic:a:b", extended=False) == _literal("a:b")

"""`acls` option handling: the bindings --add builds (principals x hosts x operations per resource, --producer and
--consumer roles) and the usage errors kafka-acls gives."""

from __future__ import annotations

import pytest

from pipeline.cli import build_parser
from pipeline.cli.acls import _bindings, run_acls
from pipeline.cli.common import CliError
from pipeline.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType


def parse(*argv: str):
    return build_parser().parse_args(["acls", *argv])


def summary(args) -> set[tuple]:
    return {(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type, b.entry.principal, b.entry.host,
             b.entry.operation, b.entry.permission_type) for b in _bindings(args)}


def test_principals_hosts_and_operations_multiply():
    args = parse("--add", "--allow-principal", "User:a", "--allow-principal", "User:b", "--allow-host", "10.0.0.1",
                 "--operation", "Read", "--operation", "describe-configs", "--topic", "t")
    assert len(summary(args)) == 4
    assert (ResourceType.TOPIC, "t", PatternType.LITERAL, "User:b", "10.0.0.1", AclOperation.DESCRIBE_CONFIGS,
            AclPermissionType.ALLOW) in summary(args)


def test_operation_defaults_to_all_and_deny_hosts_to_any():
    args = parse("--add", "--deny-principal", "User:m", "--cluster")
    assert summary(args) == {(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:m", "*",
                              AclOperation.ALL, AclPermissionType.DENY)}


def test_producer_and_consumer_roles():
    args = parse("--add", "--allow-principal", "User:p", "--producer", "--consumer", "--topic", "in-",
                 "--resource-pattern-type", "prefixed", "--group", "g")
    operations = {(kind, op) for kind, _, _, _, _, op, _ in summary(args)}
    assert operations == {(ResourceType.TOPIC, op) for op in (AclOperation.WRITE, AclOperation.DESCRIBE,
                                                               AclOperation.CREATE, AclOperation.READ)} | {
        (ResourceType.GROUP, AclOperation.READ)}
    assert {p for _, name, p, *_ in summary(args) if name == "in-"} == {PatternType.PREFIXED}


@pytest.mark.parametrize("argv", [
    ("--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"),
    ("--add", "--allow-principal", "User:a", "--producer", "--operation", "Read", "--topic", "t"),
])
def test_usage_errors(argv):
    with pytest.raises(CliError):
        run_acls(parse(*argv))


def test_unknown_operation_is_refused_by_the_parser():
    with pytest.raises(SystemExit):
        parse("--list", "--operation", "Fly")

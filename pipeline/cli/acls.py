"""`python -m pipeline acls ...`: add, remove and list ACLs, with kafka-acls.sh's flags and output.

Resources: --topic, --group, --cluster, --transactional-id (each repeatable but --cluster) with
--resource-pattern-type literal|prefixed (add) or also match|any (list, remove). Entries: --allow-principal /
--deny-principal with --allow-host / --deny-host (default ``*``) and --operation (repeatable, default All);
--producer and --consumer add the operations those roles need. --command-config names a file of client
security properties (security.protocol, sasl.*, ssl.*) for the connection.
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterable

from pipeline.cli.common import CliError, open_admin
from pipeline.client.admin import AdminClient
from pipeline.security.acl import (CLUSTER_NAME, WILDCARD_HOST, AccessControlEntry, AccessControlEntryFilter,
                                   AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
                                   ResourcePattern, ResourcePatternFilter, ResourceType)

EXIT_USAGE = 2


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `acls`."""
    parser = subparsers.add_parser(
        "acls", parents=[common], help="add, remove and list ACLs (like kafka-acls.sh)",
        description="Add, remove and list the ACLs the brokers' authorizer checks (like kafka-acls.sh): "
                    "DescribeAcls, CreateAcls and DeleteAcls, which need DESCRIBE / ALTER on the cluster.",
        epilog="examples:\n"
               "  python -m pipeline acls --add --allow-principal User:alice --operation Write --topic events\n"
               "  python -m pipeline acls --add --allow-principal User:etl --consumer --topic offline- "
               "--resource-pattern-type prefixed --group etl\n"
               "  python -m pipeline acls --list --topic events\n"
               "  python -m pipeline acls --remove --force --topic events",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs described by the other options")
    action.add_argument("--remove", action="store_true",
                        help="remove the ACLs described (all ACLs of the resources when no principal is given)")
    action.add_argument("--list", action="store_true", help="list the ACLs of the resources (default: all ACLs)")
    resources = parser.add_argument_group("resources")
    resources.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic (repeatable; * = all)")
    resources.add_argument("--group", action="append", default=[], metavar="NAME",
                           help="a consumer group (repeatable; * = all)")
    resources.add_argument("--cluster", action="store_true", help="the cluster")
    resources.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                           help="a transactional id (repeatable; * = all)")
    resources.add_argument("--resource-pattern-type", default="literal", type=_pattern_type,
                           metavar="literal|prefixed|match|any",
                           help="how the resource names match (default literal; match and any only for --list and "
                                "--remove)")
    entries = parser.add_argument_group("entries")
    entries.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                         help="a principal to allow, such as User:alice or User:* (repeatable)")
    entries.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                         help="a principal to deny (repeatable)")
    entries.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                         help="a host the allowed principals may connect from (default: *)")
    entries.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                         help="a host the denied principals are denied from (default: *)")
    entries.add_argument("--operation", action="append", default=[], type=_operation, metavar="OPERATION",
                         help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                              "AlterConfigs, IdempotentWrite or All (repeatable; default All)")
    entries.add_argument("--producer", action="store_true",
                         help="the producer role: Write, Describe and Create on the topics")
    entries.add_argument("--consumer", action="store_true",
                         help="the consumer role: Read and Describe on the topics, Read on the group(s)")
    entries.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL",
                         help="with --list: only the ACLs of this principal")
    parser.add_argument("--force", action="store_true", help="remove without asking for confirmation")
    parser.set_defaults(command=run_acls, prog=parser.prog)


def _pattern_type(text: str) -> PatternType:
    try:
        pattern = PatternType.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected literal, prefixed, match or any, got {text!r}") from None
    if pattern == PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(f"expected literal, prefixed, match or any, got {text!r}")
    return pattern


def _operation(text: str) -> AclOperation:
    try:
        operation = AclOperation.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise argparse.ArgumentTypeError(f"{text!r} is not an operation an ACL can name")
    return operation


def run_acls(args: argparse.Namespace) -> int:
    if (args.producer or args.consumer) and args.operation:
        raise CliError("--producer and --consumer set the operations: leave out --operation", EXIT_USAGE)
    if args.consumer and not args.group:
        raise CliError("--consumer needs --group (the consumers' group)", EXIT_USAGE)
    if (args.producer or args.consumer) and not args.topic:
        raise CliError("--producer and --consumer need --topic", EXIT_USAGE)
    with open_admin(args) as admin:
        if args.add:
            return _add(admin, args)
        if args.remove:
            return _remove(admin, args)
        return _list(admin, args)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    named = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return named


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    """The ACLs --add would add and an explicit --remove would remove (one per resource, principal, host,
    operation)."""
    pattern_type = args.resource_pattern_type
    wanted: list[tuple[ResourcePattern, AclOperation]] = []
    for kind, name in _resources(args):
        pattern = ResourcePattern(kind, name, pattern_type)
        if args.producer or args.consumer:
            if kind == ResourceType.TOPIC:
                operations: Iterable[AclOperation] = ()
                if args.producer:
                    operations = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
                if args.consumer:
                    operations = (*operations, AclOperation.READ, AclOperation.DESCRIBE)
            elif kind == ResourceType.GROUP and args.consumer:
                operations = (AclOperation.READ,)
            else:
                continue
        else:
            operations = args.operation or (AclOperation.ALL,)
        wanted += [(pattern, op) for op in dict.fromkeys(operations)]
    bindings = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            for host in hosts or [WILDCARD_HOST]:
                bindings += [AclBinding(pattern, AccessControlEntry(principal, host, op, permission))
                             for pattern, op in wanted]
    return bindings


def _add(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.resource_pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CliError("--add takes --resource-pattern-type literal or prefixed", EXIT_USAGE)
    if not _resources(args):
        raise CliError("--add needs a resource: --topic, --group, --cluster or --transactional-id", EXIT_USAGE)
    bindings = _bindings(args)
    if not bindings:
        raise CliError("--add needs --allow-principal or --deny-principal", EXIT_USAGE)
    for pattern, entries in _by_pattern(bindings).items():
        _print_entries("Adding ACLs for resource", pattern, entries)
    admin.create_acls(bindings)
    for pattern in _by_pattern(bindings):
        _print_current(admin, ResourcePatternFilter(pattern.resource_type, pattern.name, pattern.pattern_type))
    return 0


def _remove(admin: AdminClient, args: argparse.Namespace) -> int:
    resources = _resources(args)
    if not resources:
        raise CliError("--remove needs a resource: --topic, --group, --cluster or --transactional-id", EXIT_USAGE)
    pattern_filters = [ResourcePatternFilter(kind, name, args.resource_pattern_type) for kind, name in resources]
    if args.allow_principal or args.deny_principal:
        selectors = [AclBindingFilter(ResourcePatternFilter(b.pattern.resource_type, b.pattern.name,
                                                            args.resource_pattern_type),
                                      AccessControlEntryFilter(b.entry.principal, b.entry.host, b.entry.operation,
                                                               b.entry.permission_type))
                     for b in _bindings(args)]
    else:
        selectors = [AclBindingFilter(p) for p in pattern_filters]
    if not args.force and not _confirm(pattern_filters):
        return 0
    removed = admin.delete_acls(selectors)
    for pattern, entries in _by_pattern(removed).items():
        _print_entries("Removed ACLs for resource", pattern, entries)
    if not removed:
        print("No ACLs matched.")
    return 0


def _confirm(pattern_filters: list[ResourcePatternFilter]) -> bool:
    names = ", ".join(f"`{_describe_filter(p)}`" for p in pattern_filters)
    print(f"Are you sure you want to remove ACLs from resource filter(s) {names}? (y/n)", flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _list(admin: AdminClient, args: argparse.Namespace) -> int:
    resources = _resources(args)
    principals = args.principal or [None]
    if not resources:
        filters = [ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)]
    else:
        filters = [ResourcePatternFilter(kind, name, args.resource_pattern_type) for kind, name in resources]
    for pattern_filter in filters:
        found: list[AclBinding] = []
        for principal in principals:
            found += admin.describe_acls(AclBindingFilter(pattern_filter, AccessControlEntryFilter(principal)))
        for pattern, entries in _by_pattern(found).items():
            _print_entries("Current ACLs for resource", pattern, entries)
    return 0


def _print_current(admin: AdminClient, pattern_filter: ResourcePatternFilter) -> None:
    for pattern, entries in _by_pattern(admin.describe_acls(AclBindingFilter(pattern_filter))).items():
        _print_entries("Current ACLs for resource", pattern, entries)


def _by_pattern(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, list[AccessControlEntry]]:
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in bindings:
        entries = grouped.setdefault(binding.pattern, [])
        if binding.entry not in entries:
            entries.append(binding.entry)
    return grouped


def _print_entries(title: str, pattern: ResourcePattern, entries: list[AccessControlEntry]) -> None:
    print(f"{title} `{pattern}`: ")
    for entry in entries:
        print(f" \t{entry} ")
    print()


def _describe_filter(pattern: ResourcePatternFilter) -> str:
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")

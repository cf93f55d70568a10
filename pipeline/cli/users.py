"""`users`: SCRAM credentials of the brokers' users, with kafka-configs' flags.

    python -m pipeline users --bootstrap-server B --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
    python -m pipeline users --bootstrap-server B --describe [--entity-name alice]
    python -m pipeline users --bootstrap-server B --alter --delete-config SCRAM-SHA-512 --entity-name alice

Through the brokers (AlterUserScramCredentials / DescribeUserScramCredentials; the password never leaves this
process, only the salted password), with --command-config FILE holding this admin's own security settings; or,
with --zookeeper HOST:PORT/CHROOT, straight to the cluster's ZooKeeper (/config/users/<user> and a change
notification the brokers follow), as kafka-configs --zookeeper did: the way to create the first users of a
cluster whose listeners all need a login.
"""

from __future__ import annotations

import argparse
import secrets
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from pipeline.cli.common import EXIT_UNREACHABLE, CliError, command_config_security, open_admin, open_zookeeper
from pipeline.client.admin import AdminClient
from pipeline.client.errors import KafkaConnectionError
from pipeline.security.scram import MECHANISMS, credential_from_salted_password, salted_password
from pipeline.security.scram_users import parse_add_config, parse_user_config, user_config_json
from pipeline.zk import layout


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `users`."""
    parser = subparsers.add_parser(
        "users", parents=[common], help="add, describe and delete users' SCRAM credentials (kafka-configs)",
        description="Manage the SCRAM credentials the brokers authenticate SASL clients with (kafka-configs' "
                    "--entity-type users). With --zookeeper the credentials are written to ZooKeeper directly "
                    "(bootstrapping a cluster without any user yet); otherwise through a broker, logging in with "
                    "--command-config's settings.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python -m pipeline users --alter --entity-type users --entity-name alice \\\n"
               "      --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'\n"
               "  python -m pipeline users --describe --entity-name alice --command-config admin.properties\n"
               "  python -m pipeline users --alter --delete-config SCRAM-SHA-512 --entity-name alice")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--alter", action="store_true", help="add or delete credentials")
    mode.add_argument("--describe", action="store_true", help="list users and their mechanisms and iterations")
    parser.add_argument("--entity-type", default="users", choices=["users"], help="only users (the default)")
    parser.add_argument("--entity-name", metavar="USER", help="the user (--describe: default every user)")
    parser.add_argument("--add-config", metavar="CONFIGS",
                        help="SCRAM-SHA-512=[iterations=8192,password=...],SCRAM-SHA-256=[password=...]")
    parser.add_argument("--delete-config", metavar="MECHANISMS", help="SCRAM-SHA-512[,SCRAM-SHA-256]")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties with this admin's security settings (security.protocol, sasl.*, ssl.*)")
    parser.set_defaults(command=run_users, prog=parser.prog)


def run_users(args: argparse.Namespace) -> int:
    if args.describe:
        described = _describe(args)
        for user, mechanisms in sorted(described.items()):
            configs = ",".join(f"{mechanism}=iterations={iterations}" for mechanism, iterations in sorted(mechanisms.items()))
            print(f"SCRAM credential configs for user-principal '{user}' are {configs}")
        return 0
    if not args.entity_name:
        raise CliError("--alter needs --entity-name USER", exit_code=2)
    if not args.add_config and not args.delete_config:
        raise CliError("--alter needs --add-config or --delete-config", exit_code=2)
    try:
        added = parse_add_config(args.add_config) if args.add_config else {}
    except ValueError as exc:
        raise CliError(f"--add-config: {exc}", exit_code=2) from None
    deleted = [name.strip() for name in (args.delete_config or "").split(",") if name.strip()]
    unknown = [name for name in deleted if name not in MECHANISMS]
    if unknown:
        raise CliError(f"--delete-config: unknown SCRAM mechanism {unknown[0]!r}", exit_code=2)
    if args.zookeeper:
        _alter_in_zookeeper(args, added, deleted)
    else:
        with _admin(args) as admin:
            admin.alter_user_scram_credentials({args.entity_name: added} if added else None,
                                               {args.entity_name: deleted} if deleted else None)
    print(f"Completed updating config for user {args.entity_name}.", file=sys.stderr)
    return 0


def _describe(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    if args.zookeeper:
        zk = open_zookeeper(args)
        try:
            users = [args.entity_name] if args.entity_name else (zk.get_children(layout.CONFIG_USERS)
                                                                 if zk.exists(layout.CONFIG_USERS) else [])
            described = {}
            for user in users:
                credentials = _read_user(zk, user)
                if credentials:
                    described[user] = {mechanism: c.iterations for mechanism, c in credentials.items()}
            return described
        finally:
            _close(zk)
    with _admin(args) as admin:
        return admin.describe_user_scram_credentials([args.entity_name] if args.entity_name else None)


def _admin(args: argparse.Namespace) -> AdminClient:
    """The AdminClient logged in with --command-config's settings; without them, a broker closing the connection
    most likely wants a login, which the error says."""
    try:
        return open_admin(args, command_config_security(args.command_config))
    except KafkaConnectionError as exc:
        if args.command_config:
            raise
        raise CliError(f"{exc} (a SASL or SSL listener needs --command-config FILE with this admin's "
                       "security.protocol and login)", exit_code=EXIT_UNREACHABLE) from None


def _read_user(zk: KazooClient, user: str) -> dict:
    try:
        data, _ = zk.get(layout.user_config_path(user))
    except NoNodeError:
        return {}
    return parse_user_config(data)


def _alter_in_zookeeper(args: argparse.Namespace, added: dict[str, tuple[str, int]], deleted: list[str]) -> None:
    zk = open_zookeeper(args)
    try:
        credentials = _read_user(zk, args.entity_name)
        for mechanism in deleted:
            if mechanism not in credentials:
                raise CliError(f"user {args.entity_name!r} has no {mechanism} credential")
            del credentials[mechanism]
        for mechanism, (password, iterations) in added.items():
            salt = secrets.token_bytes(32)
            credentials[mechanism] = credential_from_salted_password(
                mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)
        path, data = layout.user_config_path(args.entity_name), user_config_json(credentials)
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            zk.set(path, data)
        zk.create(f"{layout.CONFIG_CHANGES}/{layout.CONFIG_CHANGE_PREFIX}", layout.user_config_change(args.entity_name),
                  sequence=True, makepath=True)
    finally:
        _close(zk)


def _close(zk: KazooClient) -> None:
    zk.stop()
    zk.close()

"""``--command-config FILE``: the client properties a command line tool connects with, as Kafka's tools take them.

The file holds the client security settings (security.protocol, sasl.*, ssl.*) and, for the commands that write
to ZooKeeper, the ZooKeeper identity (zookeeper.set.acl, zookeeper.digest.file); ``python -m pipeline``'s
subcommands, ``python -m audit trace`` and ``python -m mirror lineage`` read it. The deployment writes one for
people: ``var/secrets/admin.properties``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import Config, read_properties_file
from pipeline.security.client_settings import PLAINTEXT_SECURITY, SECURITY_PROPERTIES, ClientSecurity
from pipeline.zk.security import OPEN_ZOOKEEPER, ZOOKEEPER_SECURITY_PROPERTIES, ZooKeeperSecurity

__all__ = ["COMMAND_CONFIG_PROPERTIES", "CommandConfig", "add_command_config_option", "read_command_config"]

COMMAND_CONFIG_PROPERTIES = (*SECURITY_PROPERTIES, *ZOOKEEPER_SECURITY_PROPERTIES)


@dataclass(frozen=True)
class CommandConfig:
    """A tool's connection settings: to the brokers (``client``) and to ZooKeeper (``zookeeper``); ``values`` are
    the client security settings by name, to pass on to a Producer's or a consumer's configuration, and
    ``zookeeper_values`` the ZooKeeper ones, for a ConsumerConnector's."""

    client: ClientSecurity = PLAINTEXT_SECURITY
    zookeeper: ZooKeeperSecurity = OPEN_ZOOKEEPER
    values: dict[str, Any] = field(default_factory=dict, repr=False)
    zookeeper_values: dict[str, Any] = field(default_factory=dict, repr=False)


class _CommandConfigFile(Config):
    kind = "--command-config property"


def read_command_config(path: str | Path | None) -> CommandConfig:
    """The settings of ``path`` (None: plaintext, no ZooKeeper identity). As with Kafka's tools, the file may hold
    other client properties too (client.id, ...): they are left to the clients that know them."""
    if not path:
        return CommandConfig()
    known = {name for p in COMMAND_CONFIG_PROPERTIES for name in (p.name, *p.aliases)}
    config = _CommandConfigFile(COMMAND_CONFIG_PROPERTIES,
                                {k: v for k, v in read_properties_file(path).items() if k in known})
    values = {p.name: config[p.name] for p in SECURITY_PROPERTIES}
    zookeeper_values = {p.name: config[p.name] for p in ZOOKEEPER_SECURITY_PROPERTIES}
    return CommandConfig(ClientSecurity.from_values(values), ZooKeeperSecurity.from_values(zookeeper_values), values,
                         zookeeper_values)


def add_command_config_option(parser: argparse.ArgumentParser | Any, default: Any = None) -> None:
    """``--command-config FILE`` on ``parser`` (or an argument group)."""
    parser.add_argument("--command-config", dest="command_config", metavar="FILE", default=default,
                        help="client properties file: security.protocol, sasl.*, ssl.* (and zookeeper.set.acl, "
                             "zookeeper.digest.file for commands writing to ZooKeeper)")

"""--command-config FILE: the client and ZooKeeper security settings a command line tool connects with."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli.common import command_config
from pipeline.cli import build_parser
from pipeline.config import ConfigError
from pipeline.security.command_config import read_command_config


def test_a_file_of_client_properties(tmp_path: Path) -> None:
    (tmp_path / "digest").write_text("pipeline:zk")
    path = tmp_path / "admin.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                    "sasl.password=pw\nssl.truststore.location=/ca.pem\nzookeeper.set.acl=true\n"
                    f"zookeeper.digest.file={tmp_path / 'digest'}\n")
    found = read_command_config(path)
    assert (found.client.protocol, found.client.username, found.client.ca_file) == ("SASL_SSL", "admin", "/ca.pem")
    assert found.zookeeper.set_acl and found.values["sasl.password"] == "pw"
    assert found.zookeeper_values["zookeeper.set.acl"] is True
    assert read_command_config(None).client.protocol == "PLAINTEXT"


def test_other_client_properties_are_left_alone_and_bad_values_refused(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("client.id=ignored\nsecurity.protocol=SSL\n")
    assert read_command_config(path).client.protocol == "SSL"
    path.write_text("security.protocol=TLS\n")
    with pytest.raises(ConfigError, match="security.protocol"):
        read_command_config(path)


def test_the_cli_takes_it_before_or_after_the_subcommand(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SSL\n")
    for argv in (["--command-config", str(path), "topics", "list"], ["topics", "list", "--command-config", str(path)]):
        args = build_parser().parse_args(argv)
        assert command_config(args).client.protocol == "SSL"

"""ZooKeeperSecurity: the digest identity read from its file, and the ACL each path is created with."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import Permissions

from pipeline.config import ConfigError
from pipeline.zk.security import OPEN_ZOOKEEPER, ZooKeeperSecurity


def secured(tmp_path: Path) -> ZooKeeperSecurity:
    digest = tmp_path / "digest"
    digest.write_text("pipeline:zk-secret\n")
    return ZooKeeperSecurity.from_values({"zookeeper.set.acl": True, "zookeeper.digest.file": str(digest)})


def test_acls_by_path(tmp_path: Path) -> None:
    security = secured(tmp_path)
    assert security.auth_data == [("digest", "pipeline:zk-secret")]
    owner, world = security.acl_for("/brokers/topics/t")
    assert owner.id.scheme == "digest" and owner.id.id.startswith("pipeline:") and owner.perms == Permissions.ALL
    assert (world.id.id, world.perms) == ("anyone", Permissions.READ)
    assert [a.id.scheme for a in security.acl_for("/config/users/alice")] == ["digest"]
    assert [a.id.scheme for a in security.acl_for("/config/users")] == ["digest"]
    assert security.acl_for("/consumers")[1].perms == Permissions.READ | Permissions.CREATE
    assert security.acl_for("/consumers/mirror")[1].perms == Permissions.READ
    assert OPEN_ZOOKEEPER.acl_for("/brokers") is None and OPEN_ZOOKEEPER.auth_data == []


def test_the_password_is_never_shown(tmp_path: Path) -> None:
    assert "zk-secret" not in repr(secured(tmp_path))


def test_acls_need_a_digest_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="zookeeper.digest.file"):
        ZooKeeperSecurity.from_values({"zookeeper.set.acl": True})
    (tmp_path / "bad").write_text("no-colon")
    with pytest.raises(ConfigError, match="USER:PASSWORD"):
        ZooKeeperSecurity.from_values({"zookeeper.digest.file": str(tmp_path / "bad")})
    with pytest.raises(ConfigError, match="missing"):
        ZooKeeperSecurity.from_values({"zookeeper.digest.file": str(tmp_path / "missing")})

"""ZooKeeper ACLs (zookeeper.set.acl): a client with the digest creates znodes that a client without it can read but
not change, the credentials under /config/users not even read, and anyone can still start a group in /consumers."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError

from pipeline.zk.client import BoundedZk, connect
from pipeline.zk.security import ZooKeeperSecurity


@pytest.fixture
def secured(tmp_path: Path) -> ZooKeeperSecurity:
    digest = tmp_path / "zookeeper.digest"
    digest.write_text("pipeline:s3cret-digest\n")
    return ZooKeeperSecurity.from_values({"zookeeper.set.acl": True, "zookeeper.digest.file": str(digest)})


def test_only_the_digest_changes_what_it_created(zk_connect: str, secured: ZooKeeperSecurity) -> None:
    owner = connect(zk_connect, security=secured)
    stranger = connect(zk_connect)
    try:
        owner.create("/brokers/topics/events", b'{"partitions": {}}', makepath=True)
        owner.ensure_path("/brokers/ids")
        owner.create("/config/users/alice", b"salted", makepath=True)
        transaction = owner.transaction()
        transaction.create("/brokers/topics/other", b"{}")
        transaction.commit()
        BoundedZk(owner, 5.0).sync("create", "/controller_epoch", b"1")

        assert stranger.get("/brokers/topics/events")[0] == b'{"partitions": {}}'
        for path in ("/brokers/topics/events", "/brokers/topics/other", "/controller_epoch", "/config/users/alice"):
            with pytest.raises(NoAuthError):
                stranger.set(path, b"rewritten")
        with pytest.raises(NoAuthError):
            stranger.create("/brokers/ids/7", b"{}")
        with pytest.raises(NoAuthError):
            stranger.delete("/brokers/topics/other")
        with pytest.raises(NoAuthError):
            stranger.get("/config/users/alice")
        with pytest.raises(NoAuthError):
            stranger.get_children("/config/users")
        assert stranger.get("/config")[0] == b""  # only the credentials are hidden

        owner.set("/brokers/topics/events", b"{}")
        assert owner.get("/config/users/alice")[0] == b"salted"

        owner.ensure_path("/consumers/mirror/offsets")
        stranger.create("/consumers/cli-group/ids/c1", b"{}", makepath=True)
        with pytest.raises(NoAuthError):
            stranger.create("/consumers/mirror/offsets/events", b"0")
    finally:
        for client in (owner, stranger):
            client.stop()
            client.close()


def test_a_stranger_cannot_write_into_a_secured_chroot(zk_connect: str, secured: ZooKeeperSecurity) -> None:
    owner = connect(zk_connect, security=secured)
    stranger = connect(zk_connect)
    try:
        with pytest.raises(NoAuthError):
            stranger.create("/controller", b"{}")
    finally:
        for client in (owner, stranger):
            client.stop()
            client.close()

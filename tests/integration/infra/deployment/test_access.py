"""infra.deployment.access.provision against a real ZooKeeper, as `make pipeline-up` runs it before the brokers start:
Kafka's SCRAM credential and ACL znodes with their change notifications, written once, protected from strangers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kazoo.exceptions import NoAuthError

from infra.deployment.access import provision
from infra.deployment.secrets import KAFKA_USERS, ensure
from infra.deployment.topology import DEFAULT_TOPOLOGY, load
from pipeline.security.scram import ScramCredential, password_matches
from pipeline.zk.client import connect
from pipeline.zk.security import ZooKeeperSecurity
from tests.support.zookeeper import unique_chroot


def test_users_and_acls_are_written_once_in_kafka_s_form(zookeeper_server, tmp_path: Path) -> None:
    document = yaml.safe_load(DEFAULT_TOPOLOGY.read_text())
    document.update(var_dir=str(tmp_path / "var"), zookeeper={"connect": zookeeper_server.connect_string})
    document["offline"]["chroot"] = unique_chroot("offline")
    path = tmp_path / "topology.yml"
    path.write_text(yaml.safe_dump(document))
    topology = load(path)
    secrets = ensure(topology)

    users, resources = provision(topology, topology.offline, secrets)
    assert users == len(KAFKA_USERS) and resources > 0
    assert provision(topology, topology.offline, secrets) == (0, 0)

    stranger = connect(topology.cluster_zookeeper(topology.offline))
    try:
        with pytest.raises(NoAuthError):
            stranger.get("/config/users/etl")
        acl = json.loads(stranger.get("/kafka-acl/Topic/PageViewEvent")[0])
        assert {"principal": "User:etl", "permissionType": "Allow", "operation": "Read", "host": "*"} in acl["acls"]
        assert stranger.get_children("/kafka-acl-changes") and stranger.get_children("/config/changes")
        with pytest.raises(NoAuthError):
            stranger.set("/kafka-acl/Topic/PageViewEvent", b'{"version":1,"acls":[]}')
    finally:
        stranger.stop()
        stranger.close()
    digest = ZooKeeperSecurity.from_values({"zookeeper.digest.file": str(secrets.zookeeper_digest_file)})
    owner = connect(topology.cluster_zookeeper(topology.offline), security=digest)
    try:
        stored = json.loads(owner.get("/config/users/etl")[0])["config"]["SCRAM-SHA-512"]
        assert password_matches("SCRAM-SHA-512", ScramCredential.from_string(stored), secrets.password("etl"))
    finally:
        owner.stop()
        owner.close()


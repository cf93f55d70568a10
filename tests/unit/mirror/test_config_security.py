"""The mirror's source and target client security settings (consumer. and producer. prefixes) and its ZooKeeper
identity reach the connectors, the producer and the admin clients built from them."""

from __future__ import annotations

from pathlib import Path

from mirror.config import MirrorConfig


def test_source_and_target_security_settings(tmp_path: Path) -> None:
    digest = tmp_path / "digest"
    digest.write_text("pipeline:zk-secret")
    config = MirrorConfig({"source.clusters": "dc1=zk:2181/dc1", "target.zookeeper.connect": "zk:2181/offline",
                           "whitelist": ".*", "consumer.security.protocol": "SASL_SSL",
                           "consumer.sasl.mechanism": "SCRAM-SHA-512", "consumer.sasl.username": "mirror",
                           "consumer.sasl.password": "pw", "consumer.zookeeper.set.acl": "true",
                           "consumer.zookeeper.digest.file": str(digest), "producer.security.protocol": "SSL",
                           "producer.ssl.ca.location": "/secrets/ca.pem"})
    source = config.consumer_config("dc1")
    assert source.security.protocol == "SASL_SSL" and source.security.username == "mirror"
    assert source.zookeeper_security.set_acl and source.zookeeper_security.user == "pipeline"
    target = config.producer_config().security
    assert target.protocol == "SSL" and target.ca_file == "/secrets/ca.pem"

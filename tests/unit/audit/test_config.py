"""The audit's settings carry the client security settings (one set for every cluster it reads)."""

from __future__ import annotations

from audit.config import AuditConfig
from pipeline.client.consumer_config import StaticConnectorConfig
from pipeline.security.client_settings import security_settings


def test_security_settings_reach_the_readers_configuration() -> None:
    config = AuditConfig({"offline.zookeeper.connect": "zk:2181/offline", "state.dir": "/s",
                          "security.protocol": "SASL_SSL", "sasl.jaas.config":
                          'org.apache.kafka.common.security.scram.ScramLoginModule required username="audit" '
                          'password="pw";'})
    assert config.security.username == "audit" and config.security.password == "pw"
    assert StaticConnectorConfig(security_settings(config)).security == config.security

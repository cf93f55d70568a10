"""The emulators' settings carry the client security settings to their event Producer and AuditCount publisher."""

from __future__ import annotations

from producers.config import EmulatorConfig
from pipeline.client.producer_config import ProducerConfig

SECURE = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "emulators",
          "sasl.password": "pw", "ssl.ca.location": "/secrets/ca.pem"}


def test_security_settings_reach_the_producer() -> None:
    config = EmulatorConfig({"zookeeper.connect": "zk:2181/dc1", **SECURE})
    assert config.security.protocol == "SASL_SSL" and config.security.username == "emulators"
    producer = ProducerConfig(config.producer_config())
    assert producer.security == config.security


def test_plaintext_by_default() -> None:
    assert ProducerConfig(EmulatorConfig({"zookeeper.connect": "zk:2181/dc1"}).producer_config()).security.protocol \
        == "PLAINTEXT"

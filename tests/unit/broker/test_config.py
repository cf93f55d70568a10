"""Broker configuration: properties files, overrides, validation and the derived storage settings."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, KafkaConfig, help_text, parse_overrides, read_properties_file


def test_defaults_match_kafka():
    config = KafkaConfig()
    assert config["num.partitions"] == 1
    assert config["message.max.bytes"] == 1048588
    assert config["socket.request.max.bytes"] == 100 * 1024 * 1024
    log_config = config.log_config()
    assert log_config.segment_bytes == 1 << 30
    assert log_config.retention_ms == 168 * 3600 * 1000
    assert log_config.retention_bytes is None
    assert log_config.flush_interval_messages is None


def test_properties_file_and_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# comment\n! other comment\nbroker.id=3\nlog.dirs = /a, /b\nport: 9999\n\nlog.retention.hours=1\n")
    values = read_properties_file(path)
    values.update(parse_overrides(["port=1234", "log.retention.ms=500"]))
    config = KafkaConfig(values)
    assert config.broker_id == 3
    assert [str(d) for d in config.log_dirs] == ["/a", "/b"]
    assert config.listen_address == ("127.0.0.1", 1234)
    assert config.retention_ms == 500


def test_retention_precedence_and_unlimited():
    assert KafkaConfig({"log.retention.minutes": "2"}).retention_ms == 120_000
    assert KafkaConfig({"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "7"}).retention_ms == 7
    assert KafkaConfig({"log.retention.ms": "-1"}).log_config().retention_ms is None


def test_listeners_take_precedence():
    config = KafkaConfig({"listeners": "PLAINTEXT://0.0.0.0:19092", "port": "1"})
    assert config.listen_address == ("0.0.0.0", 19092)


@pytest.mark.parametrize("values, message", [
    ({"no.such.property": "1"}, "unknown broker property"),
    ({"log.segment.bytes": "lots"}, "log.segment.bytes"),
    ({"log.segment.bytes": "0"}, "log.segment.bytes=0 is below its minimum 14"),
    ({"log.segment.bytes": str(2**31)}, "log.segment.bytes=2147483648 is above its maximum 2147483647"),
    ({"log.roll.ms": "0"}, "log.roll.ms=0 is below its minimum 1"),
    ({"log.flush.interval.messages": "0"}, "log.flush.interval.messages=0 is below its minimum 1"),
    ({"log.retention.ms": "-2"}, "log.retention.ms=-2 is below its minimum -1"),
    ({"log.index.size.max.bytes": "3"}, "log.index.size.max.bytes=3 is below its minimum 4"),
    ({"message.max.bytes": "-1"}, "message.max.bytes=-1 is below its minimum 0"),
    ({"background.threads": "0"}, "background.threads=0 is below its minimum 1"),
    ({"log.segment.bytes": 2**31}, "above its maximum"),
    ({"auto.create.topics.enable": "maybe"}, "true or false"),
    ({"port": "70000"}, "port=70000 is above its maximum 65535"),
    ({"testing.pause.at": "mid-air"}, "expected one of , writing-cleaned, before-swap, during-swap"),
])
def test_bad_values_are_clear_errors(values, message):
    with pytest.raises(ConfigError, match=message):
        KafkaConfig(values)


def test_malformed_override_and_file(tmp_path):
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["justakey"])
    path = tmp_path / "bad.properties"
    path.write_text("no separator here\n")
    with pytest.raises(ConfigError, match="bad.properties:1"):
        read_properties_file(path)


def test_bounds_are_inclusive():
    config = KafkaConfig({"log.segment.bytes": str(2**31 - 1), "log.retention.ms": "-1", "message.max.bytes": "0",
                          "log.index.size.max.bytes": "4", "log.flush.interval.messages": "1"})
    assert config.log_config().segment_bytes == 2**31 - 1


def test_help_shows_the_accepted_range():
    (line,) = [line for line in help_text().splitlines() if line.startswith("log.segment.bytes ")]
    assert line.endswith("[14..2147483647]")


def test_connection_limits_default_to_kafkas_unlimited_with_a_short_read_timeout_for_half_sent_frames():
    # max.connections was 1000: 1,000 abandoned connections from one client locked every other one out.
    config = KafkaConfig()
    assert config["max.connections"] == config["max.connections.per.ip"] == 2**31 - 1
    assert config["socket.request.read.timeout.ms"] == 10_000


def test_a_sasl_listeners_protocol_and_the_brokers_own_login():
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-secret";'
    config = KafkaConfig({"listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
                          "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
                          "listener.name.sasl_plaintext.connections.max.reauth.ms": "60000"})
    assert config.inter_broker_listener.security_protocol == "SASL_PLAINTEXT"
    security = config.inter_broker_security()
    assert (security.protocol, security.sasl_mechanism, security.username, security.password) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "broker", "b-secret")
    assert config.listener_setting("SASL_PLAINTEXT", "connections.max.reauth.ms") == 60000
    assert config.listener_setting("OTHER", "connections.max.reauth.ms") == 0
    assert KafkaConfig({}).inter_broker_security().protocol == "PLAINTEXT"


def test_sasl_mechanisms_are_checked():
    config = KafkaConfig({"sasl.enabled.mechanisms": "scram-sha-512, PLAIN",
                          "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    assert config.listener_setting("EXTERNAL", "sasl.enabled.mechanisms") == "SCRAM-SHA-512,PLAIN"
    assert config.listener_setting("INTERNAL", "sasl.enabled.mechanisms") == "SCRAM-SHA-256"
    with pytest.raises(ConfigError, match="GSSAPI"):
        KafkaConfig({"sasl.enabled.mechanisms": "GSSAPI"})
    with pytest.raises(ConfigError, match="sasl.username"):
        KafkaConfig({"listeners": "SASL_PLAINTEXT://h:1"}).inter_broker_security()

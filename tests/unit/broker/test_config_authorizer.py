"""The authorizer's broker properties: Kafka's class names accepted, others refused; super.users parsed."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, KafkaConfig


@pytest.mark.parametrize("name", ["kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                                  "broker.security.authorizer.AclAuthorizer"])
def test_kafkas_authorizer_names_switch_it_on(name):
    assert KafkaConfig({"authorizer.class.name": name}).authorizer_enabled


def test_no_authorizer_by_default_and_unknown_ones_refused():
    config = KafkaConfig()
    assert not config.authorizer_enabled and not config["allow.everyone.if.no.acl.found"]
    with pytest.raises(ConfigError, match="unknown authorizer"):
        KafkaConfig({"authorizer.class.name": "org.example.Other"})


def test_super_users_are_semicolon_separated_principals():
    assert KafkaConfig({"super.users": "User:admin; User:broker;"}).super_users == {"User:admin", "User:broker"}
    with pytest.raises(ConfigError, match="not a principal"):
        KafkaConfig({"super.users": "admin"})

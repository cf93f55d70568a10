"""Kafka's user config JSON and kafka-configs' --add-config syntax."""

from __future__ import annotations

import json

import pytest

from pipeline.security.scram import new_credential
from pipeline.security.scram_users import parse_add_config, parse_user_config, user_config_json


def test_the_user_config_round_trips_in_kafkas_layout():
    credentials = {"SCRAM-SHA-512": new_credential("SCRAM-SHA-512", "pw")}
    data = user_config_json(credentials)
    assert json.loads(data) == {"version": 1, "config": {"SCRAM-SHA-512": credentials["SCRAM-SHA-512"].to_string()}}
    assert parse_user_config(data) == credentials


def test_other_configs_and_malformed_credentials_are_skipped():
    data = json.dumps({"version": 1, "config": {"producer_byte_rate": "1024", "SCRAM-SHA-256": "salt=x"}}).encode()
    assert parse_user_config(data) == {}
    assert parse_user_config(b"not json") == {}
    assert parse_user_config(None) == {}


def test_add_config_takes_kafka_configs_syntax():
    assert parse_add_config("SCRAM-SHA-512=[iterations=8192,password=alice-secret],SCRAM-SHA-256=[password=p=w]") == {
        "SCRAM-SHA-512": ("alice-secret", 8192), "SCRAM-SHA-256": ("p=w", 4096)}


@pytest.mark.parametrize("text", ["", "SCRAM-SHA-1=[password=x]", "SCRAM-SHA-512=password=x", "SCRAM-SHA-512=[password=x",
                                  "SCRAM-SHA-512=[iterations=8192]", "SCRAM-SHA-512=[password=x,iterations=many]",
                                  "SCRAM-SHA-512=[password=x]junk"])
def test_malformed_add_configs_are_refused(text):
    with pytest.raises(ValueError):
        parse_add_config(text)

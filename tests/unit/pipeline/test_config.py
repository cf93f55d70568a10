"""The shared configuration mechanism: typed and text values, aliases, unknown names, files."""

from __future__ import annotations

import pytest

from pipeline.config import Config, ConfigError, Property, parse_bool, parse_choice

TABLE = (
    Property("producer.type", parse_choice("sync", "async"), "sync", "how sends happen"),
    Property("batch.size", int, 200, "messages per batch", aliases=("batch.num.messages",)),
    Property("compress", parse_bool, False, "compress or not"),
)


def test_defaults_text_and_typed_values():
    config = Config(TABLE, {"producer.type": "ASYNC", "batch.size": 50, "compress": "true"})
    assert (config["producer.type"], config["batch.size"], config["compress"]) == ("async", 50, True)
    assert Config(TABLE)["batch.size"] == 200


def test_alias_sets_the_canonical_name_and_conflicts_are_refused():
    assert Config(TABLE, {"batch.num.messages": "7"})["batch.size"] == 7
    with pytest.raises(ConfigError, match="set the same"):
        Config(TABLE, {"batch.num.messages": "7", "batch.size": "8"})


@pytest.mark.parametrize("values, message", [
    ({"nope": "1"}, "unknown property 'nope'"),
    ({"producer.type": "later"}, "expected one of sync, async"),
    ({"batch.size": "many"}, "batch.size"),
])
def test_clear_errors(values, message):
    with pytest.raises(ConfigError, match=message):
        Config(TABLE, values)


def test_properties_file(tmp_path):
    path = tmp_path / "producer.properties"
    path.write_text("producer.type=async\nbatch.num.messages: 12\n")
    config = Config(TABLE, path)
    assert (config["producer.type"], config["batch.size"]) == ("async", 12)
    with pytest.raises(ConfigError, match="must be positive"):
        Config(TABLE, {"batch.size": 0}).require_positive("batch.size")

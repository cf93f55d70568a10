"""pipeline.service.settings: --config, --set (and the broker's --override), --help-config, log.level."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pipeline.config import Config, ConfigError, Property, parse_int
from pipeline.service.settings import LOG_LEVEL, add_settings_options, print_settings_table, settings_values

TABLE = (Property("size", parse_int, 10, "how many"), Property("name", str, "x", "what it is called"), LOG_LEVEL)


def parser(**kwargs: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_settings_options(parser, **kwargs)  # type: ignore[arg-type]
    parser.add_argument("--size")
    return parser


def test_the_file_then_set_then_the_options_each_later_one_winning(tmp_path: Path) -> None:
    properties = tmp_path / "x.properties"
    properties.write_text("size=1\nname=file\nlog.level=debug\n")
    args = parser().parse_args(["--config", str(properties), "--set", "size=2", "--set", "name=set", "--size", "3"])
    config = Config(TABLE, settings_values(args, {"size": "size"}))
    assert (config["size"], config["name"], config["log.level"]) == (3, "set", "debug")


def test_override_is_an_alias_of_set_where_asked_for() -> None:
    args = parser(aliases=("--override",)).parse_args(["--override", "size=4", "--set", "name=n"])
    assert args.set == ["size=4", "name=n"]
    with pytest.raises(SystemExit):
        parser().parse_args(["--override", "size=4"])


def test_a_malformed_set_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        settings_values(parser().parse_args(["--set", "size"]), {})


def test_help_config_prints_every_setting_with_its_default_and_doc(capsys: pytest.CaptureFixture[str]) -> None:
    assert parser().parse_args(["--help-config"]).help_config
    print_settings_table(TABLE)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["size", "name", "log.level"]
    assert "default 10" in lines[0] and lines[0].endswith("how many")


def test_log_level_takes_the_logging_names_in_any_case() -> None:
    assert Config(TABLE, {"log.level": "WARNING"})["log.level"] == "warning"
    with pytest.raises(ConfigError, match="log.level"):
        Config(TABLE, {"log.level": "loud"})

"""The settings options every service's command line takes: ``--config FILE``, ``--set KEY=VALUE`` (repeatable;
the broker also spells it ``--override``, as Kafka does) and ``--help-config``, and the ``log.level`` setting."""

from __future__ import annotations

import argparse
from typing import Any, Iterable, Mapping

from pipeline.config import Property, command_line_values, help_table, parse_choice

__all__ = ["LOG_LEVEL", "add_settings_options", "print_settings_table", "settings_values"]

LOG_LEVEL = Property("log.level", parse_choice("debug", "info", "warning", "error"), "info",
                     "what the service logs to stderr: debug, info, warning or error")


def add_settings_options(parser: argparse.ArgumentParser, *, config_help: str = "properties file (see --help-config)",
                         set_help: str = "any setting of --help-config (repeatable)",
                         aliases: Iterable[str] = ()) -> None:
    """Add --config, --set (and its ``aliases``, e.g. ``--override``) and --help-config to ``parser``."""
    parser.add_argument("--config", metavar="FILE", help=config_help)
    parser.add_argument("--set", *aliases, dest="set", action="append", default=[], metavar="KEY=VALUE",
                        help=set_help)
    parser.add_argument("--help-config", action="store_true", help="list every setting with its default and exit")


def settings_values(args: argparse.Namespace, options: Mapping[str, str]) -> dict[str, Any]:
    """The settings of a parsed command line: the --config file, then --set, then the options given (``{option's
    dest: setting}``), each later one winning."""
    return command_line_values(args.config, args.set, {name: getattr(args, dest) for dest, name in options.items()})


def print_settings_table(table: Iterable[Property]) -> None:
    """Print the --help-config table: every setting, its default and what it does."""
    print(help_table(table))

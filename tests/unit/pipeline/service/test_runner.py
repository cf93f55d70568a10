"""pipeline.service.runner: subcommands with `run` as the default, --help-config, exit codes 0/1/2 with one-line
errors, and SIGTERM as a clean stop, in the threaded and the asyncio flavour."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import threading
from typing import Any

import pytest

from pipeline.config import Config, ConfigError, Property, parse_int
from pipeline.service.runner import Service, command_line, main, parse, run_asyncio, run_threaded
from pipeline.service.settings import LOG_LEVEL, add_settings_options, settings_values

PROG = "python -m toy"
TABLE = (Property("size", parse_int, 10, "how many", at_least=1), LOG_LEVEL)


class ToyFailure(Exception):
    """A runtime failure the toy service expects."""


def load(args: argparse.Namespace) -> Config:
    return Config(TABLE, settings_values(args, {"size": "size"}))


SERVICE = Service(PROG, TABLE, load, (ToyFailure,))


def add_run_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run the toy")
    parser.add_argument("--size")
    add_settings_options(parser)
    parser.set_defaults(command=lambda args: run_threaded(SERVICE, args, lambda config, stop: config["size"] - 3))


def add_show_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("show", help="show something")
    parser.add_argument("what")
    parser.set_defaults(command=lambda args: 42)


def toy() -> argparse.ArgumentParser:
    return command_line(PROG, "A toy service.", (add_run_parser, add_show_parser))


def args_of(*argv: str) -> argparse.Namespace:
    return parse(toy(), list(argv))


def test_a_command_line_without_a_subcommand_means_run() -> None:
    assert args_of().subcommand == "run"
    assert args_of("--size", "4").subcommand == "run" and args_of("--size", "4").size == "4"
    assert args_of("show", "x").subcommand == "show"
    assert main(toy(), ["show", "x"]) == 42
    assert main(toy(), ["--set", "size=5"]) == 2


def test_help_lists_the_subcommands_and_the_run_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        args_of("--help")
    shown = capsys.readouterr().out
    assert exit.value.code == 0
    assert "show" in shown and "--help-config" in shown and f"`{PROG}` without a COMMAND means `{PROG} run`" in shown


def test_help_config_prints_the_table_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_threaded(SERVICE, args_of("--help-config"), pytest.fail) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["size", "log.level"]


@pytest.mark.parametrize("argv", [["--size", "0"], ["--set", "nosuch=1"], ["--set", "size"],
                                  ["--config", "/nonexistent"], ["--set", "log.level=loud"]])
def test_a_bad_setting_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_threaded(SERVICE, args_of(*argv), pytest.fail) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG}: error: ") and err.count("\n") == 1, err


def test_the_body_decides_the_exit_code_and_a_failure_is_one_line_and_exit_1(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run_threaded(SERVICE, args_of(), lambda config, stop: None) == 0
    assert run_threaded(SERVICE, args_of("--size", "4"), lambda config, stop: config["size"] - 3) == 1

    def fails(config: Config, stop: threading.Event) -> None:
        raise ToyFailure("the disk is on fire")

    assert run_threaded(SERVICE, args_of(), fails) == 1
    assert capsys.readouterr().err == f"{PROG}: error: the disk is on fire\n"

    def misconfigured(config: Config, stop: threading.Event) -> None:
        raise ConfigError("size and colour disagree")

    assert run_threaded(SERVICE, args_of(), misconfigured) == 2
    assert capsys.readouterr().err == f"{PROG}: error: size and colour disagree\n"


def test_a_bug_is_not_swallowed() -> None:
    def buggy(config: Config, stop: threading.Event) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_threaded(SERVICE, args_of(), buggy)


def test_the_settings_apply_to_the_process() -> None:
    seen = {}

    def body(config: Config, stop: threading.Event) -> None:
        seen["umask"] = os.umask(0o077)
        seen["level"] = logging.getLogger().level

    assert run_threaded(SERVICE, args_of("--set", "log.level=warning"), body) == 0
    assert seen == {"umask": 0o077, "level": logging.WARNING}


def test_sigterm_stops_the_threaded_service_with_exit_0() -> None:
    def body(config: Config, stop: threading.Event) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        return 0 if stop.wait(5) else 9

    assert run_threaded(SERVICE, args_of(), body) == 0


def test_the_asyncio_flavour(capsys: pytest.CaptureFixture[str]) -> None:
    started = []

    async def body(config: Config, stop: asyncio.Event) -> None:
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 5)

    assert run_asyncio(SERVICE, args_of(), body, before=lambda config: started.append(config["size"])) == 0
    assert started == [10]
    assert run_asyncio(SERVICE, args_of("--size", "-1"), body) == 2

    async def fails(config: Config, stop: asyncio.Event) -> None:
        raise ToyFailure("cannot listen")

    assert run_asyncio(SERVICE, args_of(), fails) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{PROG}: error: property size=-1 is below its minimum 1",
        f"{PROG}: error: cannot listen"]

"""`python -m pipeline` takes `status` and `chaos` from the entry points infra registers, never importing infra
itself."""

from __future__ import annotations

import pytest

from pipeline.cli import COMMANDS_GROUP, build_parser, main, registered_commands


def test_infra_registers_status_and_chaos_in_the_commands_group() -> None:
    registered = registered_commands()
    assert {name: entry.value for name, entry in registered.items() if name in ("status", "chaos")} == \
        {"status": "infra.deployment.pipeline_commands", "chaos": "infra.deployment.pipeline_commands"}
    assert all(entry.group == COMMANDS_GROUP for entry in registered.values())


def test_the_registered_subcommands_are_listed_once_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--help"])
    assert exit_info.value.code == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("    ")]
    assert listed.count("status") == 1 and listed.count("chaos") == 1


def test_a_registered_subcommand_runs_with_its_own_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["status", "--help"])
    assert exit_info.value.code == 0
    assert "--topology" in capsys.readouterr().out

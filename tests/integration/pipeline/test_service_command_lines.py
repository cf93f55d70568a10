"""Every service's ``python -m`` through the one runner (pipeline.service): a bad setting is one line on stderr and
exit 2, and --help-config prints its settings table (each with log.level, the test-only testing.* rows where the
service injects faults). No broker or ZooKeeper is needed: nothing gets past its settings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.broker import REPO_ROOT

# module, its long-running command, a setting of its own that --help-config must list, the testing.* rows it declares
SERVICES = [
    ("broker", "run", "log.segment.bytes", ["testing.pause.at", "testing.pause.file"]),
    ("producers", "run", "audit.window.ms", []),
    ("mirror", "run", "whitelist", ["testing.drop.event.ids"]),
    ("etl", "run", "schedule.every", ["testing.pause.at", "testing.pause.file", "testing.drop.event.ids"]),
    ("etl", "load", "schedule.every", ["testing.pause.at", "testing.pause.file", "testing.drop.event.ids"]),
    ("audit", "run", "grace.ms", []),
    ("schemas.registry", "run", "data.dir", []),
]


def python_m(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", *argv], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


@pytest.mark.integration
def test_a_bad_setting_is_one_line_on_stderr_and_exit_2() -> None:
    started = {(module, command, "--set"): python_m(module, command, "--set", "log.level=loud")
               for module, command, _, _ in SERVICES}
    started["broker", "run", "--override"] = python_m("broker", "--override", "log.level=loud")
    started["mirror", "", "--set"] = python_m("mirror", "--set", "log.level=loud")
    for (module, command, spelling), process in started.items():
        code, out, err = finished(process)
        assert (code, out) == (2, ""), (module, command, spelling, code, out, err)
        assert err.endswith("\n") and err.count("\n") == 1, (module, command, err)
        assert err.startswith(f"python -m {module}: error: ") and "log.level='loud'" in err, err


@pytest.mark.integration
def test_help_config_prints_the_settings_table() -> None:
    started = {(module, command): (python_m(module, command, "--help-config"), own, testing)
               for module, command, own, testing in SERVICES}
    for (module, command), (process, own, testing) in started.items():
        code, out, err = finished(process)
        assert (code, err) == (0, ""), (module, command, err)
        names = [line.split()[0] for line in out.splitlines()]
        assert own in names and "log.level" in names, (module, names)
        assert [n for n in names if n.startswith("testing.")] == testing, (module, names)
        assert all(" default " in line for line in out.splitlines()), out

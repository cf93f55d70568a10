"""The process harness (tests/support/process.py) on real children: readiness with a deadline, the log tail in
every error, SIGTERM then SIGKILL on stop, a session killed whole."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from tests.support.polling import wait_until
from tests.support.process import ChildProcess, ProcessError, python_env, stop_all


class QuickStop(ChildProcess):
    """A child whose stop waits half a second for it (stop_all calls stop() without a deadline)."""

    def stop(self, timeout: float = 0.5) -> int | None:
        return super().stop(timeout)


def python(code: str, log_path: Path, kind: type[ChildProcess] = ChildProcess, **options: object) -> ChildProcess:
    return kind("child", [sys.executable, "-c", code], log_path, env=python_env(), **options)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_is_ready_when_its_probe_says_so_and_stops_with_its_exit_code(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    child = python(f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)",
                   tmp_path / "child.log", announce=True)
    child.start(marker.exists, timeout=30)
    assert child.running and child.starts == 1
    assert child.stop(10) == -signal.SIGTERM
    assert child.log_text().startswith("=== harness: start #1: ")


def test_a_child_that_exits_while_starting_fails_with_its_log_tail(tmp_path: Path) -> None:
    child = python("import sys; print('bad setting: x', flush=True); sys.exit(2)", tmp_path / "child.log")
    with pytest.raises(ProcessError, match=r"(?s)child exited with code 2 while starting.*bad setting: x"):
        child.start(lambda: False, timeout=30)


def test_a_child_not_ready_by_the_deadline_is_killed_and_the_error_names_the_last_probe_error(
        tmp_path: Path) -> None:
    child = python("print('still loading', flush=True); import time; time.sleep(60)", tmp_path / "child.log")

    def probe() -> bool:
        raise ConnectionRefusedError("nothing listens")

    with pytest.raises(ProcessError, match=r"(?s)not ready after 1s \(last error: ConnectionRefused.*still loading"):
        child.start(probe, timeout=1)
    assert not child.running and child.returncode == -signal.SIGKILL


def test_a_child_that_ignores_sigterm_is_killed_after_the_deadline_and_the_stop_fails(tmp_path: Path) -> None:
    child = python("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ignoring', flush=True); time.sleep(60)", tmp_path / "child.log")
    child.start(lambda: "ignoring" in child.log_text(), timeout=30)
    started = time.monotonic()
    with pytest.raises(ProcessError, match=r"(?s)still running 1s after SIGTERM; killed it.*ignoring"):
        child.stop(1)
    assert time.monotonic() - started < 10 and child.returncode == -signal.SIGKILL


def test_a_child_in_its_own_session_is_killed_with_what_it_started(tmp_path: Path) -> None:
    grandchild_pid = tmp_path / "grandchild.pid"
    child = python(f"import pathlib, subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
                   f"'import time; time.sleep(60)']); pathlib.Path({str(grandchild_pid)!r}).write_text(str(p.pid)); "
                   f"time.sleep(60)", tmp_path / "child.log", new_session=True)
    child.start(lambda: grandchild_pid.exists() and grandchild_pid.read_text(), timeout=30)
    pid = int(grandchild_pid.read_text())
    child.kill()
    wait_until(lambda: not alive(pid), 10, message="the grandchild to die with its session")


def test_stop_all_stops_every_child_and_raises_the_first_failure(tmp_path: Path) -> None:
    stubborn = python("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "print('up', flush=True); time.sleep(60)", tmp_path / "stubborn.log", QuickStop)
    stubborn.start(lambda: "up" in stubborn.log_text(), timeout=30)
    plain = python("import time; time.sleep(60)", tmp_path / "plain.log").spawn()
    never_started = python("pass", tmp_path / "never.log")
    with pytest.raises(ProcessError, match="after SIGTERM"):
        stop_all([stubborn, plain, never_started])
    assert not stubborn.running and not plain.running and never_started.process is None

"""`ChildProcess`: the one harness every process wrapper of the tests and the benchmarks is built on.

A child is spawned with its stdout and stderr appended to a log file, and held by its own pid (or, with
``new_session``, by its session, so that whatever it starts goes with it). ``wait_ready`` polls a readiness
probe until a deadline; ``stop`` is SIGTERM, a wait with a deadline, then SIGKILL and an error; ``kill`` is
SIGKILL and reap. Every error names the child and ends with the tail of its log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]

T = TypeVar("T")


class ProcessError(RuntimeError):
    """A child process failed to start, died while starting, or did not stop in time."""


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a ``python -m`` child: the repository first on PYTHONPATH, output
    unbuffered (so a log tail is up to date), ``extra`` on top."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def python_module(module: str, *args: str) -> list[str]:
    """The command line of ``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


class ChildProcess:
    """One child process, started and stopped by its own pid, its output appended to ``log_path``.

    ``error`` is the exception type raised for it (a wrapper sets its own, e.g. BrokerError). ``env`` is the
    child's whole environment (default: this process's). ``announce`` writes a ``=== harness:`` line with the
    command line to the log before each start.
    """

    error: type[Exception] = ProcessError

    def __init__(self, name: str, command: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = REPO_ROOT, new_session: bool = False, announce: bool = False,
                 preexec_fn: Callable[[], None] | None = None, error: type[Exception] | None = None) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = Path(log_path)
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.new_session = new_session
        self.announce = announce
        self.preexec_fn = preexec_fn
        if error is not None:
            self.error = error
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        if self.process is None:
            raise self.error(f"{self.name} not started")
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def spawn(self) -> ChildProcess:
        """Start the process (no readiness wait)."""
        if self.running:
            raise self.error(f"{self.name} already running as pid {self.pid}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            if self.announce:
                log.write(f"=== harness: start #{self.starts}: {' '.join(self.command)}\n".encode())
                log.flush()
            self.process = subprocess.Popen(self.command, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=self.new_session,
                                            preexec_fn=self.preexec_fn)
        return self

    def start(self, ready: Callable[[], object] | None = None, timeout: float = 30.0,
              interval: float = 0.05) -> ChildProcess:
        """Spawn, then (given a probe) wait until it is ready; killed and an error raised if it is not."""
        self.spawn()
        if ready is not None:
            try:
                self.wait_ready(ready, timeout, interval)
            except BaseException:
                self.kill()
                raise
        return self

    def wait_ready(self, ready: Callable[[], T], timeout: float, interval: float = 0.05) -> T:
        """Poll ``ready`` until it returns something true and return that; an OSError it raises counts as not
        yet. An error with the log tail if the process exits meanwhile or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            if not self.running:
                raise self.error(f"{self.name} exited with code {self.returncode} while starting"
                                 f"\n--- log tail ---\n{self.log_tail()}")
            try:
                answer = ready()
                if answer:
                    return answer
            except OSError as error:
                last_error = error
            if time.monotonic() >= deadline:
                cause = f" (last error: {last_error!r})" if last_error is not None else ""
                raise self.error(f"{self.name} not ready after {timeout:.0f}s{cause}"
                                 f"\n--- log tail ---\n{self.log_tail()}")
            time.sleep(interval)

    def send_signal(self, sig: int) -> None:
        """``sig`` to the process (to its whole session with ``new_session``), if it still runs."""
        if not self.running:
            return
        if self.new_session:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass
        else:
            self.process.send_signal(sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit and return the exit code; subprocess.TimeoutExpired past ``timeout``."""
        if self.process is None:
            raise self.error(f"{self.name} not started")
        return self.process.wait(timeout)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait for the exit; the exit code (None if never started). If it outlives ``timeout`` it
        is killed and an error raised."""
        if self.process is None:
            return None
        if self.running:
            self.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise self.error(f"{self.name} pid {self.pid} still running {timeout:.0f}s after SIGTERM; killed it"
                                 f"\n--- log tail ---\n{self.log_tail()}") from None
        return self.process.returncode

    def kill(self) -> int | None:
        """SIGKILL (a crash) and reap; the exit code (None if never started)."""
        if self.process is None:
            return None
        if self.running:
            if self.new_session:
                self.send_signal(signal.SIGKILL)
            else:
                self.process.kill()
        return self.process.wait()

    def log_text(self) -> str:
        """Everything the process (all its starts) wrote so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __repr__(self) -> str:
        state = f"pid {self.process.pid}" if self.running else f"exit {self.returncode}"
        return f"ChildProcess({self.name}, {state}, log {self.log_path})"


def stop_all(stoppable: Sequence[object]) -> None:
    """``stop()`` each of ``stoppable`` (processes, or clusters of them), then ``kill()`` whatever has a kill,
    going on past failures; the first failure is raised at the end."""
    errors: list[Exception] = []
    for item in stoppable:
        try:
            item.stop()  # type: ignore[attr-defined]
        except Exception as error:
            errors.append(error)
        finally:
            kill = getattr(item, "kill", None)
            if kill is not None:
                kill()
    if errors:
        raise errors[0]

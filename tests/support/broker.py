"""`BrokerProcess`: one `python -m broker` child process on a free loopback port, for tests and demos.

It starts the broker with a log dir and `--override key=value` settings on the process harness
(tests.support.process): its output in a log file, ready once a TCP connect plus an ApiVersions round trip
succeeds (with a deadline), stopped with SIGTERM (`stop`) or SIGKILL (`kill`), the log tail in every error.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from . import wire
from .ports import free_port
from .process import REPO_ROOT, ChildProcess, python_env
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


class BrokerError(RuntimeError):
    """The broker process failed to start, died, or did not stop in time."""


class BrokerProcess:
    """A standalone broker child process with its own log dir and port.

    The port stays the same across `restart()`, so clients configured with `bootstrap` can reconnect.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        overrides: Mapping[str, object] | None = None,
        config_file: Path | None = None,
        log_path: Path | None = None,
        start_timeout: float = 30.0,
        python: str = sys.executable,
        open_files_limit: tuple[int, int] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``open_files_limit`` (soft, hard) is the RLIMIT_NOFILE the process starts with; ``env`` adds
        environment variables to every start (set ``self.env`` to change them; fault injection goes through the
        broker's declared settings, e.g. testing.pause.at)."""
        self.log_dir = Path(log_dir)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.overrides = {key: str(value) for key, value in (overrides or {}).items()}
        self.config_file = config_file
        self.log_path = Path(log_path) if log_path is not None else self.log_dir.parent / f"broker-{self.port}.log"
        self.start_timeout = start_timeout
        self.python = python
        self.open_files_limit = open_files_limit
        self.env = dict(env or {})
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.child = ChildProcess(f"broker on {self.bootstrap}", self.command(), self.log_path, announce=True,
                                  error=BrokerError)

    @property
    def bootstrap(self) -> str:
        """`host:port`, as clients' bootstrap servers / kcat -b want it."""
        return f"{self.host}:{self.port}"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.child.process

    @property
    def starts(self) -> int:
        return self.child.starts

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def is_running(self) -> bool:
        return self.child.running

    @property
    def returncode(self) -> int | None:
        return self.child.returncode

    def command(self) -> list[str]:
        """The command line that starts this broker."""
        cmd = [self.python, "-m", "broker", "--log-dir", str(self.log_dir), "--port", str(self.port), "--host", self.host]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> BrokerProcess:
        """Start the process and wait until it answers ApiVersions; raise BrokerError with the log tail if not."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.child.command = self.command()
        self.child.env = python_env(self.env)
        self.child.preexec_fn = self._limit_open_files if self.open_files_limit else None
        self.child.start(self._answers_api_versions, self.start_timeout)
        return self

    def _limit_open_files(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, self.open_files_limit)

    def open_files(self) -> int:
        """How many descriptors the process has open."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def wait_ready(self, timeout: float) -> dict[int, tuple[int, int]]:
        """Poll until a connect + ApiVersions round trip succeeds; return the advertised versions."""
        return self.child.wait_ready(self._answers_api_versions, timeout)

    def _answers_api_versions(self) -> dict[int, tuple[int, int]] | None:
        try:
            with wire.KafkaConnection(self.host, self.port, timeout=2.0) as conn:
                self.api_versions = wire.api_versions(conn)
        except AssertionError:
            return None
        return self.api_versions

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for exit; return the exit code. SIGKILL and raise if it outlives ``timeout``, and raise
        if the broker dropped a coroutine without awaiting it (a request or task silently lost, issue 26)."""
        code = self.child.stop(timeout)
        if self.log_path.exists() and "was never awaited" in self.log_text():
            lines = [line for line in self.log_text().splitlines() if "was never awaited" in line]
            raise BrokerError(f"broker {self.bootstrap} dropped coroutines without awaiting them: {lines[:5]}")
        return 0 if code is None else code

    def kill(self) -> int | None:
        """SIGKILL (a crash) and reap; return the exit code (None if never started)."""
        return self.child.kill()

    def restart(self, overrides: Mapping[str, object] | None = None) -> BrokerProcess:
        """Stop (SIGTERM) if running, optionally change overrides, and start again on the same port and log dir."""
        self.stop()
        if overrides:
            self.overrides.update({key: str(value) for key, value in overrides.items()})
        return self.start()

    def log_text(self) -> str:
        """Everything the broker (all its starts) wrote to stderr/stdout so far."""
        return self.child.log_text()

    def log_tail(self, lines: int = 40) -> str:
        return self.child.log_tail(lines)

    def partition_dir(self, topic: str, partition: int) -> Path:
        """Where the broker keeps one partition's segment files."""
        return self.log_dir / f"{topic}-{partition}"

    def segment_files(self, topic: str, partition: int) -> list[Path]:
        """The partition's `.log` segment files in base-offset order."""
        return sorted(self.partition_dir(topic, partition).glob("*.log"))

    def rss_bytes(self) -> int:
        """The broker's resident set size from /proc/PID/status (VmRSS)."""
        return rss_bytes(self.pid)

    def peak_rss_bytes(self) -> int:
        """The largest resident set size the broker process has had since it started (VmHWM)."""
        return rss_bytes(self.pid, "VmHWM")

    def cpu_seconds(self) -> float:
        """User plus system CPU seconds the broker process has used so far (its threads included)."""
        return cpu_seconds(self.pid)

    def child_pids(self) -> list[int]:
        """The processes the broker started that are still running (its log cleaner workers)."""
        return child_pids(self.pid)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()

    def __repr__(self) -> str:
        state = f"pid {self.process.pid}" if self.is_running else "stopped"
        return f"BrokerProcess({self.bootstrap}, {self.log_dir}, {state})"


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """Resident set size of a process in bytes: ``field`` of /proc/PID/status (VmRSS now, VmHWM its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise BrokerError(f"no {field} for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a process has used so far: utime and stime of /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The live children of a process, from /proc/PID/task/*/children."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(p) for p in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue  # the thread ended meanwhile
    return sorted(children)


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False

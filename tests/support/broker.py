"""`BrokerProcess`: one `python -m broker` child process on a free loopback port, for tests and demos.

It starts the broker with a log dir and `--override key=value` settings, sends its stderr to a log file,
waits (with a deadline) until a TCP connect plus an ApiVersions round trip succeeds, and stops it with
SIGTERM (`stop`) or SIGKILL (`kill`). If the broker dies while starting, the error carries the log tail.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

from . import wire
from .ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
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
        self.process: subprocess.Popen[bytes] | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        """`host:port`, as clients' bootstrap servers / kcat -b want it."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BrokerError("broker not started")
        return self.process.pid

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

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
        if self.is_running:
            raise BrokerError(f"broker already running as pid {self.pid}")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        env = dict(os.environ)
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as log:
            log.write(f"=== harness: start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=self._limit_open_files if self.open_files_limit else None,
            )
        try:
            self.wait_ready(self.start_timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _limit_open_files(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, self.open_files_limit)

    def open_files(self) -> int:
        """How many descriptors the process has open."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def wait_ready(self, timeout: float) -> dict[int, tuple[int, int]]:
        """Poll until a connect + ApiVersions round trip succeeds; return the advertised versions."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.is_running:
                raise BrokerError(
                    f"broker exited with code {self.returncode} while starting\n--- log tail ---\n{self.log_tail()}"
                )
            try:
                with wire.KafkaConnection(self.host, self.port, timeout=2.0) as conn:
                    self.api_versions = wire.api_versions(conn)
                return self.api_versions
            except (OSError, AssertionError) as error:
                last_error = error
            time.sleep(0.05)
        raise BrokerError(
            f"broker on {self.bootstrap} not ready after {timeout:.0f}s (last error: {last_error!r})"
            f"\n--- log tail ---\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for exit; return the exit code. SIGKILL and raise if it outlives ``timeout``, and raise
        if the broker dropped a coroutine without awaiting it (a request or task silently lost, issue 26)."""
        if self.process is None or self.process.poll() is not None:
            code = self.returncode if self.process is not None else 0
        else:
            self.process.send_signal(signal.SIGTERM)
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise BrokerError(f"broker pid {self.pid} still running {timeout:.0f}s after SIGTERM; killed it\n"
                                  f"{self.log_tail()}") from None
        if self.log_path.exists() and "was never awaited" in self.log_text():
            lines = [line for line in self.log_text().splitlines() if "was never awaited" in line]
            raise BrokerError(f"broker {self.bootstrap} dropped coroutines without awaiting them: {lines[:5]}")
        return code

    def kill(self) -> int | None:
        """SIGKILL (a crash) and reap; return the exit code (None if never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait()

    def restart(self, overrides: Mapping[str, object] | None = None) -> BrokerProcess:
        """Stop (SIGTERM) if running, optionally change overrides, and start again on the same port and log dir."""
        self.stop()
        if overrides:
            self.overrides.update({key: str(value) for key, value in overrides.items()})
        return self.start()

    def log_text(self) -> str:
        """Everything the broker (all its starts) wrote to stderr/stdout so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

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

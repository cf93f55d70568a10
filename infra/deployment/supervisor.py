"""supervisord for the deployment: its configuration generated from the programs, and a client of its XML-RPC API.

:func:`render` writes one ``[program:x]`` per :class:`~infra.deployment.programs.Program` (autostart off: the
deployment starts them stage by stage, after health checks; autorestart on, so a process that dies is started
again; one log file each; SIGTERM with the program's own stop deadline, then SIGKILL to its process group).
:class:`Supervisor` starts the daemon and talks to it over its unix socket under ``var/supervisor``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import xmlrpc.client
from configparser import ConfigParser
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any, Sequence

from infra.deployment.programs import Program, log_file
from infra.deployment.topology import REPO_ROOT, Topology

__all__ = ["ProcessInfo", "Supervisor", "SupervisorError", "render"]

CONFIG_NAME = "supervisord.conf"
SOCKET_NAME = "supervisor.sock"
PID_NAME = "supervisord.pid"
# The longest path a unix socket address takes (sun_path, less its terminating NUL).
MAX_SOCKET_PATH = 107
# Supervisor's process states (supervisor.states.ProcessStates) that mean "not running, and will not be".
STOPPED_STATES = {"STOPPED", "EXITED", "FATAL", "UNKNOWN"}


class SupervisorError(RuntimeError):
    """supervisord did not start, does not answer, or refused a request."""


def render(topology: Topology, programs: Sequence[Program]) -> str:
    """The text of supervisord.conf for ``programs``."""
    directory = topology.supervisor_dir
    config = ConfigParser(interpolation=None)
    config.optionxform = str  # type: ignore[assignment,method-assign]
    config["unix_http_server"] = {"file": str(directory / SOCKET_NAME), "chmod": "0700"}
    config["supervisord"] = {
        "logfile": str(directory / "supervisord.log"), "logfile_maxbytes": str(topology.logs.max_bytes),
        "logfile_backups": str(topology.logs.backups),
        # every program inherits it: what the deployment's processes write is their owner's only
        "umask": "077",
        "pidfile": str(directory / PID_NAME), "childlogdir": str(topology.logs_dir), "directory": str(REPO_ROOT),
        "identifier": f"pipeline:{topology.var_dir}", "minfds": "4096", "nodaemon": "false", "loglevel": "info",
    }
    config["rpcinterface:supervisor"] = {
        "supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"}
    config["supervisorctl"] = {"serverurl": f"unix://{directory / SOCKET_NAME}"}
    for program in programs:
        environment = {"PYTHONUNBUFFERED": "1", **program.environment}
        config[f"program:{program.name}"] = {
            # supervisord expands %(name)s in these values: a literal % is written %%.
            "command": subprocess.list2cmdline(program.command).replace("%", "%%"),
            "directory": str(REPO_ROOT),
            "priority": str(program.priority),
            "autostart": "false",
            "autorestart": "true",
            "startsecs": "1",
            "startretries": "10",
            "stopsignal": "TERM",
            "stopwaitsecs": str(program.stop_wait_s),
            # SIGTERM to the program only (the ETL stops its own Spark JVM after the run in progress), SIGKILL at
            # the deadline to its whole process group.
            "stopasgroup": "false",
            "killasgroup": "true",
            "exitcodes": ",".join(map(str, program.exit_codes)),
            "redirect_stderr": "true",
            "stdout_logfile": str(log_file(topology, program)),
            "stdout_logfile_maxbytes": str(topology.logs.max_bytes),
            "stdout_logfile_backups": str(topology.logs.backups),
            "environment": ",".join(f'{key}="{value}"' for key, value in environment.items()).replace("%", "%%"),
        }
    text = StringIO()
    config.write(text)
    return f"; generated from {topology.path} by `python -m infra.deployment up`; edit the topology instead\n" \
           + text.getvalue()


@dataclass(frozen=True)
class ProcessInfo:
    """What supervisord knows of one program now."""

    name: str
    state: str
    pid: int
    started: float
    exit_status: int
    description: str

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"

    @classmethod
    def from_rpc(cls, info: dict[str, Any]) -> "ProcessInfo":
        return cls(info["name"], info["statename"], info["pid"], info["start"], info["exitstatus"],
                   info["description"])


class _UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's unix socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__()
        self.path = path
        self.timeout = timeout

    def make_connection(self, host: Any) -> Any:
        import http.client
        import socket

        path, timeout = self.path, self.timeout

        class Connection(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout)
                self.sock.connect(str(path))

        return Connection("localhost")


class Supervisor:
    """The deployment's supervisord: start it, ask it to start, stop and signal programs, shut it down."""

    def __init__(self, topology: Topology, timeout_s: float = 30.0) -> None:
        self.topology = topology
        self.directory = topology.supervisor_dir
        self.config_path = self.directory / CONFIG_NAME
        self.socket_path = self.directory / SOCKET_NAME
        self.pid_path = self.directory / PID_NAME
        self.timeout_s = timeout_s
        if len(str(self.socket_path)) > MAX_SOCKET_PATH:
            raise SupervisorError(f"{self.socket_path} is too long for a unix socket: use a shorter var_dir")

    def _proxy(self, timeout: float | None = None) -> Any:
        transport = _UnixTransport(self.socket_path, self.timeout_s if timeout is None else timeout)
        return xmlrpc.client.ServerProxy("http://localhost", transport=transport).supervisor

    def pid(self) -> int | None:
        """supervisord's pid when its pid file names a live supervisord of this deployment."""
        try:
            pid = int(self.pid_path.read_text().strip())
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            return None
        return pid if "supervisord" in command and str(self.config_path) in command else None

    def running(self) -> bool:
        """Whether supervisord of this deployment runs and answers."""
        if self.pid() is None:
            return False
        try:
            return self._proxy(timeout=5.0).getState()["statename"] == "RUNNING"
        except (OSError, xmlrpc.client.Error):
            return False

    def write_config(self, text: str) -> bool:
        """Write the configuration; whether it changed."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.topology.logs_dir.mkdir(parents=True, exist_ok=True)
        old = self.config_path.read_text() if self.config_path.exists() else None
        if old != text:
            self.config_path.write_text(text)
        return old != text

    def start_daemon(self) -> None:
        """Start supervisord (it daemonizes) and wait until it answers."""
        if self.socket_path.exists() and self.pid() is None:
            self.socket_path.unlink()  # left by a supervisord that was killed
        result = subprocess.run([sys.executable, "-m", "supervisor.supervisord", "-c", str(self.config_path)],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            message = " ".join((result.stderr or result.stdout).split())
            raise SupervisorError(f"supervisord did not start: {message}")
        deadline = time.monotonic() + self.timeout_s
        while not self.running():
            if time.monotonic() > deadline:
                raise SupervisorError(f"supervisord did not answer on {self.socket_path} within {self.timeout_s:.0f}s; "
                                      f"see {self.directory / 'supervisord.log'}")
            time.sleep(0.1)

    def reload(self) -> tuple[list[str], list[str], list[str]]:
        """Re-read the configuration: (added, changed, removed) program names, applied as supervisorctl update
        would (changed and removed programs are stopped; added and changed ones are left stopped)."""
        [[added, changed, removed]] = self._proxy().reloadConfig()
        for name in (*changed, *removed):
            self.stop(name)
            self._proxy().removeProcessGroup(name)
        for name in (*added, *changed):
            self._proxy().addProcessGroup(name)
        return added, changed, removed

    def info(self, name: str) -> ProcessInfo:
        return ProcessInfo.from_rpc(self._proxy().getProcessInfo(name))

    def infos(self) -> list[ProcessInfo]:
        return [ProcessInfo.from_rpc(info) for info in self._proxy().getAllProcessInfo()]

    def start(self, name: str) -> None:
        """Start ``name`` (no wait for its health; already running is fine)."""
        try:
            self._proxy().startProcess(name, False)
        except xmlrpc.client.Fault as fault:
            if "ALREADY_STARTED" not in fault.faultString:
                raise SupervisorError(f"supervisord could not start {name}: {fault.faultString}") from None

    def stop(self, name: str) -> None:
        """Stop ``name`` and wait until it is gone (supervisord SIGKILLs it after its stopwaitsecs)."""
        try:
            self._proxy(timeout=None if self.timeout_s > 600 else 600).stopProcess(name, True)
        except xmlrpc.client.Fault as fault:
            if "NOT_RUNNING" not in fault.faultString and "BAD_NAME" not in fault.faultString:
                raise SupervisorError(f"supervisord could not stop {name}: {fault.faultString}") from None

    def signal(self, name: str, signum: int) -> None:
        try:
            self._proxy().signalProcess(name, signal.Signals(signum).name.removeprefix("SIG"))
        except xmlrpc.client.Fault as fault:
            raise SupervisorError(f"supervisord could not signal {name}: {fault.faultString}") from None

    def shutdown(self) -> None:
        """Stop supervisord (it stops what still runs, in reverse priority) and wait until it exited."""
        pid = self.pid()
        if pid is None:
            return
        try:
            self._proxy().shutdown()
        except (OSError, xmlrpc.client.Error):
            os.kill(pid, signal.SIGTERM)
        while _alive(pid):
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"

"""`RegistryProcess`: one `python -m schemas.registry` child process on a free loopback port, and a tiny
JSON-over-HTTP client for tests.

It starts the registry on ZooKeeper or a data directory, waits (with a deadline) until `GET /` answers,
and stops it with SIGTERM, returning its exit status. If it dies while starting, the error has its log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

from .polling import wait_until
from .ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The registry process failed to start or did not stop in time."""


def request(url: str, method: str = "GET", body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body) of one request; error statuses are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    call = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(call, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class RegistryProcess:
    """A registry child process; `zookeeper` (connect string) or `data_dir` says where its state lives."""

    def __init__(self, log_path: Path, *, zookeeper: str | None = None, data_dir: Path | None = None,
                 port: int | None = None, start_timeout: float = 30.0, extra_args: tuple[str, ...] = ()) -> None:
        self.log_path = Path(log_path)
        self.zookeeper = zookeeper
        self.data_dir = data_dir
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return request(self.url + path, method, body)

    def command(self) -> list[str]:
        where = ["--zookeeper", self.zookeeper] if self.zookeeper else ["--data-dir", str(self.data_dir)]
        return [sys.executable, "-m", "schemas.registry", *where, "--host", "127.0.0.1", "--port", str(self.port),
                *self.extra_args]

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RegistryError(f"registry exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
        try:
            return self.call("GET", "/")[0] == 200
        except OSError:
            return False

    def start(self) -> "RegistryProcess":
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), cwd=REPO_ROOT, env=env, stdout=log, stderr=log)
        wait_until(self._answers, self.start_timeout, message=f"registry on port {self.port} to answer")
        return self

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait for the exit, and return the exit status (None if never started)."""
        if self.process is None:
            raise RegistryError("registry not started")
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise RegistryError(f"registry did not stop within {timeout}s after SIGTERM") from None
        return self.process.returncode

    def __enter__(self) -> "RegistryProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()


def standalone_registry(directory: Path) -> Iterator[RegistryProcess]:
    """A standalone registry with its data and log under `directory`, for a fixture to `yield from`;
    it must exit 0 on SIGTERM."""
    process = RegistryProcess(directory / "registry.log", data_dir=directory / "data").start()
    yield process
    assert process.stop() == 0

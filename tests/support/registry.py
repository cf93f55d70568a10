"""`RegistryProcess`: one `python -m schemas.registry` child process on a free loopback port, and a tiny
JSON-over-HTTP client for tests.

It starts the registry on ZooKeeper or a data directory on the process harness (tests.support.process), waits
(with a deadline) until `GET /` answers, and stops it with SIGTERM, returning its exit status. If it dies while
starting, the error has its log tail.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

from schemas.registry_client_settings import RegistryClientSettings

from .ports import free_port
from .process import REPO_ROOT, ChildProcess, python_env
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The registry process failed to start or did not stop in time."""


def request(url: str, method: str = "GET", body: Any = None, timeout: float = 10.0, *,
            auth: tuple[str, str] | None = None, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body) of one request (with a basic login, over TLS with ``context``); error
    statuses are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": CONTENT_TYPE}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    call = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(call, timeout=timeout, context=context) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class RegistryProcess:
    """A registry child process; `zookeeper` (connect string) or `data_dir` says where its state lives. A secured
    one: ``ca_file`` makes it listen on https (``extra_args`` give its keystore), ``auth`` is the login
    :meth:`call` and the readiness check use, ``client_bundle`` a PEM certificate and key they present."""

    def __init__(self, log_path: Path, *, zookeeper: str | None = None, data_dir: Path | None = None,
                 port: int | None = None, start_timeout: float = 30.0, extra_args: tuple[str, ...] = (),
                 auth: tuple[str, str] | None = None, ca_file: Path | None = None,
                 client_bundle: Path | None = None) -> None:
        self.log_path = Path(log_path)
        self.zookeeper = zookeeper
        self.data_dir = data_dir
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.extra_args = extra_args
        self.auth = auth
        self.ca_file = "" if ca_file is None else str(ca_file)
        self.context = None if ca_file is None else ssl.create_default_context(cafile=str(ca_file))
        if self.context is not None and client_bundle is not None:
            self.context.load_cert_chain(str(client_bundle))
        self.child: ChildProcess | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.context else 'http'}://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, body: Any = None, *, auth: tuple[str, str] | None = None) -> tuple[int, Any]:
        return request(self.url + path, method, body, auth=auth or self.auth, context=self.context)

    def client_settings(self) -> RegistryClientSettings:
        """Our client's settings for this registry: its login and its CA."""
        values = {"schema.registry.ssl.ca.location": self.ca_file}
        if self.auth:
            values["basic.auth.user.info"] = ":".join(self.auth)
        return RegistryClientSettings.from_config(values)

    def command(self) -> list[str]:
        where = ["--zookeeper", self.zookeeper] if self.zookeeper else ["--data-dir", str(self.data_dir)]
        listener = ["--set", f"listeners={self.url}"] if self.context else []
        return [sys.executable, "-m", "schemas.registry", *where, "--host", "127.0.0.1", "--port", str(self.port),
                *listener, *self.extra_args]

    def _answers(self) -> bool:
        return self.call("GET", "/")[0] == 200

    def start(self) -> "RegistryProcess":
        self.child = ChildProcess(f"registry on port {self.port}", self.command(), self.log_path, env=python_env(),
                                  error=RegistryError)
        self.child.start(self._answers, self.start_timeout)
        return self

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return None if self.child is None else self.child.process

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait for the exit, and return the exit status; SIGKILL and RegistryError past ``timeout``."""
        if self.child is None:
            raise RegistryError("registry not started")
        return self.child.stop(timeout)

    def __enter__(self) -> "RegistryProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.child is not None and self.child.running:
            self.stop()


def standalone_registry(directory: Path) -> Iterator[RegistryProcess]:
    """A standalone registry with its data and log under `directory`, for a fixture to `yield from`;
    it must exit 0 on SIGTERM."""
    process = RegistryProcess(directory / "registry.log", data_dir=directory / "data").start()
    yield process
    assert process.stop() == 0

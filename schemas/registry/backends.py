"""Where the registry keeps its state: a tree of nodes with data, in ZooKeeper or in a local directory.

The registry needs few primitives, and both backends give each the same atomicity: `create_all`
creates several nodes at once or none (a ZooKeeper multi-op; a lock in the directory), `increment`
raises a counter so that no two callers, in any number of processes, get the same value (a versioned
ZooKeeper update retried on conflict; a file lock in the directory).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from pipeline.zk.client import BoundedZk


class Backend(Protocol):
    """A tree of nodes holding bytes, addressed by '/'-separated paths."""

    def get(self, path: str) -> bytes | None:
        """The node's data, None if it does not exist."""

    def children(self, path: str) -> list[str]:
        """Names of the node's children; [] if it does not exist."""

    def put(self, path: str, data: bytes) -> None:
        """Create the node (and its parents) or overwrite its data."""

    def create_all(self, nodes: list[tuple[str, bytes]]) -> bool:
        """Create every node (parents included) or, if any exists already, none; True if created."""

    def increment(self, path: str) -> int:
        """Raise the integer counter at `path` (0 when missing) by one and return the new value."""

    def delete(self, path: str) -> None:
        """Delete the node and everything below it; nothing if it does not exist."""

    def close(self) -> None:
        """Release the connection or lock files."""


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


class ZooKeeperBackend:
    """The nodes are znodes; every call is bounded by `BoundedZk`'s deadline."""

    def __init__(self, client: KazooClient, timeout_s: float = 10.0) -> None:
        self.client = client
        self.zk = BoundedZk(client, timeout_s)

    def get(self, path: str) -> bytes | None:
        try:
            data, _ = self.zk.sync("get", path)
        except NoNodeError:
            return None
        return data

    def children(self, path: str) -> list[str]:
        try:
            return list(self.zk.sync("get_children", path))
        except NoNodeError:
            return []

    def put(self, path: str, data: bytes) -> None:
        while True:
            try:
                self.zk.sync("set", path, data)
                return
            except NoNodeError:
                pass
            try:
                self.zk.sync("create", path, data, makepath=True)
                return
            except NodeExistsError:
                continue

    def create_all(self, nodes: list[tuple[str, bytes]]) -> bool:
        for parent in {_parent(path) for path, _ in nodes}:
            self.zk.sync("ensure_path", parent)
        transaction = self.client.transaction()
        for path, data in nodes:
            transaction.create(path, data)
        results = self.zk.wait(transaction.commit_async())
        failures = [result for result in results if isinstance(result, Exception)]
        if any(isinstance(failure, NodeExistsError) for failure in failures):
            return False
        if failures:
            raise failures[0]
        return True

    def increment(self, path: str) -> int:
        while True:
            try:
                data, stat = self.zk.sync("get", path)
            except NoNodeError:
                try:
                    self.zk.sync("create", path, b"1", makepath=True)
                    return 1
                except NodeExistsError:
                    continue
            value = int(data or b"0") + 1
            try:
                self.zk.sync("set", path, str(value).encode(), version=stat.version)
                return value
            except BadVersionError:
                continue

    def delete(self, path: str) -> None:
        for child in self.children(path):
            self.delete(f"{path}/{child}")
        try:
            self.zk.sync("delete", path)
        except NoNodeError:
            pass
        except NotEmptyError:
            self.delete(path)

    def close(self) -> None:
        self.client.stop()
        self.client.close()


DATA_FILE = "@data"
"""A node's data inside its directory; '@' never appears in a quoted node name."""


class DirectoryBackend:
    """The nodes are directories below `root`, their data in a file; a lock file orders writers.

    Writes replace the data file by rename, so readers never see half a write; several processes may
    share one directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_path = self.root / ".lock"

    def _dir(self, path: str) -> Path:
        return self.root.joinpath(*[part for part in path.split("/") if part])

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, path: str, data: bytes) -> None:
        directory = self._dir(path)
        directory.mkdir(parents=True, exist_ok=True)
        temporary = directory / f"{DATA_FILE}.tmp"
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, directory / DATA_FILE)

    def get(self, path: str) -> bytes | None:
        try:
            return (self._dir(path) / DATA_FILE).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def children(self, path: str) -> list[str]:
        try:
            return [entry.name for entry in self._dir(path).iterdir() if entry.is_dir()]
        except FileNotFoundError:
            return []

    def put(self, path: str, data: bytes) -> None:
        with self._locked():
            self._write(path, data)

    def create_all(self, nodes: list[tuple[str, bytes]]) -> bool:
        with self._locked():
            if any((self._dir(path) / DATA_FILE).exists() for path, _ in nodes):
                return False
            for path, data in nodes:
                self._write(path, data)
            return True

    def increment(self, path: str) -> int:
        with self._locked():
            value = int(self.get(path) or b"0") + 1
            self._write(path, str(value).encode())
            return value

    def delete(self, path: str) -> None:
        with self._locked():
            shutil.rmtree(self._dir(path), ignore_errors=True)

    def close(self) -> None:
        """Nothing is held between calls."""

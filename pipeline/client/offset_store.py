"""Consumed offsets kept in a local file, for consumers that have no group in ZooKeeper (a broker list).

One JSON file of ``{"topic": {"partition": offset}}``; every save writes a temporary file, fsyncs it,
renames it into place and fsyncs the directory, so a crash leaves either the old offsets or the new ones.
A lock file beside it (``flock``) is held while the store is open: a second process given the same file
is refused with the first one's pid, instead of two consumers reading the same partitions and
overwriting each other's offsets.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

__all__ = ["FileOffsetStore", "OffsetStoreError", "OffsetStoreLocked"]

TopicPartition = tuple[str, int]


class OffsetStoreError(OSError):
    """The offsets file cannot be used (held by another process, or not an offsets file)."""


class OffsetStoreLocked(OffsetStoreError):
    """Another process holds the offsets file."""


class FileOffsetStore:
    """The offsets of one consumer in ``path``, locked for this process until ``close``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._lock_fd: int | None = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self._lock_fd)
            self._lock_fd = None
            raise OffsetStoreLocked(f"{self.path} is in use by another process (pid {holder}); one consumer per "
                                    f"offsets file") from None
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)

    def load(self) -> dict[TopicPartition, int]:
        """The stored offsets ({} before the first save)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
            return {(topic, int(p)): int(o) for topic, partitions in data.items() for p, o in partitions.items()}
        except (ValueError, AttributeError, TypeError) as exc:
            raise OffsetStoreError(f"{self.path} is not an offsets file ({exc}); move it away to start over") from None

    def save(self, offsets: dict[TopicPartition, int]) -> None:
        """Replace the stored offsets with ``offsets``, durably."""
        data: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            data.setdefault(topic, {})[str(partition)] = offset
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "w") as out:
            json.dump(data, out, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def close(self) -> None:
        """Release the lock (the offsets stay)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "FileOffsetStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

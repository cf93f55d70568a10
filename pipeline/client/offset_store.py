"""Consumed offsets kept in a local file, for consumers that have no group in ZooKeeper (a broker list).

One JSON file of ``{"topic": {"partition": offset}}``; every save writes a temporary file, fsyncs it,
renames it into place and fsyncs the directory, so a crash leaves either the old offsets or the new ones.
A lock file beside it (``flock``) is held while the store is open: a second process given the same file
is refused with the first one's pid, instead of two consumers reading the same partitions and
overwriting each other's offsets. Files are created owner-only (0600), directories made for them 0700.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.durable_file import FileLockedError, LockFile, make_private_dir, write_atomically

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
        make_private_dir(self.path.parent)
        try:
            self._lock = LockFile(self.path.with_name(self.path.name + ".lock"), str(self.path), mode=0o600)
        except FileLockedError as exc:
            raise OffsetStoreLocked(f"{exc}; one consumer per offsets file") from None

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
        write_atomically(self.path, json.dumps(data, sort_keys=True).encode(), mode=0o600)

    def close(self) -> None:
        """Release the lock (the offsets stay)."""
        self._lock.close()

    def __enter__(self) -> "FileOffsetStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

"""Writing files so that a crash leaves either the old or the new content, never a torn or lost one.

One mechanism for every small file the broker and the services rewrite (checkpoints, producer-state snapshots,
partition.metadata, the standalone metadata): write a temporary file, fsync it, rename it over the
old one, fsync the directory so the rename itself survives a power cut.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

TMP_SUFFIX = ".tmp"
# Owner-only permissions of what a service keeps: the events and their metadata.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def fsync_and_close(fds: list[int]) -> None:
    """fsync each descriptor, then close them all (also when an fsync fails)."""
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


def fsync_dir(directory: Path) -> None:
    """fsync a directory, making the creation, rename or removal of its entries durable."""
    fsync_and_close([os.open(directory, os.O_RDONLY | os.O_DIRECTORY)])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def append_durably(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Append ``data`` to ``path`` (created with ``mode`` if missing, less the umask) and fsync it: once this returns,
    the lines are on disk; a crash in the middle can leave only a torn last line, which readers skip."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, durable: bool = True, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically; with ``durable`` (the default) also crash-safely.

    ``durable=False`` skips both fsyncs, for a caller that syncs the file and its directory later
    (off the event loop, see Log.flush). ``mode``: the new file's permissions (less the umask).
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def make_private_dir(directory: Path, *, tighten: bool = False) -> Path:
    """Create ``directory`` and each missing parent owner-only (0700, whatever the umask); existing ones are left
    as they are, but for ``directory`` itself with ``tighten``. Returns ``directory``."""
    missing = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue
        # mkdir's mode is masked by the umask; chmod is not.
        os.chmod(path, PRIVATE_DIR_MODE)
    if tighten and not missing:
        os.chmod(directory, PRIVATE_DIR_MODE)
    return directory


def make_private_file(path: Path) -> Path:
    """Make the existing file ``path`` readable and writable by its owner only (0600). Returns ``path``."""
    os.chmod(path, PRIVATE_FILE_MODE)
    return path


class FileLockedError(OSError):
    """Another process holds the lock file."""


class LockFile:
    """An exclusive ``flock`` on ``path`` (created if missing) holding this process's pid, until ``close``:
    one process at a time per state file; the second is refused with the holder's pid."""

    def __init__(self, path: Path, what: str, mode: int = 0o644) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, mode)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            self._fd = None
            raise FileLockedError(f"{what} is in use by another process (pid {holder})") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

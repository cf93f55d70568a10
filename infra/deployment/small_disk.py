"""A small filesystem under one broker's log directory, for ``chaos fill-disk``: a disk that can be filled without
filling the machine's.

:class:`SmallDisk` moves a stopped broker's log directory aside, mounts a tmpfs of the given size at its path and
copies the log back onto it (the broker then starts on it unchanged); :meth:`SmallDisk.fill` writes a ballast
file until the filesystem refuses more (ENOSPC), :meth:`SmallDisk.free` removes it, and
:meth:`SmallDisk.unmount` copies the log, with what the broker wrote meanwhile, back onto the disk and removes
the mount. Mounting needs root (CAP_SYS_ADMIN): :func:`cannot_mount` says why not when it is missing.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["BALLAST_NAME", "SmallDisk", "SmallDiskError", "cannot_mount", "directory_bytes"]

BALLAST_NAME = "fill-disk.ballast"
CAP_SYS_ADMIN = 21
_CHUNKS = (1 << 20, 4096)


class SmallDiskError(RuntimeError):
    """The small filesystem could not be set up, filled or taken down (the message says what is where)."""


def cannot_mount(status: Path = Path("/proc/self/status")) -> str | None:
    """Why this process cannot mount a filesystem, or None when it can (it holds CAP_SYS_ADMIN)."""
    try:
        effective = next(int(line.split()[1], 16) for line in status.read_text().splitlines()
                         if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return "its capabilities cannot be read from /proc/self/status"
    if not effective & (1 << CAP_SYS_ADMIN):
        return "mounting a filesystem needs CAP_SYS_ADMIN (root): run the drill as root, e.g. with sudo"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount and umount are not installed"
    return None


def directory_bytes(directory: Path) -> int:
    """Bytes of the files under ``directory``."""
    return sum(entry.stat().st_size for entry in directory.rglob("*") if entry.is_file() and not entry.is_symlink())


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise SmallDiskError(f"{' '.join(command)} failed: {' '.join((result.stderr or result.stdout).split())}")


class SmallDisk:
    """A tmpfs of ``headroom`` bytes more than the log holds, at ``log_dir``, for a broker that is stopped while
    it is mounted and unmounted."""

    def __init__(self, log_dir: Path, headroom: int) -> None:
        self.log_dir = log_dir
        self.headroom = headroom
        self.before = log_dir.with_name(log_dir.name + ".before-fill-disk")
        self.after = log_dir.with_name(log_dir.name + ".after-fill-disk")
        self.ballast = log_dir / BALLAST_NAME
        self.size = 0

    def mounted(self) -> bool:
        return os.path.ismount(self.log_dir)

    def mount(self) -> int:
        """Move the log onto a new tmpfs at its path; the tmpfs's size. The broker must be stopped."""
        for leftover in (self.before, self.after):
            if leftover.exists():
                raise SmallDiskError(f"{leftover} is left from an earlier fill-disk: put the log it holds back at "
                                     f"{self.log_dir} first")
        if self.mounted():
            raise SmallDiskError(f"{self.log_dir} is a mount point already")
        if not self.log_dir.is_dir():
            raise SmallDiskError(f"{self.log_dir} is not a directory")
        self.size = directory_bytes(self.log_dir) + self.headroom
        self.log_dir.rename(self.before)
        self.log_dir.mkdir(mode=0o700)
        try:
            _run("mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0700", "tmpfs", str(self.log_dir))
        except SmallDiskError:
            self.log_dir.rmdir()
            self.before.rename(self.log_dir)
            raise
        shutil.copytree(self.before, self.log_dir, symlinks=True, dirs_exist_ok=True)
        return self.size

    def free_bytes(self) -> int:
        stats = os.statvfs(self.log_dir)
        return stats.f_bavail * stats.f_frsize

    def fill(self) -> int:
        """Write the ballast until the filesystem is full; its bytes."""
        written = 0
        with open(self.ballast, "ab", buffering=0) as ballast:
            for size in _CHUNKS:
                chunk = bytes(size)
                while True:
                    try:
                        written += ballast.write(chunk)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        return written

    def free(self) -> None:
        """Remove the ballast."""
        self.ballast.unlink(missing_ok=True)

    def unmount(self) -> None:
        """Copy the log (the ballast left out) back onto the disk and remove the tmpfs. The broker must be
        stopped."""
        self.free()
        shutil.copytree(self.log_dir, self.after, symlinks=True)
        _run("umount", str(self.log_dir))
        self.log_dir.rmdir()
        self.after.rename(self.log_dir)
        shutil.rmtree(self.before)

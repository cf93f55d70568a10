"""Writing files so that a crash leaves either the old or the new content, never a torn or lost one.

One mechanism for every small file the broker rewrites (checkpoints, producer-state snapshots,
partition.metadata, the standalone metadata): write a temporary file, fsync it, rename it over the
old one, fsync the directory so the rename itself survives a power cut.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


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


def write_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; with ``durable`` (the default) also crash-safely.

    ``durable=False`` skips both fsyncs, for a caller that syncs the file and its directory later
    (off the event loop, see Log.flush).
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)

"""The audit's state is its owner's alone, whatever the umask: directories 0700, files 0600."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.durable_file import write_atomically

__all__ = ["DIRECTORY_MODE", "FILE_MODE", "private_directory", "private_file", "write_private"]

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def private_directory(path: Path) -> Path:
    """``path`` as a directory only its owner may enter (created with its parents if missing)."""
    path.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
    os.chmod(path, DIRECTORY_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path`` (an existing file) readable and writable by its owner only."""
    os.chmod(path, FILE_MODE)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and crash-safely, owner-only (its directory should be private
    too: the file is created before its mode is set)."""
    write_atomically(path, data)
    os.chmod(path, FILE_MODE)

"""The warehouse's file primitives: owner-only directories and files, fsync, and atomic JSON writes.

Everything the ETL creates under the warehouse is the owner's alone: directories 0700, files 0600, whatever the
process's umask (Spark's own output is made so by the session's ``fs.permissions.umask-mode``, etl.spark).
Every file that matters is written to a temporary name, fsynced, renamed into place with ``os.replace`` and its
directory fsynced, so that a crash leaves the old content or the new one, never a torn file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline import durable_file
from pipeline.durable_file import fsync_dir, make_private_dir

__all__ = ["DIRECTORY_MODE", "FILE_MODE", "fsync_directory", "fsync_file", "read_json",
           "write_atomically", "write_bytes_atomically"]

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def fsync_directory(path: Path) -> None:
    fsync_dir(path)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (owner-only): a temporary file fsynced, renamed into place, the directory
    fsynced."""
    make_private_dir(path.parent)
    durable_file.write_atomically(path, data, mode=FILE_MODE)


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically and crash-safely (see :func:`write_bytes_atomically`)."""
    write_bytes_atomically(path, json.dumps(data, sort_keys=True, separators=(",", ":")).encode())


def read_json(path: Path) -> Any:
    with open(path) as source:
        return json.load(source)

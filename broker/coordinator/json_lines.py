"""Replaying an append-only file of JSON lines, as the coordinators' standalone stores keep them."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)


def replay_json_lines(path: Path, apply: Callable[[dict[str, Any], bytes], None]) -> None:
    """Call ``apply(entry, line)`` for each line of ``path`` in order (nothing when it does not exist); at the
    first torn or unreadable line (a crash mid-append) the file is cut there and the rest dropped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    kept = 0
    for line in data.splitlines(keepends=True):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("torn line")
            apply(json.loads(line), line)
        except (ValueError, KeyError, TypeError):
            log.warning("%s: unreadable entry at byte %d; the rest is dropped", path, kept)
            break
        kept += len(line)
    if kept < len(data):
        os.truncate(path, kept)

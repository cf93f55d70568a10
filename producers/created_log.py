"""The emulator's list of every event it created (the `created.log` setting), for tests and drills.

One line per created event, ``<eventId> <topic> <eventTime ms>``, appended in the order the events were made,
whatever became of them afterwards (acknowledged, failed, still in flight). Lines are buffered and written out
by :meth:`CreatedLog.flush`, which the emulator calls at least once per audit window, and at exit, where the
file is also fsynced. The file and any directory made for it are owner-only (0600 / 0700).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from pipeline.durable_file import make_private_dir

__all__ = ["CreatedLog"]


class CreatedLog:
    """Appends ``<eventId> <topic> <eventTime ms>`` lines to ``path``; one writer thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        make_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file = os.fdopen(fd, "a", encoding="ascii", buffering=1 << 16)
        self._lines: list[str] = []
        self.written = 0

    def add(self, events: Iterable[tuple[str, str, int]]) -> None:
        """(event id, topic, event time ms) of events just created."""
        self._lines.extend(f"{event_id} {topic} {event_time}\n" for event_id, topic, event_time in events)

    def flush(self) -> None:
        """Write what was added since the last flush out to the file (the OS's buffers)."""
        if self._lines:
            self._file.write("".join(self._lines))
            self.written += len(self._lines)
            self._lines.clear()
        self._file.flush()

    def close(self) -> None:
        """Flush, fsync and close."""
        if self._file.closed:
            return
        try:
            self.flush()
            os.fsync(self._file.fileno())
        finally:
            self._file.close()

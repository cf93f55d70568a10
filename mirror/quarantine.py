"""The mirror's quarantine: records the target refused for good, kept whole so that nothing is dropped silently.

A record the target will never take (too large for the target topic, invalid there) would otherwise stop the
mirror at the same offset after every restart. Instead it is appended, with its lineage (source cluster, topic,
partition, offset), timestamp, key, value and headers and the error, to ``STATE/GROUP/quarantine/SOURCE.jsonl``
-- one JSON object a line, bytes in base64 -- and fsynced before the mirror acknowledges its offset and goes on.
The directory is 0700 and the files 0600. :func:`read_quarantine` reads a file back (tests, an operator's
script); :func:`reason_of` gives the short, stable reason category the audit names it by.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from pipeline.durable_file import append_durably, make_private_dir
from pipeline.protocol.errors import ErrorCode
from pipeline.records import Header

__all__ = ["MirrorQuarantine", "QuarantinedRecord", "read_quarantine", "reason_of"]

_REASONS = {ErrorCode.MESSAGE_TOO_LARGE: "too large for the target",
            ErrorCode.RECORD_LIST_TOO_LARGE: "too large for the target",
            ErrorCode.INVALID_RECORD: "invalid for the target",
            ErrorCode.INVALID_TIMESTAMP: "timestamp invalid for the target"}


def reason_of(error: BaseException) -> str:
    """The reason category of a refusal (docs/accounting.md: short, stable text)."""
    return _REASONS.get(getattr(error, "code", None), "refused by the target")  # type: ignore[arg-type]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


class QuarantinedRecord(dict):
    """One quarantined record as read back: the JSON fields, with ``key``/``value``/``headers`` as bytes."""


class MirrorQuarantine:
    """Appends refused records to one file per source under ``directory``; thread-safe."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()

    def path(self, source: str) -> Path:
        return self.directory / f"{source}.jsonl"

    def add(self, *, source: str, topic: str, partition: int, offset: int, timestamp: int, key: bytes | None,
            value: bytes | None, headers: Sequence[Header], error: BaseException, event_id: str | None) -> str:
        """Write one refused record durably (fsynced); its reason category."""
        reason = reason_of(error)
        entry = {"source": source, "topic": topic, "partition": partition, "offset": offset, "timestamp": timestamp,
                 "key": _b64(key), "value": _b64(value), "headers": [[name, _b64(v)] for name, v in headers],
                 "reason": reason, "error": str(error), "eventId": event_id, "quarantinedAt": int(time.time() * 1000)}
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            make_private_dir(self.directory)
            append_durably(self.path(source), line)
        return reason


def read_quarantine(path: str | Path) -> Iterator[QuarantinedRecord]:
    """The records of one quarantine file, in the order they were quarantined."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            entry: dict[str, Any] = json.loads(line)
            for field in ("key", "value"):
                entry[field] = None if entry[field] is None else base64.b64decode(entry[field])
            entry["headers"] = [(name, None if v is None else base64.b64decode(v)) for name, v in entry["headers"]]
            yield QuarantinedRecord(entry)

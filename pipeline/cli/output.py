"""How `consume` prints messages: the value, key SEP value, or one JSON object per line.

JSON lines carry topic, partition, offset, timestamp, key, value and headers. Keys and values (and
header values) are JSON strings holding the bytes decoded as UTF-8; bytes that are not valid UTF-8 appear
as ``\\xNN`` escapes (Python's ``backslashreplace``), and a null key or value is JSON null. Text
round-trips exactly; for binary payloads use ``--format value`` (raw bytes) instead.
"""

from __future__ import annotations

import json
import threading
from typing import BinaryIO, Callable

FORMATS = ("value", "key-value", "json")

Formatter = Callable[[object], bytes]


def _text(data: bytes | None) -> str | None:
    return None if data is None else bytes(data).decode("utf-8", "backslashreplace")


def formatter(name: str, key_separator: bytes = b"\t", line_separator: bytes = b"\n") -> Formatter:
    """The function turning one message (topic, partition, offset, timestamp, key, value, headers) into bytes."""
    if name == "value":
        def value_only(message: object) -> bytes:
            value = message.value  # type: ignore[attr-defined]
            return (b"null" if value is None else bytes(value)) + line_separator
        return value_only
    if name == "key-value":
        def key_and_value(message: object) -> bytes:
            key, value = message.key, message.value  # type: ignore[attr-defined]
            return b"".join((b"null" if key is None else bytes(key), key_separator,
                             b"null" if value is None else bytes(value), line_separator))
        return key_and_value
    if name == "json":
        def as_json(message: object) -> bytes:
            headers = getattr(message, "headers", None) or ()
            document = {
                "topic": message.topic,  # type: ignore[attr-defined]
                "partition": message.partition,  # type: ignore[attr-defined]
                "offset": message.offset,  # type: ignore[attr-defined]
                "timestamp": message.timestamp,  # type: ignore[attr-defined]
                "key": _text(message.key),  # type: ignore[attr-defined]
                "value": _text(message.value),  # type: ignore[attr-defined]
                "headers": [[_text(k) if isinstance(k, (bytes, bytearray, memoryview)) else k, _text(v)]
                            for k, v in headers],
            }
            return json.dumps(document, ensure_ascii=False).encode() + line_separator
        return as_json
    raise ValueError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}")


class PeriodicFlusher:
    """Flushes a buffered binary stream a few times a second from a background thread.

    Output stays block-buffered (fast) and still reaches a pipe reader promptly when messages trickle
    in; BufferedWriter is thread-safe, so the writer and this thread may touch it at once.
    """

    def __init__(self, stream: BinaryIO, interval_s: float = 0.2) -> None:
        self._stream = stream
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cli-flusher", daemon=True)

    def __enter__(self) -> "PeriodicFlusher":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._stream.flush()
            except (OSError, ValueError):
                # The reader went away (or the stream closed); the writer sees the same error and stops.
                return

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

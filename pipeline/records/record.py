"""One record of a v2 batch as the clients see it (Kafka's Record), and its header type."""

from __future__ import annotations

from typing import NamedTuple

# A record header: a UTF-8 key and a value that may be null.
Header = tuple[str, "bytes | None"]


class Record(NamedTuple):
    """One decoded record: its absolute offset and timestamp, key, value and headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]

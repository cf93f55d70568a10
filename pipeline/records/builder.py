"""Accumulating records into one batch of bounded size (Kafka's MemoryRecordsBuilder)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.records.batch import HEADER_SIZE
from pipeline.records.encode import encode_batch, now_ms, record_size
from pipeline.records.record import Header


class BatchBuilder:
    """Accumulates records for one partition until the batch would exceed ``max_bytes``, then builds it.

    The size kept is the exact uncompressed size of the batch; with compression the built batch is
    usually smaller. The first record is always accepted, however large, so that an oversized
    record still travels in a batch of its own (the broker then decides whether it is too large).
    """

    def __init__(self, max_bytes: int = 16384, compression: int = 0, compression_level: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.compression = compression
        self.compression_level = compression_level
        self._values: list[bytes | None] = []
        self._keys: list[bytes | None] = []
        self._timestamps: list[int] = []
        self._headers: list[Sequence[Header] | None] = []
        self._size = HEADER_SIZE

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        timestamp: int | None = None,
        headers: Sequence[Header] | None = None,
    ) -> bool:
        """Add a record; False (and nothing added) when it would push the batch over ``max_bytes``."""
        if timestamp is None:
            timestamp = now_ms()
        n = len(self._values)
        delta = timestamp - self._timestamps[0] if n else 0
        size = record_size(n, delta, key, value, headers)
        if n and self._size + size > self.max_bytes:
            return False
        self._size += size
        self._values.append(value)
        self._keys.append(key)
        self._timestamps.append(timestamp)
        self._headers.append(headers)
        return True

    def __len__(self) -> int:
        return len(self._values)

    @property
    def size(self) -> int:
        """Bytes the batch takes uncompressed so far (header included)."""
        return self._size

    def is_empty(self) -> bool:
        """Whether no record has been appended yet."""
        return not self._values

    def build(self, **header_fields: object) -> bytes:
        """Encode the records appended so far; ``header_fields`` are encode_batch's keyword arguments
        (base_offset, producer_id, producer_epoch, base_sequence, partition_leader_epoch, transactional)."""
        for name in ("values", "keys", "timestamps", "timestamp", "headers", "compression", "compression_level"):
            if name in header_fields:
                raise TypeError(f"build() does not take {name!r}: it is set by append() or the constructor")
        return encode_batch(
            self._values,
            self._keys,
            timestamps=self._timestamps,
            headers=self._headers,
            compression=self.compression,
            compression_level=self.compression_level,
            **header_fields,  # type: ignore[arg-type]
        )

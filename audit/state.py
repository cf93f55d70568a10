"""Counts per window that survive a restart: the audit's tier counts and the offsets they were counted up to,
written together in one file (fsync, rename, directory fsync), so that a restarted audit reads on from
exactly where its counts stand -- nothing counted twice, nothing missed.

``CheckpointedCounts`` is the offset store of the :class:`~pipeline.client.static_connector.StaticConsumerConnector`
reading a cluster for the audit: every ``save(offsets)`` (the connector's commit) writes the offsets with a
snapshot of the counts. The counting thread is the one committing, so the two always agree.
"""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from audit.reconcile import TierCount
from audit.sketch import EventSketch
from pipeline.durable_file import LockFile, write_atomically

__all__ = ["CheckpointedCounts", "CountKey"]

#: (tier, topic, datacenter, window start)
CountKey = tuple[str, str, str, int]
TopicPartition = tuple[str, int]


class CheckpointedCounts:
    """Tier counts by (tier, topic, datacenter, window start), and the offsets they include, in ``path``.

    Thread-safe: counted by one thread, read (``snapshot``) by the reconciler. ``extra`` is further state
    the owner wants saved with the counts (JSON-able), restored into ``self.extra`` at load.
    """

    def __init__(self, path: str | Path, retain_ms: int, now_ms: Callable[[], int]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.retain_ms = retain_ms
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._counts: dict[CountKey, TierCount] = {}
        self._pending: dict[CountKey, list[bytes]] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self.extra: dict[str, Any] = {}
        self._file_lock = LockFile(self.path.with_name(self.path.name + ".lock"), f"audit state {self.path}")
        try:
            self._read()
        except BaseException:
            self._file_lock.close()
            raise

    # -- counting -----------------------------------------------------------------------------------

    def count(self, key: CountKey, size: int, event_id: bytes | None, copies: int = 1) -> None:
        """One event (``copies`` times) counted under ``key``."""
        with self._lock:
            counted = self._counts.get(key)
            if counted is None:
                counted = self._counts[key] = TierCount(hosts=1)
            counted.count += copies
            counted.bytes += size * copies
            if event_id is not None:
                pending = self._pending.setdefault(key, [])
                pending.extend([event_id] * copies)
                if len(pending) >= 2000:
                    self._flush(key)

    def add(self, key: CountKey, counted: TierCount) -> None:
        """A whole count (an AuditCount record of a host) added under ``key``."""
        with self._lock:
            mine = self._counts.get(key)
            if mine is None:
                mine = self._counts[key] = TierCount()
            mine.add(counted.count, counted.bytes, counted.sketch)

    def snapshot(self, keys: Iterable[CountKey] | None = None) -> dict[CountKey, TierCount]:
        """Copies of the counts (of ``keys``, or all), sketches up to date."""
        with self._lock:
            for key in list(self._pending):
                self._flush(key)
            wanted = self._counts.keys() if keys is None else [k for k in keys if k in self._counts]
            return {k: _copy(self._counts[k]) for k in wanted}

    def _flush(self, key: CountKey) -> None:
        ids = self._pending.pop(key, None)
        if ids:
            counted = self._counts[key]
            if counted.sketch is None:
                counted.sketch = EventSketch()
            counted.sketch.add(ids)

    # -- the offset store of the connector ---------------------------------------------------------------

    def load(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._offsets)

    def save(self, offsets: dict[TopicPartition, int]) -> None:
        """Write ``offsets`` with the counts as they stand, dropping windows older than retain_ms."""
        horizon = self._now_ms() - self.retain_ms
        with self._lock:
            for key in list(self._pending):
                self._flush(key)
            for key in [k for k in self._counts if k[3] < horizon]:
                del self._counts[key]
            self._offsets = dict(offsets)
            data = {"offsets": [[t, p, o] for (t, p), o in sorted(offsets.items())],
                    "counts": [[*key, c.count, c.bytes, c.hosts,
                                None if c.sketch is None else base64.b64encode(c.sketch.to_bytes()).decode()]
                               for key, c in sorted(self._counts.items())],
                    "extra": self.extra}
            text = json.dumps(data)
        write_atomically(self.path, text.encode())

    def close(self) -> None:
        self._file_lock.close()

    def _read(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except ValueError as exc:
            raise OSError(f"{self.path} is not an audit checkpoint ({exc}); move it away to count from the start")
        self._offsets = {(t, p): o for t, p, o in data["offsets"]}
        for tier, topic, datacenter, start, count, size, hosts, sketch in data["counts"]:
            self._counts[(tier, topic, datacenter, start)] = TierCount(
                count, size, None if sketch is None else EventSketch.from_bytes(base64.b64decode(sketch)), hosts)
        self.extra = data.get("extra", {})


def _copy(counted: TierCount) -> TierCount:
    sketch = None
    if counted.sketch is not None:
        sketch = EventSketch(counted.sketch.cells_per_table)
        sketch.cells = counted.sketch.cells.copy()
    return TierCount(counted.count, counted.bytes, sketch, counted.hosts)

"""Counts per window that survive a restart: the audit's tier counts and the offsets they were counted up to,
written together in one checksummed record, so that a restarted audit reads on from exactly where its counts
stand -- nothing counted twice, nothing missed.

``CheckpointedCounts`` is the offset store of the :class:`~pipeline.client.static_connector.StaticConsumerConnector`
reading a cluster for the audit: every ``save(offsets)`` (the connector's commit) writes the offsets with the
counts. The counting thread is the one committing, so the two always agree.

On disk, in Kafka's manner of a log and a checkpoint of it, under ``BASE`` (the path given):

- ``BASE.journal``: appended at every save, one record holding only what changed since the previous save -- the
  whole current value of each window counted since (count, bytes, hosts, sketch), the AuditCount record ids
  first seen since, the retention horizon -- and always all the offsets. A record is framed by its length and a
  CRC32, fsync'd, and applied whole or not at all: a tail torn by a crash is cut off at start, and the offsets
  it carried are not applied, so offsets and counts stay those of the last whole save.
- ``BASE.checkpoint``: the same record holding everything (every retained window, every id, the offsets),
  replaced atomically (write, fsync, rename) when the journal has grown larger than it; the journal is then
  emptied. Records carry a sequence number and the checkpoint the last one it includes, so a journal left
  behind by a crash between the two steps is skipped, not applied twice.

A save costs what changed; the full rewrite comes once per checkpoint's size of journal, so its cost spread
over the saves is again proportional to what changed. The old single-file JSON checkpoint (``BASE.json``) is
still read, and turned into a checkpoint at the first start.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from audit.reconcile import TierCount
from pipeline.auditing.sketch import EventSketch
from pipeline.durable_file import (
    PRIVATE_FILE_MODE,
    LockFile,
    fsync_dir,
    make_private_dir,
    make_private_file,
    write_atomically,
)

__all__ = ["CheckpointedCounts", "CountKey"]

#: (tier, topic, datacenter, window start)
CountKey = tuple[str, str, str, int]
TopicPartition = tuple[str, int]

#: A record: payload length, CRC32 of (sequence number + payload), sequence number.
_FRAME = struct.Struct("<IIQ")
_SEQUENCE = struct.Struct("<Q")
#: The payload: length of its JSON part, then the JSON, then the sketches it names, back to back.
_JSON_LENGTH = struct.Struct("<I")
#: The journal is folded into the checkpoint once larger than the checkpoint and than this.
MIN_COMPACT_BYTES = 1 << 20


class _State:
    """What a record holds (all of it, or what changed): applied to the counts in order."""

    __slots__ = ("sequence", "offsets", "counts", "seen", "horizon")

    def __init__(self, sequence: int, offsets: dict[TopicPartition, int], counts: dict[CountKey, TierCount],
                 seen: dict[str, int], horizon: int | None) -> None:
        self.sequence = sequence
        self.offsets = offsets
        self.counts = counts
        self.seen = seen
        self.horizon = horizon


def _encode(state: _State) -> bytes:
    """One framed record of ``state``."""
    sketches = []
    counts = []
    for key, c in sorted(state.counts.items()):
        blob = None if c.sketch is None else c.sketch.to_bytes()
        counts.append([*key, c.count, c.bytes, c.hosts, None if blob is None else len(blob)])
        if blob is not None:
            sketches.append(blob)
    head = json.dumps({"offsets": [[t, p, o] for (t, p), o in sorted(state.offsets.items())], "counts": counts,
                       "seen": sorted(state.seen.items()), "horizon": state.horizon},
                      separators=(",", ":")).encode()
    payload = b"".join([_JSON_LENGTH.pack(len(head)), head, *sketches])
    sequence = _SEQUENCE.pack(state.sequence)
    return _FRAME.pack(len(payload), zlib.crc32(payload, zlib.crc32(sequence)), state.sequence) + payload


def _decode(sequence: int, payload: bytes) -> _State:
    """The state in a record's payload (its CRC already checked); ValueError if it does not parse."""
    (length,) = _JSON_LENGTH.unpack_from(payload)
    head = json.loads(payload[_JSON_LENGTH.size:_JSON_LENGTH.size + length])
    position = _JSON_LENGTH.size + length
    counts: dict[CountKey, TierCount] = {}
    for tier, topic, datacenter, start, count, size, hosts, sketch_length in head["counts"]:
        sketch = None
        if sketch_length is not None:
            sketch = EventSketch.from_bytes(payload[position:position + sketch_length])
            position += sketch_length
        counts[(tier, topic, datacenter, start)] = TierCount(count, size, sketch, hosts)
    if position != len(payload):
        raise ValueError(f"{len(payload) - position} bytes after the last sketch")
    return _State(sequence, {(t, p): o for t, p, o in head["offsets"]}, counts, dict(head["seen"]), head["horizon"])


def _records(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(end position, sequence number, payload) of each whole record of ``data``, up to the first torn one."""
    position = 0
    while position + _FRAME.size <= len(data):
        length, crc, sequence = _FRAME.unpack_from(data, position)
        start = position + _FRAME.size
        payload = data[start:start + length]
        if len(payload) < length or zlib.crc32(payload, zlib.crc32(_SEQUENCE.pack(sequence))) != crc:
            return
        position = start + length
        yield position, sequence, payload


class CheckpointedCounts:
    """Tier counts by (tier, topic, datacenter, window start), and the offsets they include, under ``path``.

    Thread-safe: counted by one thread, read (``snapshot``, ``take_changed``) by the reconciler. ``first_seen``
    keeps the ids of the AuditCount records counted (by window, dropped with it) so a copy is counted once.
    """

    def __init__(self, path: str | Path, retain_ms: int, now_ms: Callable[[], int]) -> None:
        self.path = Path(path)
        make_private_dir(self.path.parent, tighten=True)
        self.checkpoint_path = self.path.with_name(self.path.name + ".checkpoint")
        self.journal_path = self.path.with_name(self.path.name + ".journal")
        self.retain_ms = retain_ms
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._counts: dict[CountKey, TierCount] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._seen: dict[str, int] = {}
        #: Changed since the last save (for the journal), and since the last ``take_changed`` (for the reconciler).
        self._unsaved: set[CountKey] = set()
        self._unsaved_seen: dict[str, int] = {}
        self._changed: set[CountKey] = set()
        #: No window or id older than this is held (so retention only scans when the horizon passes it).
        self._oldest: int | None = None
        self._sequence = 0
        self._checkpoint_bytes = 0
        self._journal_bytes = 0
        self._journal: int | None = None
        self._file_lock = LockFile(self.path.with_name(self.path.name + ".lock"), f"audit state {self.path}")
        make_private_file(self._file_lock.path)
        try:
            self._read()
        except BaseException:
            self.close()
            raise

    # -- counting -----------------------------------------------------------------------------------

    def count(self, key: CountKey, size: int, event_id: bytes | None, copies: int = 1) -> None:
        """One event (``copies`` times) counted under ``key``."""
        self.count_all({key: (copies, size * copies, [] if event_id is None else [event_id] * copies)})

    def count_all(self, counted: dict[CountKey, tuple[int, int, list[bytes]]]) -> None:
        """Events counted in bulk: ``counted[key]`` = (events, their bytes, their ids) under each key, as ``count``
        of each event would count them (the ids join the key's sketch)."""
        with self._lock:
            for key, (events, size, ids) in counted.items():
                mine = self._counts.get(key)
                if mine is None:
                    mine = self._counts[key] = TierCount(hosts=1)
                    self._note_start(key[3])
                mine.count += events
                mine.bytes += size
                self._unsaved.add(key)
                self._changed.add(key)
                if ids:
                    if mine.sketch is None:
                        mine.sketch = EventSketch()
                    mine.sketch.add(ids)

    def add(self, key: CountKey, counted: TierCount) -> None:
        """A whole count (an AuditCount record of a host) added under ``key``."""
        with self._lock:
            mine = self._counts.get(key)
            if mine is None:
                mine = self._counts[key] = TierCount()
                self._note_start(key[3])
            mine.add(counted.count, counted.bytes, counted.sketch)
            self._unsaved.add(key)
            self._changed.add(key)

    def first_seen(self, record_id: str, window_start: int) -> bool:
        """Whether ``record_id`` (an AuditCount record of ``window_start``'s window) is new; it is kept from now."""
        with self._lock:
            if record_id in self._seen:
                return False
            self._seen[record_id] = self._unsaved_seen[record_id] = window_start
            self._note_start(window_start)
            return True

    def snapshot(self, keys: Iterable[CountKey] | None = None) -> dict[CountKey, TierCount]:
        """Copies of the counts (of ``keys``, or all), sketches up to date."""
        with self._lock:
            wanted = list(self._counts) if keys is None else [k for k in keys if k in self._counts]
            return {k: _copy(self._counts[k]) for k in wanted}

    def take_changed(self) -> set[CountKey]:
        """The keys counted since the last call (at the first, every key read back at start too)."""
        with self._lock:
            changed, self._changed = self._changed, set()
            return changed

    def _note_start(self, start: int) -> None:
        if self._oldest is None or start < self._oldest:
            self._oldest = start

    # -- the offset store of the connector ---------------------------------------------------------------

    def load(self) -> dict[TopicPartition, int]:
        with self._lock:
            return dict(self._offsets)

    def save(self, offsets: dict[TopicPartition, int]) -> None:
        """Write ``offsets`` with the windows counted since the last save, dropping those older than retain_ms."""
        horizon = self._now_ms() - self.retain_ms
        with self._lock:
            dropped = self._drop_before(horizon)
            if not (self._unsaved or self._unsaved_seen or dropped) and offsets == self._offsets:
                return
            self._offsets = dict(offsets)
            self._sequence += 1
            record = _encode(_State(self._sequence, self._offsets, {k: self._counts[k] for k in self._unsaved},
                                    self._unsaved_seen, horizon))
            self._unsaved = set()
            self._unsaved_seen = {}
            checkpoint = None
            if self._journal_bytes + len(record) > max(self._checkpoint_bytes, MIN_COMPACT_BYTES):
                checkpoint = _encode(self._everything(horizon))
        if checkpoint is None:
            self._append(record)
        else:
            self._write_checkpoint(checkpoint)

    def expire(self) -> None:
        """Drop the windows past retention, and write that, between two saves (a cluster with nothing new)."""
        self.save(self.load())

    def close(self) -> None:
        if self._journal is not None:
            os.close(self._journal)
            self._journal = None
        self._file_lock.close()

    def _drop_before(self, horizon: int) -> bool:
        if self._oldest is None or self._oldest >= horizon:
            return False
        for key in [k for k in self._counts if k[3] < horizon]:
            del self._counts[key]
            self._unsaved.discard(key)
        for record_id in [r for r, start in self._seen.items() if start < horizon]:
            del self._seen[record_id]
            self._unsaved_seen.pop(record_id, None)
        starts = [k[3] for k in self._counts] + list(self._seen.values())
        self._oldest = min(starts) if starts else None
        return True

    def _everything(self, horizon: int | None) -> _State:
        return _State(self._sequence, self._offsets, self._counts, self._seen, horizon)

    def _append(self, record: bytes) -> None:
        assert self._journal is not None
        view = memoryview(record)
        while view:
            view = view[os.write(self._journal, view):]
        os.fsync(self._journal)
        self._journal_bytes += len(record)

    def _write_checkpoint(self, checkpoint: bytes) -> None:
        """Replace the checkpoint, then empty the journal it includes."""
        write_atomically(self.checkpoint_path, checkpoint, mode=PRIVATE_FILE_MODE)
        make_private_file(self.checkpoint_path)
        assert self._journal is not None
        os.ftruncate(self._journal, 0)
        os.fsync(self._journal)
        self._checkpoint_bytes = len(checkpoint)
        self._journal_bytes = 0

    # -- reading back ---------------------------------------------------------------------------------------

    def _read(self) -> None:
        legacy = self.path.with_name(self.path.name + ".json")
        migrate = False
        try:
            data = self.checkpoint_path.read_bytes()
        except FileNotFoundError:
            if legacy.exists():
                self._apply(_read_legacy(legacy))
                migrate = True
        else:
            if legacy.exists():  # left by a crash just after it was turned into the checkpoint
                legacy.unlink()
            records = list(_records(data))
            if len(records) != 1 or records[0][0] != len(data):
                raise OSError(f"{self.checkpoint_path} is not an audit checkpoint (torn or corrupt); move it and "
                              f"{self.journal_path.name} away to count from the start")
            self._checkpoint_bytes = len(data)
            self._apply(self._parse(self.checkpoint_path, records[0][1], records[0][2]))
        self._journal = os.open(self.journal_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
        make_private_file(self.journal_path)
        journal = self.journal_path.read_bytes()
        end = 0
        for end, sequence, payload in _records(journal):
            if sequence > self._sequence:
                self._apply(self._parse(self.journal_path, sequence, payload))
        if end < len(journal):
            os.ftruncate(self._journal, end)  # a record torn by a crash: it never happened
            os.fsync(self._journal)
        self._journal_bytes = end
        self._changed = set(self._counts)
        if migrate:
            self._write_checkpoint(_encode(self._everything(None)))
            legacy.unlink()
            fsync_dir(self.path.parent)

    def _parse(self, path: Path, sequence: int, payload: bytes) -> _State:
        try:
            return _decode(sequence, payload)
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            raise OSError(f"{path}: record {sequence} has a good checksum but does not parse ({exc}); move the "
                          f"audit state away to count from the start") from exc

    def _apply(self, state: _State) -> None:
        self._sequence = state.sequence
        self._offsets = state.offsets
        self._counts.update(state.counts)
        self._seen.update(state.seen)
        for key in state.counts:
            self._note_start(key[3])
        for start in state.seen.values():
            self._note_start(start)
        if state.horizon is not None:
            self._drop_before(state.horizon)


def _read_legacy(path: Path) -> _State:
    """The single-file JSON checkpoint written before the journal."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except ValueError as exc:
        raise OSError(f"{path} is not an audit checkpoint ({exc}); move it away to count from the start")
    counts = {(tier, topic, datacenter, start): TierCount(
        count, size, None if sketch is None else EventSketch.from_bytes(base64.b64decode(sketch)), hosts)
        for tier, topic, datacenter, start, count, size, hosts, sketch in data["counts"]}
    return _State(0, {(t, p): o for t, p, o in data["offsets"]}, counts,
                  dict((data.get("extra") or {}).get("seen", {})), None)


def _copy(counted: TierCount) -> TierCount:
    sketch = None
    if counted.sketch is not None:
        sketch = EventSketch(counted.sketch.cells_per_table)
        sketch.cells = counted.sketch.cells.copy()
    return TierCount(counted.count, counted.bytes, sketch, counted.hosts)

"""Which source offsets the mirror may commit: per source partition, the lowest offset not yet acknowledged.

Records of a source partition are handed out in offset order and tracked in that order; the target
acknowledges them in any order (different target partitions, retries). The committable offset of a
partition is the first tracked offset still unacknowledged -- an acknowledgement past a hole never moves
it -- or, with nothing outstanding, the offset after the last record tracked. Offsets of one partition
are consecutive in our brokers (no compaction, no transaction markers), so a record further on than the
one expected means the offsets in between are gone from the source (retention deleted them before they
were mirrored): :meth:`OffsetTracker.track` reports that gap instead of tracking past it silently. A record
before the one expected cannot come from a partition read on from where it was claimed: the source partition
went back (the topic was deleted and created again); that is reported too, never skipped.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import NamedTuple

__all__ = ["Gap", "OffsetTracker", "Rewind", "SourcePartition"]


class SourcePartition(NamedTuple):
    """One partition of one source cluster."""

    source: str
    topic: str
    partition: int


class Gap(NamedTuple):
    """Offsets ``start`` .. ``end - 1`` of ``where`` are missing between what was mirrored and what came next."""

    where: SourcePartition
    start: int
    end: int

    @property
    def lost(self) -> int:
        return self.end - self.start


class Rewind(NamedTuple):
    """The source partition ``where`` handed out ``offset`` where ``expected`` was due: it went back."""

    where: SourcePartition
    expected: int
    offset: int


class _Progress:
    __slots__ = ("expected", "outstanding", "acked")

    def __init__(self, expected: int | None) -> None:
        #: The offset the next record should have (None: not known before the first record).
        self.expected = expected
        #: Tracked offsets in order, unacknowledged ones from the left; acknowledged ones wait in ``acked``.
        self.outstanding: deque[int] = deque()
        self.acked: set[int] = set()

    def committable(self) -> int | None:
        return self.outstanding[0] if self.outstanding else self.expected


class OffsetTracker:
    """Thread-safe: tracked by the mirror's stream threads, acknowledged by the producer's, read by commits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: dict[SourcePartition, _Progress] = {}

    def start(self, where: SourcePartition, committed: int | None) -> None:
        """``where`` was claimed; its records start at ``committed`` (None: wherever the reset puts them)."""
        with self._lock:
            self._partitions[where] = _Progress(committed)

    def forget(self, where: SourcePartition) -> None:
        """``where`` was released; acknowledgements still to come for it are ignored."""
        with self._lock:
            self._partitions.pop(where, None)

    def track(self, where: SourcePartition, offset: int, *, allow_gap: bool = False) -> Gap | Rewind | None:
        """A record was handed out: None when tracked in turn; the Gap before it (tracked only when
        ``allow_gap``, the gap then skipped for good); or a Rewind (not tracked)."""
        with self._lock:
            progress = self._partitions.get(where)
            if progress is None:
                progress = self._partitions[where] = _Progress(None)
            expected = progress.expected
            if expected is not None and offset != expected:
                if offset < expected:
                    return Rewind(where, expected, offset)
                gap = Gap(where, expected, offset)
                if not allow_gap:
                    return gap
            else:
                gap = None
            progress.outstanding.append(offset)
            progress.expected = offset + 1
            return gap

    def track_run(self, where: SourcePartition, first: int, count: int) -> bool:
        """The ``count`` records at ``first`` and after (consecutive offsets) were handed out: True when tracked in
        turn; False (nothing tracked) when ``first`` is not the offset expected -- then :meth:`track` them one by
        one to learn the gap or rewind."""
        with self._lock:
            progress = self._partitions.get(where)
            if progress is None:
                progress = self._partitions[where] = _Progress(None)
            if progress.expected is not None and first != progress.expected:
                return False
            progress.outstanding.extend(range(first, first + count))
            progress.expected = first + count
            return True

    def acknowledged(self, where: SourcePartition, offsets: list[int]) -> None:
        """The target stored the records of ``where`` at these source offsets."""
        with self._lock:
            progress = self._partitions.get(where)
            if progress is None:
                return
            outstanding, acked = progress.outstanding, progress.acked
            if not outstanding or not offsets:
                return
            # Only offsets tracked now: an acknowledgement of a send from before the partition was claimed
            # again says nothing about what is outstanding since.
            low, high = outstanding[0], outstanding[-1]
            if low <= min(offsets) and max(offsets) <= high:
                acked.update(offsets)
            else:
                acked.update(o for o in offsets if low <= o <= high)
            while outstanding and outstanding[0] in acked:
                acked.discard(outstanding.popleft())

    def committable(self, source: str | None = None,
                    only: list[SourcePartition] | None = None) -> dict[SourcePartition, int]:
        """The offset to commit for each tracked partition (of ``source``, or among ``only``) that has one."""
        with self._lock:
            items = (((w, self._partitions.get(w)) for w in only) if only is not None
                     else self._partitions.items())
            result = {}
            for where, progress in items:
                if progress is None or (source is not None and where.source != source):
                    continue
                offset = progress.committable()
                if offset is not None:
                    result[where] = offset
            return result

    def outstanding(self) -> int:
        """Records tracked and not yet acknowledged, over all partitions."""
        with self._lock:
            return sum(len(p.outstanding) - len(p.acked) for p in self._partitions.values())

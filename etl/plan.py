"""Planning a run: per topic-partition, the immutable offset ranges [start, end) it loads.

``start`` is where the published ranges of the manifests end (the truth, never the offsets committed in
ZooKeeper), or the partition's log start when it was never loaded; ``end`` is the partition's latest offset
(high watermark) at planning time. A partition whose ``start`` is below its log start lost offsets to
retention before they were loaded: out.of.range=fail stops the run naming every such partition and its
exact count, out.of.range=earliest moves on to the log start and records the skipped offsets. Ranges
longer than max.range.records are split into pieces of at most that many offsets (one Spark task each).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from pipeline.etl_runs import SkippedOffsets

__all__ = ["EtlError", "OffsetRange", "OutOfRangeError", "PartitionBounds", "plan_ranges"]

TopicPartition = tuple[str, int]


class EtlError(Exception):
    """A run of the ETL failed; the message says why (one line)."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [start, end) of one topic-partition, loaded by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OffsetRange":
        return cls(data["topic"], int(data["partition"]), int(data["start"]), int(data["end"]))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.start}, {self.end})"


@dataclass(frozen=True)
class PartitionBounds:
    """A partition's log start offset and latest offset (high watermark) as the broker reported them."""

    log_start: int
    latest: int


class OutOfRangeError(EtlError):
    """Retention deleted offsets of some partitions before they were loaded (out.of.range=fail)."""

    def __init__(self, lost: list[SkippedOffsets]) -> None:
        self.lost = lost
        total = sum(s.count for s in lost)
        where = "; ".join(f"{s.topic}-{s.partition} offsets {s.start}..{s.end - 1} ({s.count} offsets)" for s in lost)
        super().__init__(f"{total} offsets were deleted by retention before they were loaded: {where}; "
                         f"rerun with out.of.range=earliest to skip them (recorded in the run's history)")


def plan_ranges(bounds: Mapping[TopicPartition, PartitionBounds], loaded: Mapping[TopicPartition, int],
                max_records: int, out_of_range: str = "fail") -> tuple[list[OffsetRange], list[SkippedOffsets]]:
    """The ranges to load and the offsets skipped, sorted by topic, partition and offset.

    ``bounds``: every partition to load; ``loaded``: the end of the last published range per partition.
    Raises OutOfRangeError (out.of.range=fail) naming every partition that lost offsets.
    """
    if max_records < 1:
        raise ValueError(f"max.range.records must be at least 1, got {max_records}")
    if out_of_range not in ("fail", "earliest"):
        raise ValueError(f"out.of.range must be fail or earliest, got {out_of_range!r}")
    ranges: list[OffsetRange] = []
    skipped: list[SkippedOffsets] = []
    for (topic, partition) in sorted(bounds):
        bound = bounds[(topic, partition)]
        start = loaded.get((topic, partition))
        if start is None:
            start = bound.log_start
        elif start < bound.log_start:
            skipped.append(SkippedOffsets(topic, partition, start, bound.log_start))
            start = bound.log_start
        elif start > bound.latest:
            raise EtlError(f"{topic}-{partition}: the warehouse has offsets up to {start} but the partition ends at "
                           f"{bound.latest} (was the topic deleted and created again?)")
        ranges.extend(split_range(OffsetRange(topic, partition, start, bound.latest), max_records))
    if skipped and out_of_range == "fail":
        raise OutOfRangeError(skipped)
    return ranges, skipped


def split_range(whole: OffsetRange, max_records: int) -> list[OffsetRange]:
    """``whole`` cut into consecutive ranges of at most ``max_records`` offsets (none when it is empty)."""
    return [OffsetRange(whole.topic, whole.partition, start, min(start + max_records, whole.end))
            for start in range(whole.start, whole.end, max_records)]


def loaded_ends(ranges: Iterable[OffsetRange | SkippedOffsets]) -> dict[TopicPartition, int]:
    """Per partition, the end of the furthest of ``ranges`` (the published ranges and skipped offsets)."""
    ends: dict[TopicPartition, int] = {}
    for r in ranges:
        key = (r.topic, r.partition)
        ends[key] = max(ends.get(key, r.end), r.end)
    return ends

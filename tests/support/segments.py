"""Reading a partition's segment files the way recovery would: whole RecordBatch v2 batches with valid CRCs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.records.batch import BatchHeader, iter_batches


@dataclass
class SegmentScan:
    """What one `.log` file holds: its batch headers and whether it ends exactly on a batch boundary."""

    path: Path
    size: int
    batches: list[BatchHeader]
    whole_batches_end: int

    @property
    def ends_on_batch_boundary(self) -> bool:
        return self.whole_batches_end == self.size


def scan_segment(path: Path) -> SegmentScan:
    """Parse every batch of one segment file, checking framing and CRC (raises CorruptBatchError)."""
    data = path.read_bytes()
    batches: list[BatchHeader] = []
    end = 0
    for position, header in iter_batches(data, check_crc=True):
        batches.append(header)
        end = position + header.size
    return SegmentScan(path, len(data), batches, end)


def scan_partition(partition_dir: Path) -> list[SegmentScan]:
    """Scan all `.log` files of a partition directory in base-offset order."""
    return [scan_segment(path) for path in sorted(Path(partition_dir).glob("*.log"))]


def stored_batches(partition_dir: Path) -> list[BatchHeader]:
    """All batch headers of a partition, in log order."""
    return [header for scan in scan_partition(partition_dir) for header in scan.batches]

"""Compacted topics in tests and benchmarks: keyed writes that remember what compaction must keep, a reader
that follows offset gaps, checks of a partition directory after a crash, and bulk keyed data.

A `KeyedWriter` produces rounds of keyed records (a value of None is a tombstone) through a `send` function
(our raw protocol, kafka-python or confluent-kafka) and records, per key, the offset and value of its latest
record: after cleaning, reading the partition from the beginning must give exactly those records (without
the tombstones once delete.retention.ms has passed). The log cleaner never touches the active segment, so
`roll` writes one record large enough that it cannot share a segment with anything before it: every
earlier record becomes cleanable. Each roll record has a key of its own: a pass only maps keys up to the active
segment, so a roll record under a reused key would outlive its successor (which sits in the active segment)
until the next roll.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from broker.log.checkpoint import OffsetCheckpointFile
from pipeline.records.batch import iter_batches
from pipeline.records import decode_batch, encode_batch
from tests.support import wire
from tests.support.segments import scan_partition

ROLL_PREFIX = b"~roll-"
# The roll record's value is this much smaller than segment.bytes, so that its batch (header, key, varints)
# still fits a segment of its own and overflows any segment already holding a batch.
ROLL_MARGIN = 120
# The files a cleaning pass leaves while it is in flight (Kafka's LogCleaner suffixes).
CLEANING_SUFFIXES = (".cleaned", ".swap")
CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# The largest batch keyed_batches builds by default.
BATCH_TARGET_BYTES = 512 * 1024

KeyValue = tuple[bytes, "bytes | None"]
Send = Callable[[Sequence[KeyValue]], int]


def compacted_topic_configs(segment_bytes: int, *, policy: str = "compact", delete_retention_ms: int = 1000,
                            **extra: object) -> dict[str, str]:
    """Topic configs that make the cleaner act at once on a small topic: small segments, any dirty bytes at
    all (min.cleanable.dirty.ratio 0: the roll records, each under a key of its own, pile up in the clean
    section, so one small update after them is a tiny share of the log), replaced segment files removed at
    once, tombstones kept ``delete_retention_ms``."""
    configs = {"cleanup.policy": policy, "segment.bytes": segment_bytes, "min.cleanable.dirty.ratio": 0,
               "delete.retention.ms": delete_retention_ms, "file.delete.delay.ms": 0}
    configs.update({name.replace("_", "."): value for name, value in extra.items()})
    return {name: str(value) for name, value in configs.items()}


def wire_sender(conn: wire.KafkaConnection, topic: str, partition: int = 0) -> Send:
    """A `Send` producing each round as one uncompressed batch over our raw protocol; returns its base offset."""
    def send(records: Sequence[KeyValue]) -> int:
        batch = encode_batch([value for _, value in records], [key for key, _ in records])
        result = wire.produce(conn, topic, partition, batch)
        if result.error_code != 0:
            raise AssertionError(f"Produce to {topic}-{partition} failed with error {result.error_code}")
        return result.base_offset
    return send


@dataclass(frozen=True)
class Kept:
    """A record compaction must keep: the latest of its key."""

    offset: int
    key: bytes
    value: bytes | None


class KeyedWriter:
    """Writes rounds of keyed records and remembers every key's latest record (see the module docstring)."""

    def __init__(self, send: Send, segment_bytes: int) -> None:
        self.send = send
        self.segment_bytes = segment_bytes
        self.latest: dict[bytes, Kept] = {}
        self.end_offset = 0

    def write(self, records: Sequence[KeyValue]) -> int:
        """Produce ``records`` (one round, offsets consecutive); return the offset of the first."""
        base = self.send(records)
        for index, (key, value) in enumerate(records):
            self.latest[key] = Kept(base + index, key, value)
        self.end_offset = base + len(records)
        return base

    def roll(self) -> int:
        """Produce the roll record (see the module docstring); return its offset."""
        return self.write([(ROLL_PREFIX + b"%d" % self.end_offset, b"r" * (self.segment_bytes - ROLL_MARGIN))])

    def kept(self, tombstones: bool = True) -> list[Kept]:
        """Every key's latest record in offset order (without tombstones unless ``tombstones``)."""
        return sorted((k for k in self.latest.values() if tombstones or k.value is not None), key=lambda k: k.offset)

    def tombstoned(self) -> set[bytes]:
        """The keys whose latest record is a tombstone."""
        return {k.key for k in self.latest.values() if k.value is None}


def is_roll(key: bytes | None) -> bool:
    """Whether ``key`` is a roll record's."""
    return key is not None and key.startswith(ROLL_PREFIX)


def read_log(conn: wire.KafkaConnection, topic: str, partition: int = 0) -> list[Kept]:
    """Every record of the partition from offset 0 to its high watermark, following gaps: each Fetch starts
    after the last offset of the last whole batch it got (a cleaned batch keeps its offset range)."""
    records: list[Kept] = []
    offset = 0
    while True:
        result = wire.fetch(conn, topic, partition, offset, max_wait_ms=0)
        if result.error_code != 0:
            raise AssertionError(f"Fetch {topic}-{partition} at offset {offset} failed with error {result.error_code}")
        if offset >= result.high_watermark:
            return records
        batches = list(iter_batches(result.records))
        if not batches:
            raise AssertionError(f"Fetch {topic}-{partition} at offset {offset} < high watermark "
                                 f"{result.high_watermark} returned no whole batch")
        for position, header in batches:
            _, batch_records = decode_batch(result.records, position)
            records.extend(Kept(r.offset, r.key, r.value) for r in batch_records if r.offset >= offset)
            offset = header.base_offset + header.last_offset_delta + 1


def latest_by_key(records: Sequence[Kept]) -> dict[bytes, Kept]:
    """The last record of every key in ``records`` (what a consumer reading them all ends up with)."""
    return {record.key: record for record in records}


def cleaning_leftovers(partition_dir: Path) -> list[str]:
    """Names of files a cleaning pass in flight leaves (`.cleaned`, `.swap`) in the partition directory."""
    return sorted(path.name for path in partition_dir.iterdir() if path.name.endswith(CLEANING_SUFFIXES))


def check_segments(partition_dir: Path) -> None:
    """The partition's segments are what recovery must leave: whole batches with valid CRCs, offsets rising
    across the segments, each segment's batches at or above its file's base offset and below the next's."""
    scans = scan_partition(partition_dir)
    bases = [int(scan.path.stem) for scan in scans]
    last = -1
    for scan, base, next_base in zip(scans, bases, bases[1:] + [None]):
        assert scan.ends_on_batch_boundary, f"{scan.path.name}: {scan.size - scan.whole_batches_end} bytes of a partial batch"
        for header in scan.batches:
            first, final = header.base_offset, header.base_offset + header.last_offset_delta
            assert first > last, f"{scan.path.name}: batch at offset {first} after offset {last}"
            assert first >= base, f"{scan.path.name}: batch at offset {first} below the segment's base {base}"
            assert next_base is None or final < next_base, f"{scan.path.name}: batch up to {final} reaches {next_base}"
            last = final


def log_bytes(partition_dir: Path, active: bool = True) -> int:
    """Bytes of the partition's `.log` files (without the last, active, one unless ``active``)."""
    paths = sorted(partition_dir.glob("*.log"))
    return sum(path.stat().st_size for path in (paths if active else paths[:-1]))


def cleaner_checkpoint(log_dir: Path, topic: str, partition: int = 0) -> int | None:
    """The partition's offset in the log dir's cleaner-offset-checkpoint (None when it has none yet)."""
    return OffsetCheckpointFile(log_dir / CHECKPOINT_FILE).read().get((topic, partition))


def keyed_batches(total_bytes: int, keys: int, value_bytes: int, records_per_batch: int | None = None,
                  seed: int = 0) -> Iterator[bytes]:
    """Uncompressed batches of about ``total_bytes`` in all, records with 16-byte keys drawn in turn from
    ``keys`` distinct ones (so each key is updated about total/(keys * record) times, the updates of one key
    spread evenly over the log) and ``value_bytes``-byte values; by default 500 records a batch, fewer where
    500 would pass 512 KiB (a broker takes batches up to message.max.bytes, about 1 MiB)."""
    if records_per_batch is None:
        records_per_batch = max(1, min(500, BATCH_TARGET_BYTES // (value_bytes + 16)))
    value = random.Random(seed).randbytes(value_bytes)
    values = [value] * records_per_batch
    written = index = 0
    while written < total_bytes:
        batch = encode_batch(values, [b"key-%012d" % ((index + i) % keys) for i in range(records_per_batch)])
        index += records_per_batch
        written += len(batch)
        yield batch

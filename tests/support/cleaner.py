"""Helpers of the log cleaner's tests: keyed batches and a compacted log with its cleaner."""

from __future__ import annotations

from typing import Callable

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import Log, LogConfig
from broker.log.log import now_ms
from broker.log.cleaner import CleanerConfig
from broker.log.log_cleaner import LogCleaner
from pipeline.records.batch import iter_batches
from pipeline.records import decode_batch

Records = list[tuple[bytes | None, bytes | None]]


def keyed_batch(records: Records, timestamp: int = 1_000_000, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, compression: int = 0, transactional: bool = False) -> bytes:
    """One batch of (key, value) records, built by kafka-python (an implementation independent of ours)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 30)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp + i, key, value, [])
    return bytes(builder.build())


def compact_config(**overrides: object) -> LogConfig:
    """A compacted log's config with small segments, cleanable at any dirty ratio."""
    settings: dict[str, object] = dict(segment_bytes=2048, index_interval_bytes=256, cleanup_policy=frozenset({"compact"}),
                                       min_cleanable_dirty_ratio=0.01, file_delete_delay_ms=0)
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


def cleaner_for(log: Log, time_ms: Callable[[], int] = now_ms, **overrides: object) -> LogCleaner:
    """A LogCleaner (threads not started) over the one log; passes run with clean_once()."""
    config = CleanerConfig(**{"dedupe_buffer_size": 1 << 20, "backoff_ms": 50, **overrides})  # type: ignore[arg-type]
    return LogCleaner(config, [log.dir.parent], lambda: {(log.topic, log.partition): log}, time_ms)


def ready_to_clean(log: Log) -> None:
    """Roll (so that everything written is in inactive segments) and move the high watermark to the end."""
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def read_batches_of(log: Log) -> list[tuple[int, object, list]]:
    """(position of the batch, header, records) of every batch from the log start, read with Log.read
    across the gaps compaction leaves."""
    out = []
    position = log.log_start_offset
    while position < log.log_end_offset:
        with log.read(position, 1 << 20) as fetched:
            data = fetched.read_bytes()
        if not data:
            break
        for pos, header in iter_batches(data):
            out.append((header.base_offset, header, decode_batch(data, pos)[1]))
            position = header.base_offset + header.last_offset_delta + 1
    return out


def read_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the log start."""
    return [(r.offset, r.key, r.value) for _, _, records in read_batches_of(log) for r in records]


def latest_per_key(written: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, tuple[int, bytes | None]]:
    """key -> (offset, value) of the last record written for it."""
    return {key: (offset, value) for offset, key, value in written}


def write_updates(log: Log, updates: list[tuple[bytes | None, bytes | None]], **batch_fields: object) -> list[tuple[int, bytes | None, bytes | None]]:
    """Append one single-record batch per (key, value); return (offset, key, value) as written."""
    written = []
    for key, value in updates:
        info = log.append_as_leader(keyed_batch([(key, value)], **batch_fields))  # type: ignore[arg-type]
        written.append((info.first_offset, key, value))
    return written


def compacted(written: list[tuple[int, bytes | None, bytes | None]]) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a full compaction leaves of ``written``: the last record of each key, in offset order."""
    return sorted((offset, key, value) for key, (offset, value) in latest_per_key(written).items())


def clean_until_done(cleaner: LogCleaner, most: int = 50) -> int:
    """Run passes until none is needed; return how many ran (at most ``most``)."""
    passes = 0
    while cleaner.clean_once():
        passes += 1
        assert passes < most, f"still cleaning after {most} passes"
    return passes


def updates(keys: int, rounds: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    """``rounds`` updates of each of ``keys`` keys, values of a fixed length."""
    return [(b"key-%02d" % (i % keys), b"value-%06d" % i) for i in range(start, start + keys * rounds)]

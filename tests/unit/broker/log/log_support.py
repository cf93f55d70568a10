"""Helpers shared by the storage-layer tests: building valid RecordBatch v2 batches.

Batches are built with kafka-python's DefaultRecordBatchBuilder, an implementation independent of
ours, so the log is tested against bytes a real client would send.
"""

from __future__ import annotations

from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import Log, LogConfig
from pipeline.records.batch import iter_batches


def make_batch(
    count: int = 1,
    value_size: int = 10,
    timestamp: int = 1_000_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    transactional: bool = False,
) -> bytes:
    """One batch of ``count`` records with timestamps ``timestamp`` .. ``timestamp + count - 1``."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i in range(count):
        value = (b"%08d" % i) * (value_size // 8 + 1)
        builder.append(i, timestamp + i, None, value[:value_size], [])
    return bytes(builder.build())


def batches_in(data: bytes, check_crc: bool = True) -> list[tuple[int, int]]:
    """(base offset, record count) of every whole batch in ``data``, CRC-checked by default."""
    return [(h.base_offset, h.record_count) for _, h in iter_batches(data, check_crc)]


def read_all(log: Log, offset: int | None = None, check_crc: bool = True) -> list[tuple[int, int]]:
    """Every whole batch from ``offset`` (default: the log start) to the log end, via Log.read."""
    out = []
    position = log.log_start_offset if offset is None else offset
    while position < log.log_end_offset:
        with log.read(position, 1 << 20) as fetched:
            found = batches_in(fetched.read_bytes(), check_crc)
        assert found, f"no whole batch read at offset {position}"
        out.extend(found)
        last_base, last_count = found[-1]
        position = last_base + last_count
    return out


def open_log(path: Path, config: LogConfig | None = None, **kwargs) -> Log:
    """A Log in ``path/<topic>-0`` (created if missing)."""
    return Log(path / "topic-0", config or LogConfig(), **kwargs)

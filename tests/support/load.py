"""Bulk load over the raw protocol: pre-encoded RecordBatches (or one, over and over) in pipelined Produce requests."""

from __future__ import annotations

import random
from collections import deque
from itertools import repeat
from typing import Callable, Iterable

from kafka.record.default_records import DefaultRecordBatchBuilder

from . import wire


def build_batch(target_bytes: int, record_bytes: int = 1024, seed: int = 0) -> bytes:
    """An uncompressed RecordBatch v2 of about ``target_bytes`` holding ``record_bytes``-sized random values."""
    rng = random.Random(seed)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=target_bytes * 2)
    offset = 0
    while builder.size() + record_bytes + 32 <= target_bytes:
        builder.append(offset, timestamp=None, key=None, value=rng.randbytes(record_bytes), headers=[])
        offset += 1
    return bytes(builder.build())


def record_count(batch: bytes) -> int:
    """Records in a batch built by build_batch (the header's recordCount field)."""
    return int.from_bytes(batch[57:61], "big", signed=True)


def produce_bulk(
    host: str,
    port: int,
    topic: str,
    batch: bytes,
    total_bytes: int,
    partition: int = 0,
    in_flight: int = 4,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Send ``batch`` repeatedly (acks=1, up to ``in_flight`` pipelined requests) until ``total_bytes`` are stored.

    Checks every response as produce_batches does. Returns the bytes stored.
    """
    requests = -(-total_bytes // len(batch))
    return produce_batches(host, port, topic, repeat(batch, requests), partition, in_flight, on_progress)


def produce_batches(
    host: str,
    port: int,
    topic: str,
    batches: Iterable[bytes],
    partition: int = 0,
    in_flight: int = 4,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Send each of ``batches`` in its own Produce request (acks=1, up to ``in_flight`` pipelined requests).

    Checks every response (error 0, base offsets advancing by each batch's record count). ``on_progress``
    gets the bytes acknowledged so far after each response. Returns the bytes stored.
    """
    pending: deque[tuple[int, int, int]] = deque()  # (correlation id, batch bytes, batch records)
    acknowledged = 0
    expected_offset: int | None = None
    source = iter(batches)
    exhausted = False
    with wire.KafkaConnection(host, port, timeout=60) as conn:
        while pending or not exhausted:
            while not exhausted and len(pending) < in_flight:
                batch = next(source, None)
                if batch is None:
                    exhausted = True
                    break
                body = wire.produce_request_body(topic, [(partition, batch)], acks=1)
                pending.append((conn.send(wire.API_PRODUCE, 3, body), len(batch), record_count(batch)))
            if not pending:
                break
            correlation_id, size, records = pending.popleft()
            (result,) = wire.parse_produce_response(conn.receive(correlation_id))
            if result.error_code != 0:
                raise AssertionError(f"Produce failed with error code {result.error_code} after {acknowledged} bytes")
            if expected_offset is not None and result.base_offset != expected_offset:
                raise AssertionError(f"base offset {result.base_offset}, expected {expected_offset}")
            expected_offset = result.base_offset + records
            acknowledged += size
            if on_progress is not None:
                on_progress(acknowledged)
    return acknowledged

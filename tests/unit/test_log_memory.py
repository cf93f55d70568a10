"""The log's memory must not grow with the data it stores (index entries stay on disk)."""

from __future__ import annotations

import gc
import tracemalloc

from tests.unit.test_log_support import make_batch, open_log

from broker.log import LogConfig

MB = 1 << 20


def test_memory_does_not_grow_with_data(tmp_path):
    batch = make_batch(16, 1000)  # about 16 KB
    log = open_log(tmp_path, LogConfig(segment_bytes=8 * MB, index_interval_bytes=4096))

    def append_and_read(megabytes: int) -> int:
        for _ in range(megabytes * MB // len(batch)):
            log.append_as_leader(batch)
        for offset in range(log.log_start_offset, log.log_end_offset, 499):
            log.read(offset, 64 * 1024).close()
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        append_and_read(20)  # warm up: first segments, caches, interned objects
        after_100 = append_and_read(80)
        after_200 = append_and_read(100)
    finally:
        tracemalloc.stop()
        stored = log.size_in_bytes()
        segments = log.segment_count
        log.delete()
    assert stored > 195 * MB
    # 100 MB more data is ~6,400 batches and ~25,000 index entries; keeping anything per batch or
    # per index entry in Python would cost hundreds of KB. What may grow is the per-segment
    # bookkeeping of ~12 more segments (about 2 KB each).
    assert segments >= 24
    assert after_200 - after_100 < 64 * 1024, (after_100, after_200)

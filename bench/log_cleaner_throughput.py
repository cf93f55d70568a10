"""Log cleaner throughput: MB of dirty log cleaned per second, in this process (no broker).

Builds a compacted log of --mb MiB of keyed records (--keys distinct keys, --value-size bytes each of
log-line-like text as in codec_bench, --batch records per batch, --codec), then times Cleaner passes until nothing is dirty. The rate is the
log's size before cleaning over the cleaning time (building the offset map included); with a
--dedupe-buffer too small for the keys, several passes are needed and each rereads the log.
``measure()`` is the function other benchmarks (bench/cleaner_bench.py) can call.

    .venv/bin/python -m bench.log_cleaner_throughput [--mb 64] [--keys 10000] [--codec none] [--batch 100]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.codec_bench import make_values
from broker.log import Log, LogConfig
from broker.log.cleaner import CleanerConfig
from broker.log.log_cleaner import LogCleaner
from pipeline.protocol.compression import codec_from_name
from pipeline.records import encode_batch


def build_log(directory: Path, mb: int, keys: int, value_size: int, batch: int, codec: int) -> Log:
    """A compacted log of about ``mb`` MiB, every key updated in turn, all of it cleanable."""
    config = LogConfig(segment_bytes=64 << 20, cleanup_policy=frozenset({"compact"}), min_cleanable_dirty_ratio=0.0,
                       file_delete_delay_ms=0, retention_ms=None)
    log = Log(directory / "bench-0", config)
    values = make_values(1000, value_size)
    i = 0
    while log.size_in_bytes() < mb << 20:
        batch_keys = [b"key-%08d" % ((i + n) % keys) for n in range(batch)]
        batch_values = [values[(i + n) % len(values)] for n in range(batch)]
        log.append_as_leader(encode_batch(batch_values, batch_keys, timestamp=1_700_000_000_000, compression=codec))
        i += batch
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def measure(mb: int = 64, keys: int = 10_000, value_size: int = 100, batch: int = 100, codec: str = "none",
            dedupe_buffer_size: int = 128 << 20, directory: Path | None = None) -> dict[str, float]:
    """Clean a fresh log of ``mb`` MiB; return its size before and after, the passes, MB/s and records/s."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        log = build_log(Path(tmp), mb, keys, value_size, batch, codec_from_name(codec))
        before = log.size_in_bytes()
        records = log.log_end_offset
        cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=dedupe_buffer_size), [Path(tmp)],
                             lambda: {(log.topic, log.partition): log})
        started = time.perf_counter()
        passes = 0
        while cleaner.clean_once():
            passes += 1
        elapsed = time.perf_counter() - started
        after = log.size_in_bytes()
        log.close()
    return {"dirty_mb": before / 2**20, "cleaned_mb": after / 2**20, "passes": passes, "seconds": elapsed,
            "mb_per_second": before / 2**20 / elapsed, "records": records, "records_per_second": records / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--codec", default="none")
    parser.add_argument("--dedupe-buffer", type=int, default=128 << 20)
    args = parser.parse_args()
    print(json.dumps(measure(args.mb, args.keys, args.value_size, args.batch, args.codec, args.dedupe_buffer), indent=2))


if __name__ == "__main__":
    main()

"""The log cleaner: how fast it cleans, what it costs produce and fetch while it runs, and its memory.

Starts a standalone broker in a temporary directory with its cleaner off and fills a compacted topic
(cleanup.policy=compact, min.cleanable.dirty.ratio 0, --segment-mb segments) with --log-mb of
uncompressed records: 16-byte keys drawn in turn from --keys distinct ones, --value-bytes values. Then:

1. cleaning: the broker is restarted with the cleaner on (log.cleaner.dedupe.buffer.size --dedupe-buffer-mb,
   backoff 200 ms); the clock runs from the restart until the cleaner-offset-checkpoint reaches the active
   segment (every pass done). Throughput is the dirty log's bytes over that time (MB/s of dirty log cleaned);
   the broker's peak RSS (VmHWM) over the whole run is printed beside its RSS before filling, and its cleaner
   worker process's peak;
2. produce and fetch next to the cleaner: --workload-mb of 512 KiB batches produced to a plain topic
   (pipelined raw Produce, acks=1) and fetched back (1 MiB Fetches, batches not decoded), once with the
   cleaner idle (after step 1) and once while it cleans: the compacted topic gets --log-mb more updates with
   the cleaner off, the broker is restarted with it on and the workload starts at once; the bench checks
   that the cleaner was still busy when the workload ended. --io-max-mb-per-second throttles the cleaner
   (log.cleaner.io.max.bytes.per.second) in both steps.

The defaults clean a 2 GiB log of 1,000,000 keys (each written about twice) with a 16 MiB dedupe buffer, whose
offset map holds some 630,000 keys (24 bytes a key, 0.9 load factor): several passes.

    python -m bench.cleaner_bench [--log-mb 2048] [--keys 1000000] [--value-bytes 1000] [--segment-mb 128]
        [--dedupe-buffer-mb 16] [--workload-mb 512] [--io-max-mb-per-second MB] [--dir /path/with/space]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pipeline.records.batch import iter_batches
from tests.support import BrokerProcess, wait_until
from tests.support.broker import rss_bytes
from tests.support.clients import create_topic
from tests.support.compaction import cleaner_checkpoint, compacted_topic_configs, keyed_batches, log_bytes
from tests.support.load import build_batch, produce_batches, produce_bulk
from tests.support.wire import KafkaConnection, fetch

MiB = 1024 * 1024
MB = 1_000_000
COMPACTED = "compacted"
PLAIN = "plain"


def fetch_all(broker: BrokerProcess, topic: str, start: int = 0) -> int:
    """Fetch ``topic``'s partition 0 from ``start`` to its high watermark in 1 MiB Fetches; return the bytes."""
    fetched = 0
    offset = start
    with KafkaConnection(broker.host, broker.port, timeout=60) as conn:
        while True:
            result = fetch(conn, topic, 0, offset, max_wait_ms=0)
            if result.error_code != 0:
                raise SystemExit(f"Fetch {topic} at {offset} failed with error {result.error_code}")
            if offset >= result.high_watermark:
                return fetched
            for _, header in iter_batches(result.records, check_crc=False):
                offset = header.base_offset + header.last_offset_delta + 1
            fetched += len(result.records)


def end_offset(broker: BrokerProcess, topic: str) -> int:
    with KafkaConnection(broker.host, broker.port) as conn:
        return fetch(conn, topic, 0, 0, max_wait_ms=0).high_watermark


def workload(broker: BrokerProcess, megabytes: int) -> tuple[float, float]:
    """Produce ``megabytes`` MiB to the plain topic and fetch them back; MB/s of each."""
    start = end_offset(broker, PLAIN)
    started = time.perf_counter()
    stored = produce_bulk(broker.host, broker.port, PLAIN, build_batch(512 * 1024), megabytes * MiB)
    produce_s = time.perf_counter() - started
    started = time.perf_counter()
    fetched = fetch_all(broker, PLAIN, start)
    fetch_s = time.perf_counter() - started
    return stored / MB / produce_s, fetched / MB / fetch_s


def cleaning_done(broker: BrokerProcess) -> bool:
    """Whether the cleaner has cleaned the compacted topic up to its active segment."""
    active_base = int(sorted(broker.partition_dir(COMPACTED, 0).glob("*.log"))[-1].stem)
    return cleaner_checkpoint(broker.log_dir, COMPACTED) == active_base


def fill(broker: BrokerProcess, args: argparse.Namespace, seed: int) -> int:
    """Add --log-mb of keyed records to the compacted topic; return the dirty bytes outside the active segment."""
    started = time.perf_counter()
    produce_batches(broker.host, broker.port, COMPACTED,
                    keyed_batches(args.log_mb * MiB, args.keys, args.value_bytes, seed=seed), in_flight=4)
    elapsed = time.perf_counter() - started
    print(f"filled {args.log_mb} MiB of keyed records in {elapsed:.1f}s ({args.log_mb * MiB / MB / elapsed:.0f} MB/s)")
    return log_bytes(broker.partition_dir(COMPACTED, 0), active=False)


def run(args: argparse.Namespace, work_dir: Path) -> None:
    settings = {"log.cleaner.enable": "false", "log.cleaner.backoff.ms": 200,
                "log.cleaner.dedupe.buffer.size": args.dedupe_buffer_mb * MiB}
    if args.io_max_mb_per_second is not None:
        settings["log.cleaner.io.max.bytes.per.second"] = args.io_max_mb_per_second * MB
    broker = BrokerProcess(work_dir / "logs", log_path=work_dir / "broker.log", overrides=settings)
    with broker:
        fresh_rss = broker.rss_bytes()
        create_topic(broker.bootstrap, COMPACTED, configs=compacted_topic_configs(args.segment_mb * MiB))
        create_topic(broker.bootstrap, PLAIN)
        dirty = fill(broker, args, seed=0)

        broker.restart({"log.cleaner.enable": "true"})
        started = time.perf_counter()
        wait_until(lambda: cleaning_done(broker), timeout=args.timeout, interval=0.1,
                   message="the cleaner to clean the compacted topic")
        clean_s = time.perf_counter() - started
        peak = broker.peak_rss_bytes()
        cleaned = log_bytes(broker.partition_dir(COMPACTED, 0), active=False)
        passes = broker.log_text().count(f"cleaned {COMPACTED}-0:")  # the cleaner logs one line per pass
        print(f"cleaned {dirty / MB:.0f} MB of dirty log to {cleaned / MB:.0f} MB in {clean_s:.1f}s: "
              f"{dirty / MB / clean_s:.1f} MB/s ({passes} passes, dedupe buffer {args.dedupe_buffer_mb} MiB, "
              f"{args.keys:,} keys)")
        print(f"broker RSS: {fresh_rss / MiB:.0f} MiB fresh, peak (VmHWM) {peak / MiB:.0f} MiB while cleaning, "
              f"{broker.rss_bytes() / MiB:.0f} MiB after")
        for pid in broker.child_pids():
            print(f"cleaner worker {pid} RSS: peak (VmHWM) {rss_bytes(pid, 'VmHWM') / MiB:.0f} MiB, "
                  f"{rss_bytes(pid) / MiB:.0f} MiB after")

        idle = workload(broker, args.workload_mb)

        broker.restart({"log.cleaner.enable": "false"})
        fill(broker, args, seed=1)
        broker.restart({"log.cleaner.enable": "true"})
        busy = workload(broker, args.workload_mb)
        still_cleaning = not cleaning_done(broker)
    print(f"plain topic, {args.workload_mb} MiB: produce MB/s, fetch MB/s")
    print(f"  cleaner idle:    {idle[0]:7.1f}  {idle[1]:7.1f}")
    print(f"  cleaner running: {busy[0]:7.1f}  {busy[1]:7.1f}  ({busy[0] / idle[0]:.0%}, {busy[1] / idle[1]:.0%} of idle)")
    if not still_cleaning:
        print("  warning: the cleaner finished before the workload did; use a larger --log-mb", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-mb", type=int, default=2048, help="MiB of keyed records to clean (default 2048)")
    parser.add_argument("--keys", type=int, default=1_000_000, help="distinct keys (default 1,000,000)")
    parser.add_argument("--value-bytes", type=int, default=1000, help="bytes of each value (default 1000)")
    parser.add_argument("--segment-mb", type=int, default=128, help="segment.bytes of the compacted topic in MiB")
    parser.add_argument("--dedupe-buffer-mb", type=int, default=16, help="log.cleaner.dedupe.buffer.size in MiB")
    parser.add_argument("--workload-mb", type=int, default=512, help="MiB produced and fetched per workload run")
    parser.add_argument("--io-max-mb-per-second", type=float, default=None,
                        help="log.cleaner.io.max.bytes.per.second in MB/s (default: unlimited)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the cleaning")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary log dir goes")
    args = parser.parse_args()

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="cleaner-bench-", dir=args.dir))
    try:
        need = 2 * args.log_mb + 2 * args.workload_mb + 100
        free = shutil.disk_usage(work_dir).free // MiB
        if free < need:
            sys.exit(f"{work_dir} has {free} MiB free, need {need}")
        run(args, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

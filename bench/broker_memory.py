"""Broker memory while storing 1 GB: the broker keeps no message cache, so its RSS should stay flat.

Starts a standalone broker on a free loopback port with a temporary log dir, sends one pre-encoded
512 KB RecordBatch over and over in pipelined Produce requests (acks=1), and prints the broker's RSS
(VmRSS, and the anonymous part RssAnon, from /proc/PID/status) at the start, after 100 MB and after 1 GB.

    .venv/bin/python -m bench.broker_memory [--total-mb 1024] [--checkpoint-mb 100] [--dir /path/with/space]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.support import BrokerProcess
from tests.support.clients import create_topic
from tests.support.load import build_batch, produce_bulk

MB = 1024 * 1024


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            fields[name] = int(rest.split()[0])
    return fields


def measure(total_bytes: int, checkpoint_bytes: int, work_dir: Path, batch_bytes: int = 512 * 1024) -> tuple[dict[str, dict[str, int]], float]:
    """Store ``total_bytes`` through a fresh broker; return its memory at start, checkpoint and end (KiB)
    and the seconds the produce phase took."""
    broker = BrokerProcess(work_dir / "logs", log_path=work_dir / "broker.log")
    readings: dict[str, dict[str, int]] = {}
    with broker:
        create_topic(broker.bootstrap, "memory", 1)
        readings["start"] = memory_kib(broker.pid)

        def on_progress(stored: int) -> None:
            if "checkpoint" not in readings and stored >= checkpoint_bytes:
                readings["checkpoint"] = memory_kib(broker.pid)

        batch = build_batch(batch_bytes)
        started = time.monotonic()
        produce_bulk(broker.host, broker.port, "memory", batch, total_bytes, on_progress=on_progress)
        elapsed = time.monotonic() - started
        readings["end"] = memory_kib(broker.pid)
        on_disk = sum(path.stat().st_size for path in broker.segment_files("memory", 0))
        if on_disk < total_bytes:
            raise SystemExit(f"only {on_disk // MB} MiB of {total_bytes // MB} MiB reached the segment files")
    return readings, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-mb", type=int, default=1024, help="bytes to store, in MiB (default 1024)")
    parser.add_argument("--checkpoint-mb", type=int, default=100, help="first RSS reading after this many MiB (default 100)")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary log dir goes (needs total-mb of space)")
    args = parser.parse_args()

    work_dir = Path(tempfile.mkdtemp(prefix="broker-memory-", dir=args.dir))
    try:
        free = shutil.disk_usage(work_dir).free
        if free < (args.total_mb + 100) * MB:
            sys.exit(f"{work_dir} has {free // MB} MiB free, need {args.total_mb + 100}")
        readings, elapsed = measure(args.total_mb * MB, args.checkpoint_mb * MB, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)

    print(f"stored {args.total_mb} MiB through the broker in {elapsed:.1f}s ({args.total_mb / elapsed:.0f} MiB/s, "
          f"512 KiB batches, acks=1, 4 requests in flight)")
    labels = {"start": "at start", "checkpoint": f"after {args.checkpoint_mb} MiB", "end": f"after {args.total_mb} MiB"}
    for key, label in labels.items():
        r = readings[key]
        print(f"  broker RSS {label:>16}: VmRSS {r['VmRSS'] / 1024:7.1f} MiB  (RssAnon {r['RssAnon'] / 1024:6.1f}, RssFile {r['RssFile'] / 1024:6.1f})")
    growth = (readings["end"]["VmRSS"] - readings["checkpoint"]["VmRSS"]) / 1024
    print(f"  VmRSS growth from {args.checkpoint_mb} MiB to {args.total_mb} MiB: {growth:+.1f} MiB")


if __name__ == "__main__":
    main()

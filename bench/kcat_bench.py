"""kcat against our broker: produce and consume N messages of a fixed size, with the broker's RSS.

Starts a standalone broker on a free loopback port with a temporary log dir, writes N messages of
SIZE bytes to a file, times `kcat -P -l FILE` (librdkafka's defaults: batching, acks=all, no
compression) until every message is acknowledged, then times `kcat -C -e` reading them all back.
The consumer runs with fetch.wait.max.ms=10: `-e` stops at the first empty fetch at the log end, which
the broker (like Kafka) holds for the whole fetch.wait.max.ms, and librdkafka's 500 ms default would
otherwise be a large share of a one-second run.
Prints messages/s and MB/s for both and the broker's VmRSS before, after producing and after consuming.

    .venv/bin/python -m bench.kcat_bench [--messages 1000000] [--size 200] [--partitions 1]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support import BrokerProcess
from tests.support.clients import create_topic

MB = 1_000_000


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def run(messages: int, size: int, partitions: int, work_dir: Path) -> None:
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is not installed: run `make setup`")
    payload = work_dir / "messages.txt"
    # kcat splits its input on newlines: SIZE-1 bytes of text plus the delimiter per message.
    line = (b"m" * (size - 1)) + b"\n"
    with open(payload, "wb") as out:
        block = line * 10_000
        for _ in range(messages // 10_000):
            out.write(block)
        out.write(line * (messages % 10_000))
    broker = BrokerProcess(work_dir / "logs", log_path=work_dir / "broker.log")
    with broker:
        create_topic(broker.bootstrap, "kcat-bench", partitions)
        rss_start = rss_kib(broker.pid)
        started = time.perf_counter()
        subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", "kcat-bench", "-l", str(payload)], check=True)
        produce_s = time.perf_counter() - started
        rss_produced = rss_kib(broker.pid)
        started = time.perf_counter()
        # One byte per message keeps the measurement about kcat and the broker, not about a 200 MB pipe.
        consumer = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", "kcat-bench", "-o", "beginning",
                                   "-e", "-q", "-f", ".", "-X", "fetch.wait.max.ms=10"],
                                  check=True, stdout=subprocess.PIPE)
        consume_s = time.perf_counter() - started
        rss_consumed = rss_kib(broker.pid)
        if len(consumer.stdout) != messages:
            raise SystemExit(f"kcat read back {len(consumer.stdout)} of {messages} messages")
    payload_mb = messages * (size - 1) / MB
    print(f"kcat, {messages:,} messages of {size} bytes, {partitions} partition(s), broker and kcat on one machine")
    print(f"  produce: {messages / produce_s:>12,.0f} msg/s {payload_mb / produce_s:>8.1f} MB/s  ({produce_s:.2f} s)")
    print(f"  consume: {messages / consume_s:>12,.0f} msg/s {payload_mb / consume_s:>8.1f} MB/s  ({consume_s:.2f} s)")
    print(f"  broker RSS: {rss_start / 1024:.1f} MiB at start, {rss_produced / 1024:.1f} MiB after producing, "
          f"{rss_consumed / 1024:.1f} MiB after consuming")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200, help="bytes per message, delimiter included")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed afterwards)")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        run(args.messages, args.size, args.partitions, args.dir)
        return
    with tempfile.TemporaryDirectory(prefix="kcat-bench-") as tmp:
        run(args.messages, args.size, args.partitions, Path(tmp))


if __name__ == "__main__":
    main()

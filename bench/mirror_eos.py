"""Mirror throughput exactly once (exactly.once=true) against at least once: one `python -m mirror` process between
two one-broker clusters on this machine, each mode on fresh clusters.

MESSAGES records of SIZE bytes are loaded into the source topic first (PARTITIONS partitions); then one mirror
copies them, committing every INTERVAL ms. The mirror's CPU (user + system, from /proc) is reported per record committed
over the same span. The rate is of records committed -- the source offsets in the source's
ZooKeeper at least once, in the target's group ``mirror.src`` exactly once (there they commit with the records, so a
record counts once read_committed readers can see it) -- from the mirror's first write into the target (its start-up
left out) to the commit that covers the last record. A run too short to be timed that way is an error, not a figure.

    .venv/bin/python -m bench.mirror_eos [--messages 100000] [--size 200] [--partitions 4] [--interval-ms 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench.mirror_bench import cpu_seconds, create_topics, end_total, load
from pipeline.client.admin import AdminClient
from pipeline.zk.server import ZooKeeperServer
from tests.support.cluster import BrokerCluster
from tests.support.mirror import MirrorProcess, committed

TOPIC = "mirror-bench"
MiB = 1024 * 1024


def committed_total(source: BrokerCluster, target: BrokerCluster, partitions: int,
                    exactly_once: bool) -> Callable[[], int]:
    """The source records committed so far, where the mode keeps its offsets."""
    if not exactly_once:
        return lambda: sum(committed(source, "mirror", TOPIC, p) or 0 for p in range(partitions))

    def in_target() -> int:
        with AdminClient(target.bootstrap) as admin:
            return sum(o.offset for o in admin.fetch_offsets("mirror.src").values())
    return in_target


def run(mode: str, args: argparse.Namespace, tmp: Path) -> float:
    exactly_once = mode == "exactly-once"
    with ZooKeeperServer(tmp / "zk") as zookeeper:
        base = zookeeper.connect_string
        with BrokerCluster(tmp / "src", base + "/src", 1) as source, \
                BrokerCluster(tmp / "dst", base + "/dst", 1) as target:
            create_topics(source, [TOPIC], args.partitions)
            messages, value_bytes = load(source, args.messages, args.size)
            mirror = MirrorProcess(tmp / "mirror.log", [
                "--source", f"src={source.zk_connect}", "--target", target.zk_connect, "--whitelist", TOPIC,
                "--no-audit", "--set", f"offset.commit.interval.ms={args.interval_ms}",
                "--set", f"exactly.once={'true' if exactly_once else 'false'}", "--set", "process.id=bench"]).start()
            progress = committed_total(source, target, args.partitions, exactly_once)
            try:
                first = None
                deadline = time.monotonic() + 1800
                while time.monotonic() < deadline:
                    if not mirror.running:
                        sys.exit(f"mirror exited: {mirror.log_tail()}")
                    if first is None and end_total(target, [TOPIC], args.partitions):
                        first = (time.perf_counter(), cpu_seconds(mirror.process.pid))
                    if first is not None and progress() >= messages:
                        break
                    time.sleep(0.02)
                now = time.perf_counter()
                if first is None:
                    sys.exit("the mirror wrote nothing into the target")
                cpu = cpu_seconds(mirror.process.pid) - first[1]
                if mirror.stop() != 0:
                    print(mirror.log_tail())
            finally:
                mirror.kill()
    elapsed = now - first[0]
    if elapsed < 0.1:
        sys.exit(f"{mode}: {messages:,} records were committed {elapsed * 1000:.0f} ms after the first one reached the "
                 "target, too short to time: give more --messages")
    rate = messages / elapsed
    print(f"  {mode}: {rate:,.0f} records/s, {rate * value_bytes / messages / MiB:.1f} MB/s of values "
          f"({messages:,} records committed in {elapsed:.1f} s after the first reached the target); mirror CPU "
          f"{cpu * 1e6 / messages:.1f} us per record", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--interval-ms", type=int, default=1000, help="offset.commit.interval.ms of both modes")
    args = parser.parse_args()
    print(f"mirror exactly once vs at least once: {args.messages:,} records of {args.size} bytes, {args.partitions} "
          f"partitions, commits every {args.interval_ms} ms, one source and one target broker, one mirror process")
    rates = {}
    for mode in ("at-least-once", "exactly-once"):
        with tempfile.TemporaryDirectory(prefix=f"mirror-eos-{mode}-") as tmp:
            rates[mode] = run(mode, args, Path(tmp))
    print(f"  exactly once / at least once: {rates['exactly-once'] / rates['at-least-once']:.2f}")


if __name__ == "__main__":
    main()

"""OffsetCommit latency on a standalone broker as the number of groups grows (the FileGroupStore in its log dir).

One connection commits an offset for each of --groups groups in turn (simple groups: generation -1, no member),
--rounds times, so the store holds --groups live groups and a file several times their size (compactions
included); at each checkpoint the latency of --samples commits to one group is measured: p50, p99 and max, with
the broker's CPU time per commit. Before issue 26 a commit re-encoded every group once the file passed 1 MiB:
with ~9,900 groups a commit took 55 ms (p50) against 0.14 ms fresh.

    python -m bench.group_store_bench [--groups 10000] [--rounds 3] [--samples 500] [--metadata-bytes 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.group_bench import cpu_seconds
from tests.support import BrokerProcess, wire
from tests.support.group_wire import offset_commit

TOPIC = "events"


def commit(conn: wire.KafkaConnection, group: str, offset: int, metadata: str) -> None:
    errors = offset_commit(conn, group, -1, "", TOPIC, {0: offset}, metadata)
    if errors != {0: 0}:
        raise RuntimeError(f"commit to {group} failed: {errors}")


def measure(conn: wire.KafkaConnection, broker: BrokerProcess, samples: int, metadata: str) -> dict[str, float]:
    latencies = []
    cpu_before = cpu_seconds(broker.pid)
    for index in range(samples):
        started = time.perf_counter()
        commit(conn, "measured", index, metadata)
        latencies.append(time.perf_counter() - started)
    cpu = cpu_seconds(broker.pid) - cpu_before
    latencies.sort()
    return {"p50_ms": statistics.median(latencies) * 1000, "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
            "max_ms": latencies[-1] * 1000, "cpu_ms_per_commit": cpu / samples * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--metadata-bytes", type=int, default=40)
    args = parser.parse_args()
    metadata = "m" * args.metadata_bytes
    checkpoints = sorted({0, args.groups // 10, args.groups // 2, args.groups})
    with tempfile.TemporaryDirectory(prefix="group-store-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "logs", log_path=Path(tmp) / "broker.log")
        broker.start()
        try:
            with wire.KafkaConnection(broker.host, broker.port, timeout=60) as conn:
                filled = 0
                for checkpoint in checkpoints:
                    for round_ in range(args.rounds):
                        for index in range(filled, checkpoint):
                            commit(conn, f"group-{index}", round_, metadata)
                    filled = checkpoint
                    size = os.path.getsize(Path(tmp) / "logs" / "__consumer_offsets.jsonl")
                    result = measure(conn, broker, args.samples, metadata)
                    print(f"{checkpoint:>7,} groups, file {size / 1e6:6.2f} MB: OffsetCommit p50 {result['p50_ms']:.2f} ms, "
                          f"p99 {result['p99_ms']:.2f} ms, max {result['max_ms']:.2f} ms, broker CPU "
                          f"{result['cpu_ms_per_commit']:.3f} ms/commit", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()

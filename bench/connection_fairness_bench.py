"""Latency of one client's requests while another connection floods the broker with pipelined requests.

Starts a standalone broker on a free loopback port. A prober sends one ApiVersions request at a time and
times each round trip, first alone, then while a flooder keeps tens of thousands of pipelined acks=0
Produce requests (one 200-byte record each) queued in front of the broker. Prints the prober's median,
99th percentile and worst round trip in both phases; with fair service
the prober waits for a turn of the flooder, not for its whole backlog.

    .venv/bin/python -m bench.connection_fairness_bench [--probes 300] [--backlog 20000]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import encode_request
from pipeline.records import encode_batch
from tests.support import BrokerProcess, wire
from tests.support.clients import create_topic


def probe(host: str, port: int, count: int) -> list[float]:
    """Round-trip times (seconds) of ``count`` ApiVersions v0 requests sent one at a time."""
    times = []
    with wire.KafkaConnection(host, port) as conn:
        for _ in range(count):
            started = time.perf_counter()
            wire.api_versions(conn)
            times.append(time.perf_counter() - started)
    return times


def flood(host: str, port: int, topic: str, backlog: int, stop: threading.Event) -> None:
    """Send acks=0 Produce requests in chunks of ``backlog`` until ``stop``."""
    frame = encode_request(ApiKey.PRODUCE, 7, 1, "flood", {
        "transactional_id": None, "acks": 0, "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": encode_batch([b"v" * 200])}]}]})
    chunk = frame * backlog
    with socket.create_connection((host, port)) as sock:
        while not stop.is_set():
            sock.sendall(chunk)


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"median {statistics.median(ordered) * 1000:8.2f} ms   p99 {p99 * 1000:8.2f} ms   "
            f"max {ordered[-1] * 1000:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--backlog", type=int, default=20000, help="pipelined requests per flooder send")
    args = parser.parse_args()
    print(f"one prober (ApiVersions, one at a time) beside a flooder pipelining acks=0 Produce requests "
          f"{args.backlog} at a time")
    with tempfile.TemporaryDirectory(prefix="fairness-bench-") as tmp:
        with BrokerProcess(Path(tmp) / "logs", log_path=Path(tmp) / "broker.log") as broker:
            create_topic(broker.bootstrap, "flood", 1)
            print(f"  alone:        {summary(probe(broker.host, broker.port, args.probes))}")
            stop = threading.Event()
            flooder = threading.Thread(target=flood, args=(broker.host, broker.port, "flood", args.backlog, stop))
            flooder.start()
            try:
                times = probe(broker.host, broker.port, args.probes)
            finally:
                stop.set()
                flooder.join()
            print(f"  beside flood: {summary(times)}")


if __name__ == "__main__":
    main()

"""A broker's cost at rest: the CPU an idle broker uses, standalone and in a 3-broker ZooKeeper cluster.

Standalone: one broker with one topic and nothing else. Cluster: a ZooKeeper and three brokers with
--topics topics of --partitions partitions and replication factor 3 (so every broker's replica fetchers
long-poll the leaders), and one consumer long-polling a partition (Fetch with max_wait_ms 500, as clients
wait) the whole time. After --settle seconds, each broker's CPU (user + system, from /proc) is read over
--seconds and printed as a share of one core. Issue 30's bar: <= 0.5% of a core per broker.

    .venv/bin/python -m bench.broker_idle_bench [--seconds 60] [--settle 10] [--topics 4] [--partitions 2]
        [--only standalone|cluster]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from pipeline.client.admin import AdminClient
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.zk.server import ZooKeeperServer
from tests.support import BrokerProcess
from tests.support.cluster import BrokerCluster


def idle_share(brokers: dict[str, BrokerProcess], settle: float, seconds: float) -> dict[str, float]:
    """Each broker's CPU over ``seconds`` after ``settle``, as a fraction of one core."""
    time.sleep(settle)
    before = {name: broker.cpu_seconds() for name, broker in brokers.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {name: (broker.cpu_seconds() - before[name]) / elapsed for name, broker in brokers.items()}


def long_poll(host: str, port: int, topic: str, stop: threading.Event) -> None:
    """A consumer at the log end of an idle partition: Fetch after Fetch, each held by the broker."""
    with SimpleConsumer(host, port) as consumer:
        while not stop.is_set():
            consumer.fetch(FetchRequest(topic, 0, 0, 1 << 20), max_wait_ms=500, min_bytes=1)


def standalone(base: Path, settle: float, seconds: float) -> dict[str, float]:
    with BrokerProcess(base / "standalone" / "logs") as broker:
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topics("idle", partitions=1)
        return idle_share({"standalone": broker}, settle, seconds)


def cluster(base: Path, settle: float, seconds: float, topics: int, partitions: int) -> dict[str, float]:
    with ZooKeeperServer(base / "zookeeper") as server:
        with BrokerCluster(base / "cluster", f"{server.connect_string}/idle-bench", 3) as brokers:
            names = [f"idle-{n}" for n in range(topics)]
            with AdminClient(brokers.bootstrap) as admin:
                admin.create_topics(names, partitions=partitions, replication_factor=3)
            for name in names:
                brokers.wait_for_metadata(name, partitions)
            leader = brokers.brokers[brokers.partition_state(names[0], 0)["leader"]]
            stop = threading.Event()
            consumer = threading.Thread(target=long_poll, args=(leader.host, leader.port, names[0], stop), daemon=True)
            consumer.start()
            try:
                return idle_share({f"cluster broker {i}": b for i, b in brokers.brokers.items()}, settle, seconds)
            finally:
                stop.set()
                consumer.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long CPU is counted")
    parser.add_argument("--settle", type=float, default=10.0, help="wait after start-up before counting")
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--only", choices=("standalone", "cluster"), default=None)
    args = parser.parse_args()
    print(f"idle brokers, CPU over {args.seconds:.0f} s after {args.settle:.0f} s (from /proc)")
    with tempfile.TemporaryDirectory(prefix="idle-bench-") as tmp:
        shares: dict[str, float] = {}
        if args.only in (None, "standalone"):
            shares |= standalone(Path(tmp), args.settle, args.seconds)
        if args.only in (None, "cluster"):
            shares |= cluster(Path(tmp), args.settle, args.seconds, args.topics, args.partitions)
    for name, share in shares.items():
        print(f"  {name:<18} {share * 100:6.2f}% of a core")


if __name__ == "__main__":
    main()

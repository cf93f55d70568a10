"""A replicated cluster at a trickle: the brokers' CPU per request when many small produce requests each wake the
long-polling fetches of followers and consumers, as the deployment's default rate (400 events/s) makes them.

A ZooKeeper and three brokers with TOPICS topics of PARTITIONS partitions, replication factor 3 and
min.insync.replicas 2 (the deployment's clusters). One async producer (acks=all, idempotent, queue.time
QUEUE_TIME ms) sends RATE events/s of SIZE bytes spread over every partition; CONSUMERS static consumer connectors
read every topic read_committed with their default long poll (the mirror's and the audit's readers). After
--settle seconds, each broker's CPU (user + system, from /proc) and its Produce and Fetch requests (from its
Prometheus metrics) are read over --seconds; printed per broker and for the cluster: CPU share, requests/s, and
microseconds of broker CPU per request and per event.

    .venv/bin/python -m bench.broker_trickle_bench [--rate 200] [--queue-time 50] [--consumers 3] [--seconds 60]
        [--settle 15] [--topics 8] [--partitions 4] [--size 300]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from pipeline.client.admin import AdminClient
from pipeline.client.consumer_config import StaticConnectorConfig
from pipeline.client.consumer_stream import ConsumerTimeout
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.static_connector import StaticConsumerConnector
from pipeline.client.topic_filter import Whitelist
from pipeline.zk.server import ZooKeeperServer
from tests.support.cluster import BrokerCluster
from tests.support.ports import free_port

_REQUESTS = re.compile(r'^kafka_network_requestmetrics_requests_total\{request="(\w+)",version="\d+"\} (\S+)$', re.M)


class _MemoryOffsets:
    """Offsets kept in memory (each consumer starts at the log end: there is nothing before it)."""

    def __init__(self) -> None:
        self.offsets: dict = {}

    def load(self) -> dict:
        return dict(self.offsets)

    def save(self, offsets: dict) -> None:
        self.offsets = dict(offsets)

    def close(self) -> None:
        pass


def requests_by_api(metrics_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    totals: dict[str, float] = {}
    for api, value in _REQUESTS.findall(text):
        totals[api] = totals.get(api, 0.0) + float(value)
    return totals


def produce(bootstrap: str, topics: list[str], rate: float, size: int, queue_time_ms: int,
            stop: threading.Event) -> None:
    producer = Producer({"metadata.broker.list": bootstrap, "producer.type": "async", "request.required.acks": -1,
                         "enable.idempotence": True, "queue.time": queue_time_ms, "batch.size": 500,
                         "compression.codec": "none"})
    value = b"x" * size
    sent = 0
    started = time.monotonic()
    try:
        while not stop.is_set():
            due = int((time.monotonic() - started) * rate) - sent
            for n in range(due):
                producer.send(ProducerData(topics[(sent + n) % len(topics)], str(sent + n).encode(), [value]))
            sent += max(due, 0)
            stop.wait(0.02)
    finally:
        producer.close()


def consume(bootstrap: str, name: str, stop: threading.Event) -> None:
    connector = StaticConsumerConnector(StaticConnectorConfig({
        "metadata.broker.list": bootstrap, "client.id": name, "auto.offset.reset": "largest",
        "consumer.timeout.ms": 200, "isolation.level": "read_committed"}), _MemoryOffsets())
    try:
        (stream,) = connector.create_message_streams_by_filter(Whitelist("trickle-.*"), 1)
        while not stop.is_set():
            try:
                stream.next_batch()
            except ConsumerTimeout:
                pass
    finally:
        connector.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="events/s (the deployment's per datacenter)")
    parser.add_argument("--queue-time", type=int, default=50, help="the producer's queue.time in ms")
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=300)
    args = parser.parse_args()
    print(f"a 3-broker cluster at a trickle: {args.rate:.0f} events/s of {args.size} bytes over {args.topics} x "
          f"{args.partitions} partitions (RF 3, acks=all, queue.time {args.queue_time} ms), {args.consumers} "
          f"read_committed consumers; {args.seconds:.0f} s after {args.settle:.0f} s")
    with tempfile.TemporaryDirectory(prefix="trickle-bench-") as tmp, ZooKeeperServer(Path(tmp) / "zk") as server:
        cluster = BrokerCluster(Path(tmp) / "cluster", f"{server.connect_string}/trickle", 3,
                                {"min.insync.replicas": 2})
        ports = {}
        for broker_id in list(cluster.brokers):
            ports[broker_id] = free_port()
            cluster.brokers[broker_id] = cluster.make_broker(broker_id, overrides={"metrics.port": ports[broker_id]})
        with cluster:
            topics = [f"trickle-{n}" for n in range(args.topics)]
            with AdminClient(cluster.bootstrap) as admin:
                admin.create_topics(topics, partitions=args.partitions, replication_factor=3)
            for topic in topics:
                cluster.wait_for_metadata(topic, args.partitions)
            stop = threading.Event()
            workers = [threading.Thread(target=produce, daemon=True, args=(
                cluster.bootstrap, topics, args.rate, args.size, args.queue_time, stop))]
            workers += [threading.Thread(target=consume, args=(cluster.bootstrap, f"reader-{n}", stop), daemon=True)
                        for n in range(args.consumers)]
            for worker in workers:
                worker.start()
            try:
                time.sleep(args.settle)
                brokers = cluster.brokers
                cpu0 = {i: b.cpu_seconds() for i, b in brokers.items()}
                req0 = {i: requests_by_api(ports[i]) for i in brokers}
                started = time.monotonic()
                time.sleep(args.seconds)
                elapsed = time.monotonic() - started
                cpu = {i: (b.cpu_seconds() - cpu0[i]) for i, b in brokers.items()}
                req = {i: {api: n - req0[i].get(api, 0.0) for api, n in requests_by_api(ports[i]).items()}
                       for i in brokers}
            finally:
                stop.set()
                for worker in workers:
                    worker.join(timeout=10)
    total_cpu = sum(cpu.values())
    total_requests = sum(sum(r.values()) for r in req.values())
    for i in sorted(cpu):
        produces, fetches = req[i].get("Produce", 0.0), req[i].get("Fetch", 0.0)
        everything = sum(req[i].values())
        print(f"  broker {i}: {100 * cpu[i] / elapsed:5.2f}% of a core, {produces / elapsed:6.1f} produce/s, "
              f"{fetches / elapsed:6.1f} fetch/s, {1e6 * cpu[i] / max(everything, 1):7.0f} us CPU per request")
    print(f"  cluster: {100 * total_cpu / elapsed:5.2f}% of a core, {total_requests / elapsed:6.1f} requests/s, "
          f"{1e6 * total_cpu / max(total_requests, 1):7.0f} us CPU per request, "
          f"{1e6 * total_cpu / (args.rate * elapsed):7.0f} us CPU per event")


if __name__ == "__main__":
    main()

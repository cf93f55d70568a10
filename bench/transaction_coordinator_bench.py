"""The transaction coordinator's round: how many transactions per second one confluent-kafka transactional producer
completes (begin, produce, commit_transaction, one after the other), and each transaction's latency.

Each transaction holds --sizes records of 100 bytes spread over the 3 partitions of a topic; the producer sends
with linger.ms=0. Against a standalone broker (transaction state in its log dir, markers written in process) and
against a 3-broker cluster on a real ZooKeeper (replication factor 3, min.insync.replicas 2: the state in
ZooKeeper, markers to the other leaders over inter-broker connections, every marker and record acknowledged by the
ISR). A transaction's time covers AddPartitionsToTxn (retried while the previous one's markers are written), the
records, EndTxn and the wait for its answer; the producer and the brokers share the machine's cores.

    python -m bench.transaction_coordinator_bench [--transactions 200] [--sizes 1,3,100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from pipeline.client.admin import AdminClient
from pipeline.zk.server import ZooKeeperServer
from tests.support import BrokerProcess
from tests.support.cluster import BrokerCluster
from tests.support.clients import create_topic
from tests.support.polling import wait_until
from tests.support.zookeeper import unique_chroot

TOPIC = "txn-bench"
PARTITIONS = 3


def measure(bootstrap: str, label: str, transactions: int, sizes: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{label}", "linger.ms": 0})
    producer.init_transactions(30)
    for warm_up in range(20):
        producer.begin_transaction()
        producer.produce(TOPIC, b"w", partition=warm_up % PARTITIONS)
        producer.commit_transaction(30)
    for size in sizes:
        took: list[float] = []
        started = time.perf_counter()
        for _ in range(transactions):
            begun = time.perf_counter()
            producer.begin_transaction()
            for index in range(size):
                producer.produce(TOPIC, b"x" * 100, partition=index % PARTITIONS)
            producer.commit_transaction(30)
            took.append(time.perf_counter() - begun)
        elapsed = time.perf_counter() - started
        took.sort()
        print(f"{label:>10}: {size:>4} record(s) per transaction: {transactions / elapsed:6.0f} transactions/s, "
              f"median {1000 * statistics.median(took):5.1f} ms, p99 {1000 * took[int(len(took) * 0.99) - 1]:5.1f} ms",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--sizes", default="1,3,100")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        with BrokerProcess(home / "standalone" / "logs", log_path=home / "standalone.log") as broker:
            create_topic(broker.bootstrap, TOPIC, PARTITIONS)
            measure(broker.bootstrap, "standalone", args.transactions, sizes)
        with ZooKeeperServer(home / "zookeeper") as zookeeper:
            settings = {"zookeeper.session.timeout.ms": 6000, "replica.fetch.wait.max.ms": 100,
                        "min.insync.replicas": 2}
            with BrokerCluster(home / "cluster", zookeeper.connect_string + unique_chroot(), 3, settings) as cluster:
                with AdminClient(cluster.bootstrap) as admin:
                    admin.create_topics(TOPIC, partitions=PARTITIONS, replication_factor=3)
                wait_until(lambda: all(len(cluster.partition_state(TOPIC, p)["isr"]) == 3
                                       for p in range(PARTITIONS)), 30, message="every replica in sync")
                measure(cluster.bootstrap, "cluster", args.transactions, sizes)


if __name__ == "__main__":
    main()

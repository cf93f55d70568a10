"""Replication's cost and failover: produce throughput with acks=all on replication factor 3 (min.insync.replicas
2) against acks=1 on replication factor 1, and the time from a leader's SIGKILL to the new leader serving.

Starts its own ZooKeeper and three brokers in a temporary directory (tests/support/jepsen's environment:
short ZooKeeper sessions). Throughput: one confluent-kafka producer (linger.ms 5) sends --messages values of
--size bytes round-robin over --partitions partitions of a fresh topic for each setting and waits for every
answer; msgs/s and MB/s of payload. Failover: --kills times, the leader of a partition of a topic with
--failover-replication-factor replicas is SIGKILLed; the clock stops when a probe produce (acks=all) to the
partition is acknowledged; then the broker is restarted and back in the ISR before the next kill. Median.
Catch-up: one broker is stopped, --messages values are produced (acks=all) to a replication factor 3 topic,
the broker is started again, and the clock runs from its registration until it is back in every ISR: the
rate at which one follower's fetcher copies what it missed.

    python -m bench.replication_bench [--messages 500000] [--size 100] [--partitions 3] [--kills 5]
        [--failover-replication-factor 3]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from pipeline.client.admin import AdminClient
from tests.support.cluster import BrokerCluster
from tests.support.jepsen.clients import ConfluentWriter, librdkafka_logger
from tests.support.jepsen.environment import create_topic, jepsen_cluster
from tests.support.jepsen.history import History
from tests.support.jepsen.nemesis import Nemesis
from tests.support.polling import wait_until

SETTINGS = (("acks=all, replication factor 3, min.insync.replicas 2", "all", 3, 2),
            ("acks=1, replication factor 1", "1", 1, 1))


def throughput(cluster: BrokerCluster, topic: str, acks: str, messages: int, size: int, partitions: int
               ) -> tuple[float, float]:
    """Messages/s and MB/s of payload for one producer sending ``messages`` values and waiting for all answers."""
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failed.append(error)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 5,
                         "queue.buffering.max.messages": 200_000, "logger": librdkafka_logger})
    payload = b"x" * size
    began = time.monotonic()
    for number in range(messages):
        while True:
            try:
                producer.produce(topic, payload, partition=number % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
    left = producer.flush(300)
    elapsed = time.monotonic() - began
    if left or failed:
        raise RuntimeError(f"{left} messages unanswered, {len(failed)} failed (first: {failed[:1]})")
    with AdminClient(cluster.bootstrap) as admin:
        stored = sum(offset or 0 for offset in admin.list_offsets(topic).values())
    if stored != messages:
        raise RuntimeError(f"{topic} holds {stored} messages after {messages} were acknowledged")
    return messages / elapsed, messages * size / elapsed / 1e6


def catch_up(cluster: BrokerCluster, topic: str, messages: int, size: int, partitions: int) -> tuple[float, float]:
    """Seconds from a restarted follower's registration until it is back in every ISR of ``topic``, and the
    MB/s of payload it copied meanwhile (it missed all ``messages``)."""
    victim = max(cluster.brokers)
    cluster.brokers[victim].stop()
    throughput(cluster, topic, "all", messages, size, partitions)
    cluster.brokers[victim].start()
    cluster.wait_registered(set(cluster.brokers))
    began = time.monotonic()
    wait_until(lambda: all(victim in cluster.partition_state(topic, p)["isr"] for p in range(partitions)), 600,
               interval=0.02, message=f"broker {victim} back in every ISR of {topic}")
    elapsed = time.monotonic() - began
    return elapsed, messages * size / elapsed / 1e6


def failover_times(cluster: BrokerCluster, topic: str, kills: int, partitions: int) -> list[float]:
    history = History()
    probe = ConfluentWriter(history, cluster.bootstrap, topic, "probe")
    nemesis = Nemesis(cluster, topic, probe)
    try:
        times = []
        for number in range(kills):
            bounce = nemesis.bounce(number % partitions, hard=True)
            print(f"  kill {number + 1}: broker {bounce.broker}, partition {bounce.partition} served by broker "
                  f"{bounce.leader_after} after {bounce.failover_s * 1000:.0f} ms", flush=True)
            times.append(bounce.failover_s)
        return times
    finally:
        probe.flush(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--failover-replication-factor", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # Refused connections to a killed broker are expected here.
    librdkafka_logger.setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as tmp:
        with jepsen_cluster(Path(tmp)) as cluster:
            for number, (label, acks, replication_factor, min_insync) in enumerate(SETTINGS):
                topic = f"throughput-{number}"
                create_topic(cluster, topic, args.partitions, replication_factor, min_insync)
                rate, megabytes = throughput(cluster, topic, acks, args.messages, args.size, args.partitions)
                print(f"{label}: {args.messages} messages of {args.size} bytes, {rate:,.0f} msgs/s, "
                      f"{megabytes:.2f} MB/s", flush=True)
            create_topic(cluster, "catch-up", args.partitions, 3, 2)
            seconds, megabytes = catch_up(cluster, "catch-up", args.messages, args.size, args.partitions)
            print(f"a restarted follower copied {args.messages} messages of {args.size} bytes it missed and was back "
                  f"in every ISR {seconds:.2f} s after registering: {args.messages / seconds:,.0f} msgs/s, "
                  f"{megabytes:.2f} MB/s", flush=True)
            rf = args.failover_replication_factor
            create_topic(cluster, "failover", args.partitions, rf, min(2, rf))
            times = failover_times(cluster, "failover", args.kills, args.partitions)
            print(f"leader SIGKILL to a produce acknowledged by the new leader (replication factor {rf}, "
                  f"{args.kills} kills): median {statistics.median(times) * 1000:.0f} ms, "
                  f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

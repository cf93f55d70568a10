"""Cluster failover: from a broker's ZooKeeper session closing to all its partitions marked offline.

Starts a real ZooKeeper and three brokers (tests/support/cluster.py's BrokerCluster), creates PARTITIONS
partitions with replication factor 1 (spread over several topics so each creation transaction stays well
under ZooKeeper's 1 MB request limit), waits until every broker's Metadata shows them all led, then stops
one broker that is not the controller with SIGTERM. A graceful stop closes the broker's ZooKeeper session,
so its registration vanishes at once and the session timeout stays out of the figure. The clock starts when
this script's own ZooKeeper watch sees /brokers/ids/<victim> vanish, and stops:

- zk: when every partition the victim led has leader -1 in its ZooKeeper state (the controller's work);
- metadata: when both surviving brokers' Metadata answer leader -1 for all of them (their caches).

    python -m bench.cluster_failover_bench [--partitions 2000] [--topics 4] [--runs 1]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import decode_response, encode_request
from pipeline.zk import layout
from pipeline.zk.server import ZooKeeperServer
from tests.support import wire
from tests.support.cluster import BrokerCluster, metadata
from tests.support.polling import wait_until

CREATE_TOPICS_VERSION = 2


def create_topics(cluster: BrokerCluster, topics: dict[str, int], timeout_s: float) -> None:
    """CreateTopics through broker 1 for every (name, partitions), one topic per request."""
    broker = cluster.brokers[1]
    with wire.KafkaConnection(broker.host, broker.port, timeout=timeout_s + 10) as conn:
        for number, (name, partitions) in enumerate(sorted(topics.items()), start=1):
            body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                "assignments": [], "configs": []}],
                    "timeout_ms": int(timeout_s * 1000), "validate_only": False}
            conn.sock.sendall(encode_request(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, number, "bench", body))
            frame = wire.read_frame(conn.sock)
            _, response = decode_response(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, frame)
            (result,) = response["topics"]
            if result["error_code"]:
                raise RuntimeError(f"creating {name}: error {result['error_code']} {result['error_message']}")


def leaders_seen_by(broker_view: dict, topics: dict[str, int]) -> dict[tuple[str, int], int] | None:
    """(topic, partition) -> leader from one Metadata answer, or None while a topic is incomplete."""
    leaders: dict[tuple[str, int], int] = {}
    for name, count in topics.items():
        found = broker_view["topics"].get(name, {}).get("partitions", {})
        if len(found) != count:
            return None
        leaders.update({(name, p): v["leader"] for p, v in found.items()})
    return leaders


def zk_leaders(zk: KazooClient, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The leader in ZooKeeper of every partition, read with pipelined async gets."""
    pending = [(key, zk.get_async(layout.partition_state_path(*key))) for key in partitions]
    return {key: int(layout.decode(result.get(timeout=30)[0])["leader"]) for key, result in pending}


def one_run(base_dir: Path, zk_connect: str, partitions: int, topic_count: int) -> tuple[float, float, int]:
    per_topic = partitions // topic_count
    topics = {f"failover-{t}": per_topic + (1 if t < partitions % topic_count else 0) for t in range(topic_count)}
    cluster = BrokerCluster(base_dir, zk_connect, 3)
    try:
        cluster.start()
        started = time.monotonic()
        create_topics(cluster, topics, timeout_s=120)

        def all_led() -> dict[tuple[str, int], int] | None:
            views = [leaders_seen_by(metadata(b, list(topics)), topics) for b in cluster.live()]
            if any(v is None or -1 in v.values() for v in views) or any(v != views[0] for v in views):
                return None
            return views[0]
        leaders = wait_until(all_led, 300, interval=0.5, message="every broker seeing every partition led")
        print(f"  created {partitions} partitions in {time.monotonic() - started:.1f}s")
        controller = cluster.controller_id()
        victim = next(b for b in sorted(cluster.brokers) if b != controller)
        lost = sorted(key for key, leader in leaders.items() if leader == victim)
        survivors = [b for i, b in cluster.brokers.items() if i != victim]

        gone = threading.Event()
        gone_at: list[float] = []

        def on_registration(data: bytes | None, stat: object) -> bool | None:
            if data is None:
                gone_at.append(time.monotonic())
                gone.set()
                return False
            return None
        cluster.zk.DataWatch(layout.broker_path(victim), on_registration)
        cluster.brokers[victim].process.terminate()
        wait_until(gone.is_set, 60, interval=0.001, message="the victim's registration vanishing")
        t0 = gone_at[0]
        # Each poll reads only what is not offline yet, so the script's own load shrinks as the figure is made.
        in_zk = set(lost)

        def offline_in_zk() -> bool:
            leaders = zk_leaders(cluster.zk, sorted(in_zk))
            in_zk.difference_update(key for key, leader in leaders.items() if leader == -1)
            return not in_zk
        wait_until(offline_in_zk, 300, interval=0.01, message="the victim's partitions offline in ZooKeeper")
        zk_done = time.monotonic() - t0
        in_metadata = {id(broker): set(lost) for broker in survivors}

        def offline_everywhere() -> bool:
            for broker in survivors:
                pending = in_metadata[id(broker)]
                if pending:
                    asked = {t: topics[t] for t, _ in pending}
                    view = leaders_seen_by(metadata(broker, sorted(asked)), asked)
                    if view is not None:
                        pending.difference_update(key for key in list(pending) if view.get(key) == -1)
            return not any(in_metadata.values())
        wait_until(offline_everywhere, 300, interval=0.01, message="the survivors' metadata showing them offline")
        metadata_done = time.monotonic() - t0
        cluster.brokers[victim].process.wait(60)
        return zk_done, metadata_done, len(lost)
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as tmp:
        base = Path(tmp)
        with ZooKeeperServer(base / "zookeeper") as server:
            for run in range(args.runs):
                zk_s, metadata_s, lost = one_run(base / f"run{run}", f"{server.connect_string}/bench-{run}",
                                                 args.partitions, args.topics)
                print(f"run {run + 1}: {lost} of {args.partitions} partitions offline in ZooKeeper after "
                      f"{zk_s * 1000:.0f} ms, in both survivors' metadata after {metadata_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()

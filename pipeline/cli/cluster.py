"""`cluster`: the brokers of a cluster, which one is the controller, and how many topics it holds."""

from __future__ import annotations

import argparse
import time

from pipeline.cli.common import open_cluster, open_zookeeper
from pipeline.zk.registry import ClusterRegistry


def add_parser(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register `cluster`."""
    parser = subparsers.add_parser(
        "cluster", parents=[common], help="show the brokers and the controller",
        description="Show the live brokers, the controller and the topic count. With --zookeeper it reads the "
                    "cluster's ZooKeeper registry (/brokers/ids, /controller); otherwise it asks a broker "
                    "(Metadata).")
    parser.set_defaults(command=show_cluster, prog=parser.prog)


def show_cluster(args: argparse.Namespace) -> int:
    if args.zookeeper:
        zk = open_zookeeper(args)
        try:
            registry = ClusterRegistry(zk, args.command_timeout_ms / 1000)
            brokers = {b.broker_id: (b.host, b.port, b.registered_ms) for b in registry.brokers().values()}
            controller, epoch = registry.controller(), registry.controller_epoch()
            cluster_id, topic_count = registry.cluster_id(), len(registry.topics())
        finally:
            zk.stop()
            zk.close()
    else:
        cluster = open_cluster(args)
        try:
            topic_count = len(cluster.topics())
            brokers = {node: (host, port, None) for node, (host, port) in cluster.brokers().items()}
            controller, epoch, cluster_id = cluster.controller_id, None, cluster.cluster_id
        finally:
            cluster.close()
    print(f"Cluster id: {cluster_id or '-'}")
    print(f"Controller: {'broker ' + str(controller) if controller is not None and controller >= 0 else 'none'}"
          + (f" (epoch {epoch})" if epoch is not None else ""))
    print(f"Topics: {topic_count}")
    print(f"Brokers: {len(brokers)}")
    for broker_id, (host, port, registered_ms) in sorted(brokers.items()):
        since = (" registered " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(registered_ms / 1000))
                 if registered_ms else "")
        role = "  controller" if broker_id == controller else ""
        print(f"  {broker_id}\t{host}:{port}{since}{role}")
    return 0

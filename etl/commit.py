"""Committing to the warehouse: the offline cluster a run talks to, and the steps of a commit once its files are
staged, shared by loads, compaction, retention and the quarantine's replay.

    journal   the moves and the manifest, fsynced, before anything moves
    publish   the moves, then the manifest (the commit point)
    commit    the ranges' ends to /consumers/GROUP/offsets/TOPIC/PARTITION in ZooKeeper (loads only)
    audit     the manifest's AuditCount records to the offline cluster's audit topic
    finish    the journal, staging and plan removed; the manifest folded into the checkpoint

A commit killed after its journal is rolled forward by the next run's :meth:`Committer.recover`; one killed before
it leaves only staging, discarded there.
"""

from __future__ import annotations

import logging
from typing import Callable

from kazoo.client import KazooClient

from etl.audit_counts import publish_audit
from etl.config import EtlConfig
from etl.plan import EtlError, PartitionBounds, loaded_ends
from etl.store import Journal, Manifest, Warehouse
from pipeline.client.admin import EARLIEST_TIMESTAMP, AdminClient
from pipeline.client.cluster import Cluster
from pipeline.client.isolation import READ_COMMITTED
from pipeline.client.topic_filter import whitelist_except
from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
from pipeline.zk import layout
from pipeline.testing_faults import Faults
from pipeline.zk.client import BoundedZooKeeper, connect

__all__ = ["AUDIT_STEP", "Committer", "LockLost", "OfflineCluster", "ZOOKEEPER_STEP"]

log = logging.getLogger(__name__)

ZOOKEEPER_STEP = "zookeeper"
AUDIT_STEP = "audit"


class LockLost(EtlError):
    """The scheduler's lock was lost during the run: it stopped before the next step (publish or commit)."""


class OfflineCluster:
    """The offline cluster: its ZooKeeper session, metadata, and offset look-ups."""

    def __init__(self, config: EtlConfig) -> None:
        self.zk: KazooClient = connect(config["zookeeper.connect"], security=config.zookeeper_security)
        self.discovery = ZooKeeperBrokerDiscovery(self.zk)
        self.cluster = Cluster(self.discovery, client_id="etl", security=config.security)
        self.admin = AdminClient(self.cluster)

    def close(self) -> None:
        self.cluster.close()
        self.discovery.close()
        self.zk.stop()
        self.zk.close()

    def bounds(self, topics_regex: str, exclude_regex: str,
               isolation_level: int = READ_COMMITTED) -> dict[tuple[str, int], PartitionBounds]:
        """[earliest, end) of every partition of the wanted topics; the end is the last stable offset with
        read_committed (no open transaction is loaded, nor anything after one), else the high watermark."""
        wanted = whitelist_except(topics_regex, exclude_regex).select(self.admin.list_topics())
        bounds = {}
        for topic in wanted:
            earliest = self.admin.list_offsets(topic, None, EARLIEST_TIMESTAMP)
            latest = self.admin.list_offsets(topic, isolation_level=isolation_level)
            for partition, end in latest.items():
                start = earliest.get(partition)
                end = 0 if end is None else end
                bounds[(topic, partition)] = PartitionBounds(end if start is None else start, end)
        return bounds

    def brokers(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in sorted(self.cluster.brokers().values()))

    def commit_offsets(self, group: str, manifest: Manifest, faults: Faults = Faults()) -> None:
        """Write where the manifest's ranges end to /consumers/GROUP/offsets/TOPIC/PARTITION (idempotent)."""
        zk = BoundedZooKeeper(self.zk, 15.0)
        for (topic, partition), end in sorted(loaded_ends([*manifest.ranges, *manifest.skipped]).items()):
            path = layout.offset_path(group, topic, partition)
            data = str(end).encode()
            if zk.exists(path) is None:
                zk.ensure_path(path)
            zk.set(path, data)
            faults.pause("committing")


class Committer:
    """The steps of a commit (see the module's text) for one group's warehouse, under the run lock.

    ``still_locked`` is asked before publishing and before the ZooKeeper commit (False: LockLost).
    """

    def __init__(self, config: EtlConfig, warehouse: Warehouse, offline: OfflineCluster,
                 still_locked: Callable[[], bool] | None = None) -> None:
        self.config = config
        self.warehouse = warehouse
        self.offline = offline
        self.still_locked = still_locked
        self.faults = Faults.of(config)

    def recover(self) -> None:
        """Roll forward the commits that died after their journal; discard the staging of those that died before."""
        warehouse = self.warehouse
        warehouse.remove_strays()
        for journal in warehouse.journals_pending():
            log.warning("run %s stopped after it began publishing; completing it", journal.manifest.run_id)
            warehouse.publish(journal, self.faults)
            self.complete(journal)
        for run_id in warehouse.abandoned_runs():
            log.warning("run %s died before publishing; discarding its staging", run_id)
            warehouse.discard(run_id)

    def commit(self, manifest: Manifest) -> None:
        """Publish ``manifest`` (its files staged and fsynced) and do the steps after it."""
        self.check_lock("publishing")
        journal = Journal(manifest)
        self.warehouse.write_journal(journal)
        self.warehouse.publish(journal, self.faults)
        self.faults.pause("published")
        self.complete(journal)

    def complete(self, journal: Journal) -> None:
        """The steps after a manifest: the ZooKeeper commit and the audit (those not done yet), then cleanup and
        the fold."""
        manifest = journal.manifest
        if ZOOKEEPER_STEP not in journal.steps:
            if manifest.ranges or manifest.skipped:
                self.check_lock("committing")
                self.offline.commit_offsets(self.config["group.id"], manifest, self.faults)
            self.warehouse.step_done(journal, ZOOKEEPER_STEP)
        if AUDIT_STEP not in journal.steps:
            if self.config["audit.enable"]:
                publish_audit(self.config, manifest.audit)
            self.warehouse.step_done(journal, AUDIT_STEP)
        self.warehouse.finish(manifest.run_id)
        self.fold()

    def fold(self) -> None:
        """Fold the complete commits into the checkpoint; delete files obsolete for long enough."""
        self.warehouse.fold(self.config["obsolete.files.keep"])

    def check_lock(self, step: str) -> None:
        if self.still_locked is not None and not self.still_locked():
            raise LockLost(f"the scheduler's lock was lost; stopped before {step}")

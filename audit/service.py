"""The audit service: counts what each cluster holds, collects the other tiers' AuditCounts, reconciles every
window once it closed and its grace passed, and keeps and exports the results.

Readers (:mod:`audit.readers`), two per cluster: its event topics (tier ``datacenter`` for a datacenter
cluster, ``offline`` for the offline cluster) and its audit topic (the tiers ``producer``, ``mirror`` and
``warehouse`` publish there). A reconciliation pass merges all counts per (topic, datacenter, window) and
reconciles the windows past ``window end + grace``; a window whose counts changed since (late data) is
reconciled again. A pass looks only at the windows counted since the last one (the readers say which), those
newly past their grace, and those whose expected tiers changed, so its cost follows what changed, not what is
retained. Each new result is appended to ``STATE/results.jsonl``, read back at start. The warehouse tier, counted
by the ETL's runs minutes apart, is pending for a window (neither compared nor expected) until a run that started
after the window's end plus grace has finished, when ``warehouse.dir`` gives the audit the ETL's run history.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any, Iterable

from kazoo.exceptions import KazooException

from audit.config import AuditConfig
from audit.lag import group_lags
from audit.metrics import AuditMetrics
from audit.readers import AuditCountReader, ClusterReader, EventCounter
from audit.reconcile import TIERS, Discrepancy, TierCount, WindowKey, WindowResult, reconcile
from audit.results import ResultLog, result_from_json, result_to_json
from audit.state import CheckpointedCounts, CountKey
from audit.window_scan import multiplicities, scan_window
from etl.history import RunHistory
from etl.report import NOTHING_NEW, SUCCEEDED
from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster
from pipeline.client.errors import KafkaClientError
from pipeline.client.consumer_config import StaticConnectorConfig
from pipeline.client.static_connector import StaticConsumerConnector
from pipeline.client.topic_filter import Whitelist
from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
from pipeline.protocol.errors import KafkaProtocolError
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder

__all__ = ["AuditService"]

log = logging.getLogger(__name__)

_CLUSTER_TIERS = frozenset({"datacenter", "offline"})
#: Tiers counted by the runs of a batch job, the ETL: a window's counts there are final only once a run that started
#: after the window's end plus grace has finished (and its counts had grace to arrive); until then the tier is
#: pending for the window, neither compared nor expected, so that windows the ETL has not loaded yet are not losses.
BATCH_TIERS = frozenset({"warehouse"})
#: How many of the ETL's newest runs are looked at for the newest one that finished.
_RUNS_LOOKED_AT = 10


def _now_ms() -> int:
    return int(time.time() * 1000)


class AuditService:
    """Runs the readers and the reconciliation until ``run``'s stop event is set."""

    def __init__(self, config: AuditConfig, metrics: AuditMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or AuditMetrics()
        self.metrics.set_windows([], config["completeness.threshold"])
        self.results_log = ResultLog(config.state_dir / "results.jsonl")
        #: The newest result of each window, as stored (JSON dicts).
        self.results: dict[WindowKey, dict[str, Any]] = {}
        #: The newest result of each window (parsed), and its signature: a new result is kept only if it differs.
        self._results: dict[WindowKey, WindowResult] = {}
        self._reconciled: dict[WindowKey, tuple] = {}
        #: Every retained window counted so far with the tiers that counted it, and those to reconcile again.
        self._known: dict[WindowKey, set[str]] = {}
        self._unreconciled: set[WindowKey] = set()
        #: The start of the oldest window known or with a result (so retention only scans when passing it).
        self._oldest: int | None = None
        self._readers: list[ClusterReader] = []
        self._discoveries: list[ZooKeeperBrokerDiscovery] = []
        #: A cluster client per cluster name (the datacenters' and "offline"), for reading windows back.
        self._clusters: dict[str, Cluster] = {}
        self._discovery_of: dict[str, ZooKeeperBrokerDiscovery] = {}
        self._lag_labels: set[tuple[str, str, str, str]] = set()
        #: Tiers that have counted each (topic, datacenter) so far.
        self._active: dict[tuple[str, str], set[str]] = {}
        #: The ETL's run history (None: no warehouse configured, its tier is compared as it counts), the newest
        #: event time its finished runs cover (ms), and the windows reconciled while it was pending for them.
        self._etl_runs = RunHistory(config["warehouse.dir"], config["etl.group"]) if config["warehouse.dir"] else None
        self._batch_covered_ms = 0
        self._batch_pending: set[WindowKey] = set()
        self._registry: SchemaRegistryClient | None = None
        self._lock = threading.Lock()

    # -- running --------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        config = self.config
        horizon = _now_ms() - config["retain.ms"]
        self.results_log.compact(horizon)
        self.results = self.results_log.read(horizon)
        # (A window named by reading back is reconciled once more after a restart, and read again.)
        for key, data in self.results.items():
            self._results[key] = result_from_json(data)
            self._reconciled[key] = _signature(self._results[key])
            self._note_window(key.window_start)
        self.metrics.set_windows(list(self._results.values()), config["completeness.threshold"])
        self._registry = SchemaRegistryClient(config["schema.registry.url"])
        try:
            self._start_readers(stop)
            interval_s = config["reconcile.interval.ms"] / 1000
            while not stop.wait(interval_s):
                self.reconcile_closed()
                self.update_group_lags()
            self.reconcile_closed()
        finally:
            stop.set()
            for reader in self._readers:
                reader.join(30)
            for cluster in self._clusters.values():
                cluster.close()
            for discovery in self._discoveries:
                discovery.close()
            self._registry.close()
        failed = [r for r in self._readers if r.failure is not None]
        if failed:
            raise OSError(f"audit reader {failed[0].name} stopped: {failed[0].failure}")

    def _start_readers(self, stop: threading.Event) -> None:
        config = self.config
        clusters = [(name, connect, "datacenter") for name, connect in sorted((config["datacenters"] or {}).items())]
        if config["offline.zookeeper.connect"]:
            clusters.append(("offline", config["offline.zookeeper.connect"], "offline"))
        assert self._registry is not None
        decoder = AvroDecoder(self._registry)
        window_ms, retain_ms = config["window.ms"], config["retain.ms"]
        for name, connect, tier in clusters:
            discovery = ZooKeeperBrokerDiscovery(connect)
            self._discoveries.append(discovery)
            self._clusters[name] = Cluster(discovery, client_id="audit-window-scan")
            self._discovery_of[name] = discovery
            for role, topics in (("events", Whitelist(config["topics"])), ("audit", Whitelist(config["audit.topic"]))):
                counts = CheckpointedCounts(config.state_dir / f"{name}-{role}", retain_ms, _now_ms)
                handle: Any = (EventCounter(tier, counts, window_ms, self.metrics.observe_latency) if role == "events"
                               else AuditCountReader(counts, decoder, config["audit.topic"], _CLUSTER_TIERS,
                                                     self.metrics.add_latency))
                discovery = ZooKeeperBrokerDiscovery(connect)
                self._discoveries.append(discovery)
                connector = StaticConsumerConnector(StaticConnectorConfig({
                    "client.id": f"audit-{name}", "auto.offset.reset": "smallest", "consumer.timeout.ms": 200,
                    "topic.metadata.refresh.interval.ms": 5000}), counts, discovery=discovery)
                reader = ClusterReader(f"{name}-{role}", connector, topics, counts, handle,
                                       config["checkpoint.interval.ms"] / 1000)
                self._readers.append(reader.start(stop))
        log.info("auditing %s", ", ".join(f"{n} ({t})" for n, _, t in clusters))

    # -- reconciliation -------------------------------------------------------------------------------

    def counts(self, keys: Iterable[WindowKey] | None = None) -> dict[WindowKey, dict[str, TierCount]]:
        """The counted windows (``keys``, or all) with their tiers' counts (hosts and readers summed)."""
        window_ms = self.config["window.ms"]
        wanted = None if keys is None else [(tier, k.topic, k.datacenter, k.window_start)
                                            for k in keys for tier in self._known.get(k, ())]
        merged: dict[WindowKey, dict[str, TierCount]] = defaultdict(dict)
        for reader in self._readers:
            snapshot: dict[CountKey, TierCount] = reader.counts.snapshot(wanted)
            for (tier, topic, datacenter, start), counted in snapshot.items():
                tiers = merged[WindowKey(topic, datacenter, start, start + window_ms)]
                mine = tiers.get(tier)
                if mine is None:
                    tiers[tier] = counted
                else:
                    mine.add(counted.count, counted.bytes, counted.sketch)
        return merged

    def reconcile_closed(self, now_ms: int | None = None) -> list[WindowResult]:
        """Reconcile the windows past their grace whose counts changed since they were last reconciled, or whose
        expected tiers did (only those are read from the counts); the new results."""
        now_ms = _now_ms() if now_ms is None else now_ms
        grace = self.config["grace.ms"]
        self._take_changes(now_ms)
        due = {k for k in self._unreconciled if k.window_end + grace <= now_ms}
        grown = set()
        for key in due:
            seen = self._active.setdefault((key.topic, key.datacenter), set())
            if not seen.issuperset(self._known[key]):
                seen.update(self._known[key])
                grown.add((key.topic, key.datacenter))
        if grown:
            # A tier newly counting a topic and datacenter: its silence in their other windows is now a loss.
            due.update(k for k in self._known if (k.topic, k.datacenter) in grown and k.window_end + grace <= now_ms)
        due |= self._batch_newly_covered(now_ms)
        self._unreconciled.difference_update(due)
        counts = self.counts(due)
        fresh = []
        for key in sorted(due):
            tiers = counts.get(key)
            if tiers is None:
                continue
            expected = self._expected_tiers(key)
            if self._etl_runs is not None and key.window_end + grace > self._batch_covered_ms:
                tiers = {tier: counted for tier, counted in tiers.items() if tier not in BATCH_TIERS}
                expected -= BATCH_TIERS
                self._batch_pending.add(key)
            else:
                self._batch_pending.discard(key)
            result = reconcile(key, tiers, TIERS, expected)
            signature = _signature(result)
            if signature == self._reconciled.get(key):
                continue
            unread = [d for d in result.undecoded if not self._read_difference(key, d)]
            self.metrics.count_named(result, self._results.get(key))
            self.metrics.window_changed(self._results.get(key), result)
            if unread:
                self._unreconciled.add(key)  # read again at the next pass, changed or not
            else:
                self._reconciled[key] = signature
            data = result_to_json(result, now_ms)
            with self._lock:
                self.results[key] = data
            self._results[key] = result
            fresh.append(result)
        self.results_log.append([result_to_json(r, now_ms) for r in fresh])
        if fresh:
            for result in fresh:
                if not result.complete(self.config["completeness.threshold"]):
                    log.warning("window %s %s %d: completeness %s, discrepancies %s", result.key.topic,
                                result.key.datacenter, result.key.window_start, result.completeness,
                                result.discrepancies)
        return fresh

    def _batch_newly_covered(self, now_ms: int) -> set[WindowKey]:
        """The windows pending at the batch tiers that the ETL's newest finished run now covers (its counts had
        grace to arrive since it finished): a run covers the events that reached the offline cluster before it
        started, that is every window that ended at least grace before."""
        if self._etl_runs is None:
            return set()
        grace = self.config["grace.ms"]
        try:
            runs = self._etl_runs.runs(_RUNS_LOOKED_AT)
        except (OSError, ValueError) as exc:
            log.warning("cannot read the ETL's run history (read again at the next pass): %s", exc)
            return set()
        covered = max((int(run.started_at * 1000) for run in runs if run.outcome in (SUCCEEDED, NOTHING_NEW)
                       and run.finished_at is not None and run.finished_at * 1000 + grace <= now_ms), default=0)
        if covered <= self._batch_covered_ms:
            return set()
        self._batch_covered_ms = covered
        return {key for key in self._batch_pending if key.window_end + grace <= covered}

    def _take_changes(self, now_ms: int) -> None:
        """Note the windows the readers counted since the last pass (and which tiers), and forget those past
        retention."""
        window_ms = self.config["window.ms"]
        for reader in self._readers:
            for tier, topic, datacenter, start in reader.counts.take_changed():
                key = WindowKey(topic, datacenter, start, start + window_ms)
                self._known.setdefault(key, set()).add(tier)
                self._unreconciled.add(key)
                self._note_window(start)
        horizon = now_ms - self.config["retain.ms"]
        if self._oldest is not None and self._oldest < horizon:
            for key in [k for k in {*self._known, *self._results} if k.window_start < horizon]:
                self._known.pop(key, None)
                self._unreconciled.discard(key)
                self._batch_pending.discard(key)
                self._reconciled.pop(key, None)
                self.metrics.window_changed(self._results.pop(key, None), None)
                with self._lock:
                    self.results.pop(key, None)
            self._oldest = min((k.window_start for k in (*self._known, *self._results)), default=None)

    def _note_window(self, start: int) -> None:
        if self._oldest is None or start < self._oldest:
            self._oldest = start

    def _expected_tiers(self, key: WindowKey) -> set[str]:
        """The tiers that should have counted this window: the clusters the audit reads itself, and every tier
        that has counted this topic and datacenter in some closed window (once a tier runs, its silence is a
        loss)."""
        expected = set(self._active.get((key.topic, key.datacenter), ()))
        if key.datacenter in self._clusters:
            expected.add("datacenter")
        if "offline" in self._clusters:
            expected.add("offline")
        return expected

    def _read_difference(self, key: WindowKey, discrepancy: Discrepancy) -> bool:
        """Name the events of a difference too large for the sketches by reading the window from the clusters
        that hold the two tiers' events (what the mirror acknowledged is what the offline cluster holds); left
        undecoded when a tier has nothing to read (the producers) or both read the same cluster. False when a
        cluster could not be read now (the window is reconciled again at the next pass)."""
        sources = {"datacenter": self._clusters.get(key.datacenter), "offline": self._clusters.get("offline"),
                   "mirror": self._clusters.get("offline")}
        earlier, later = sources.get(discrepancy.earlier), sources.get(discrepancy.later)
        if earlier is None or later is None or earlier is later:
            return True
        slack = self.config["grace.ms"]
        try:
            before = multiplicities(scan_window(earlier, key.topic, key.window_start, key.window_end, slack,
                                                key.datacenter))
            after = multiplicities(scan_window(later, key.topic, key.window_start, key.window_end, slack,
                                               key.datacenter))
        except (KafkaClientError, KafkaProtocolError, OSError) as exc:
            log.warning("cannot read window %s %s %d to name its events (retried at the next pass): %s", key.topic,
                        key.datacenter, key.window_start, exc)
            return False
        discrepancy.missing = {i: n - after[i] for i, n in sorted(before.items()) if after[i] < n}
        discrepancy.duplicated = {i: n - before[i] for i, n in sorted(after.items()) if before[i] < n}
        discrepancy.decoded = True
        discrepancy.read = True
        return True

    def update_group_lags(self) -> None:
        """Export every consumer group's lag in every cluster read (kafka_consumergroup_lag)."""
        seen = set()
        for name, cluster in self._clusters.items():
            discovery = self._discovery_of[name]
            try:
                lags = group_lags(discovery.zk, AdminClient(cluster))
            except (KazooException, KafkaClientError, KafkaProtocolError) as exc:
                log.debug("lag of the groups of %s not known now: %s", name, exc)
                continue
            for (group, topic, partition), lag in lags.items():
                labels = (name, group, topic, str(partition))
                self.metrics.group_lag.labels(*labels).set(lag)
                seen.add(labels)
        for labels in self._lag_labels - seen:
            self.metrics.group_lag.remove(*labels)
        self._lag_labels = seen


def _signature(result: WindowResult) -> tuple:
    return (tuple(sorted(result.counts.items())),
            tuple((d.earlier, d.later, tuple(sorted(d.missing.items())), tuple(sorted(d.duplicated.items())),
                   d.decoded) for d in result.discrepancies))

"""The audit service: counts what each cluster holds, collects the other tiers' AuditCounts, reconciles every
window once it closed and its grace passed, and keeps and exports the results.

Readers (:mod:`audit.readers`), two per cluster: its event topics (tier ``datacenter`` for a datacenter
cluster, ``offline`` for the offline cluster) and its audit topic (the tiers ``producer``, ``mirror`` and
``warehouse`` publish there). Every pass samples each cluster's end offsets and notes where the readers and the
mirror's group stand (:mod:`audit.readiness`): a tier is compared for a window only once it provably counted
everything it will count for it, and is pending (with its lag) until then, never lost. A reconciliation pass merges
all counts per (topic, datacenter, window) and reconciles (:mod:`audit.reconcile`) the windows past ``window end +
grace`` whose counts or ready tiers changed; a pass looks only at the windows counted since the last one (the
readers say which), those newly past their grace, those still pending somewhere and those whose expected tiers
changed, so its cost follows what changed, not what is retained. Each new result is appended to
``STATE/results.jsonl`` (rewritten with the retained windows once it doubled), read back at start.

Where the sketches cannot name a difference, the window is read back from the clusters (:mod:`audit.window_scan`).
The sketches cannot tell an event held twice of which the producers counted one from an event held once that no
producer counted (a record another, unaudited producer wrote): both are one extra copy. So when a window names
events duplicated at the datacenter tier (rare: the producers are idempotent), the window is read back from the
datacenter cluster and each such event's copies counted there: one held exactly as many times as its extra copies is
**unexpected** (held, created by no producer the audit hears from), not duplicated.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any, Iterable

from kazoo.exceptions import KazooException

from audit.config import AuditConfig
from audit.lag import committed_offsets, group_lags
from audit.measures import parse_measure, unsettled_measure
from audit.metrics import AuditMetrics
from audit.readers import AuditCountReader, ClusterReader, EventCounter
from audit.readiness import EtlRun, Follower, Readiness
from audit.reconcile import (PRODUCER, TIERS, Discrepancy, TierCount, WindowKey, WindowResult, account, reconcile,
                             split_unexpected)
from audit.results import ResultLog, result_from_json, result_to_json
from audit.state import CheckpointedCounts, CountKey
from audit.window_scan import held_copies, multiplicities, scan_window
from pipeline.client.admin import EARLIEST_TIMESTAMP, AdminClient
from pipeline.client.cluster import Cluster
from pipeline.client.consumer_config import StaticConnectorConfig
from pipeline.client.errors import KafkaClientError
from pipeline.client.isolation import READ_COMMITTED
from pipeline.client.static_connector import StaticConsumerConnector
from pipeline.client.topic_filter import Whitelist
from pipeline.durable_file import make_private_dir
from pipeline.error_text import describe_error
from pipeline.client.zk_discovery import ZooKeeperBrokerDiscovery
from pipeline.etl_runs import NOTHING_NEW, PARTIAL, SUCCEEDED, RunHistory
from pipeline.protocol.errors import KafkaProtocolError
from pipeline.security.client_settings import security_settings
from schemas.registry_client import SchemaRegistryClient
from schemas.serde import AvroDecoder

__all__ = ["AuditService"]

log = logging.getLogger(__name__)

_CLUSTER_TIERS = frozenset({"datacenter", "offline"})
#: How many of the ETL's newest runs are looked at for those that cover a window.
_RUNS_LOOKED_AT = 10
#: Tiers read back from a cluster when their difference is too large for the sketches (the mirror's acknowledged
#: records are what the offline cluster holds).
_READ_FROM = {"datacenter": "datacenter", "mirror": "offline", "offline": "offline"}
#: The first tier that holds the events: an extra copy there may be an event no producer created.
_FIRST_DATA_TIER = "datacenter"


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
        #: Every retained window counted so far with the measures that counted it, and those to reconcile again.
        self._known: dict[WindowKey, set[str]] = {}
        self._unreconciled: set[WindowKey] = set()
        #: Per window the tiers ready and the moment as of which each had counted everything; the windows past
        #: their grace with a tier still pending.
        self._ready_at: dict[WindowKey, dict[str, int]] = {}
        self._awaiting: set[WindowKey] = set()
        #: Per window, the events the producers said were still in flight (their counts not final yet).
        self._unsettled: dict[WindowKey, int] = {}
        #: The start of the oldest window known or with a result (so retention only scans when passing it).
        self._oldest: int | None = None
        self._readers: list[ClusterReader] = []
        self._discoveries: list[ZooKeeperBrokerDiscovery] = []
        #: A cluster client per cluster name (the datacenters' and "offline"), for reading windows back.
        self._clusters: dict[str, Cluster] = {}
        self._discovery_of: dict[str, ZooKeeperBrokerDiscovery] = {}
        #: Per window, the copies the datacenter cluster held of the events named duplicated there, as last read
        #: back, with what they were read for (the datacenter's count and the extra copies named).
        self._held: dict[WindowKey, tuple[tuple, dict[str, int]]] = {}
        #: The followers of each cluster (readers and the mirror's group), by role ("events", "audit", "mirror").
        self._followers: dict[str, dict[str, tuple[Follower, ClusterReader | None]]] = {}
        self._lag_labels: set[tuple[str, str, str, str]] = set()
        #: Tiers that have counted each (topic, datacenter) so far.
        self._active: dict[tuple[str, str], set[str]] = {}
        #: The ETL's run history (None: no warehouse configured, its tier is compared once the offline tier is).
        self._etl_runs = RunHistory(config["warehouse.dir"], config["etl.group"]) if config["warehouse.dir"] else None
        self.readiness = Readiness(config["grace.ms"], config["audit.topic"], datacenter_events={},
                                   datacenter_audit={}, mirror={}, offline_events=None, offline_audit=None,
                                   etl=self._etl_runs is not None)
        self._registry: SchemaRegistryClient | None = None
        #: Held while ``results`` changes (the HTTP thread reads it).
        self.lock = threading.Lock()

    # -- running --------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        config = self.config
        make_private_dir(config.state_dir, tighten=True)
        horizon = _now_ms() - config["retain.ms"]
        self.results_log.compact(horizon)
        self.results = self.results_log.read(horizon)
        # (A window named by reading back is reconciled once more after a restart, and read again.)
        for key, data in self.results.items():
            self._results[key] = result_from_json(data)
            self._reconciled[key] = _signature(self._results[key])
            if isinstance(data.get("ready"), dict):
                self._ready_at[key] = {t: m for t, m in data["ready"].items() if isinstance(m, int)}
            self._note_window(key.window_start)
        self.metrics.set_windows(list(self._results.values()), config["completeness.threshold"])
        self._registry = SchemaRegistryClient.from_config(config)
        try:
            self._start_readers(stop)
            interval_s = config["reconcile.interval.ms"] / 1000
            while not stop.wait(interval_s):
                self.observe_progress()
                self.reconcile_closed()
            if not self.failed_readers():
                self.observe_progress()
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
        failed = self.failed_readers()
        if failed:
            raise OSError(f"audit reader {failed[0].name} stopped: {failed[0].failure}")

    def failed_readers(self) -> list[ClusterReader]:
        return [r for r in self._readers if r.failure is not None]

    def health(self) -> dict[str, Any]:
        """``healthy`` (False once a reader stopped: the service is going down) and each reader's state."""
        readers = {r.name: r.state() for r in self._readers}
        failed = self.failed_readers()
        return {"healthy": not failed, "readers": readers,
                "error": f"audit reader {failed[0].name} stopped: {failed[0].failure}" if failed else None}

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
            self._clusters[name] = Cluster(discovery, client_id="audit-window-scan", security=config.security)
            self._discovery_of[name] = discovery
            followers = self._followers[name] = {}
            for role, topics in (("events", Whitelist(config["topics"])), ("audit", Whitelist(config["audit.topic"]))):
                counts = CheckpointedCounts(config.state_dir / f"{name}-{role}", retain_ms, _now_ms)
                handle: Any = (EventCounter(tier, counts, window_ms, self.metrics.observe_latencies) if role == "events"
                               else AuditCountReader(counts, decoder, config["audit.topic"], _CLUSTER_TIERS,
                                                     window_ms, self.metrics.add_latency))
                reader_discovery = ZooKeeperBrokerDiscovery(connect)
                self._discoveries.append(reader_discovery)
                connector = StaticConsumerConnector(StaticConnectorConfig({
                    "client.id": f"audit-{name}", "auto.offset.reset": "smallest", "consumer.timeout.ms": 200,
                    "isolation.level": "read_committed",
                    "topic.metadata.refresh.interval.ms": 5000, **security_settings(config)}), counts,
                    discovery=reader_discovery)
                reader = ClusterReader(f"{name}-{role}", connector, topics, counts, handle,
                                       config["checkpoint.interval.ms"] / 1000, self.metrics.count_skipped)
                followers[role] = (Follower(reader.name), reader)
                self._readers.append(reader.start(stop))
            if tier == "datacenter" and config["mirror.group"]:
                followers["mirror"] = (Follower(f"{name}-{config['mirror.group']}"), None)
        self.readiness = self._readiness()
        log.info("auditing %s", ", ".join(f"{n} ({t})" for n, _, t in clusters))

    def _readiness(self) -> Readiness:
        datacenters = {name: roles for name, roles in self._followers.items() if name != "offline"}
        offline = self._followers.get("offline", {})
        return Readiness(
            self.config["grace.ms"], self.config["audit.topic"],
            datacenter_events={name: roles["events"][0] for name, roles in datacenters.items()},
            datacenter_audit={name: roles["audit"][0] for name, roles in datacenters.items()},
            mirror={name: roles["mirror"][0] for name, roles in datacenters.items() if "mirror" in roles},
            offline_events=offline["events"][0] if "events" in offline else None,
            offline_audit=offline["audit"][0] if "audit" in offline else None, etl=self._etl_runs is not None)

    # -- progress: end offsets sampled, readers' and the mirror's positions -------------------------------------

    def observe_progress(self) -> None:
        """Sample every cluster's end offsets, note where its readers and the mirror's group stand, and export
        every consumer group's lag (kafka_consumergroup_lag) and the readers' (audit_reader_lag_records)."""
        seen: set[tuple[str, str, str, str]] = set()
        for name, cluster in self._clusters.items():
            try:
                seen |= self._observe(name, cluster)
            except (KazooException, KafkaClientError, KafkaProtocolError, OSError) as exc:
                log.debug("progress of %s not known now: %s", name, describe_error(exc))
        for labels in self._lag_labels - seen:
            self.metrics.group_lag.remove(*labels)
        self._lag_labels = seen

    def _observe(self, name: str, cluster: Cluster) -> set[tuple[str, str, str, str]]:
        followers = self._followers.get(name, {})
        admin = AdminClient(cluster)
        audited = Whitelist(self.config["topics"])
        available = cluster.topics()
        # A topic the cluster does not have holds nothing: sampled empty, so that its windows can be compared.
        absent = {k.topic for k in self._awaiting if k.topic not in available and audited.select([k.topic])}
        audit_topic = self.config["audit.topic"]
        topics = {"events": sorted({*audited.select(list(available)), *absent}), "audit": [audit_topic]}
        topics["mirror"] = topics["events"]
        ends: dict[str, dict[int, int | None]] = {}
        sampled_at = _now_ms()
        for topic in sorted({*topics["events"], *topics["audit"]}):
            ends[topic] = (admin.list_offsets(topic, isolation_level=READ_COMMITTED) if topic in available
                           else {})
        committed = committed_offsets(self._discovery_of[name].zk)
        group = self.config["mirror.group"]
        positions = {"mirror": {(t, p): o for (g, t, p), o in committed.items() if g == group}}
        for role, (_, reader) in followers.items():
            if reader is not None:
                positions[role] = reader.positions()
        observed_at = _now_ms()
        for role, (follower, _) in followers.items():
            for topic in topics[role]:
                known = {p: e for p, e in ends[topic].items() if e is not None}
                empty = follower.without_position(topic, [p for p, e in known.items() if e > 0])
                earliest = admin.list_offsets(topic, empty, EARLIEST_TIMESTAMP) if empty else {}
                follower.sample(sampled_at, topic, known, {p: e for p, e in earliest.items() if e is not None})
            follower.advance(positions.get(role, {}), observed_at)
            if role != "mirror":
                self.metrics.reader_lag.labels(follower.name).set(sum(follower.lag(t) or 0 for t in topics[role]))
        seen = set()
        for (group_id, topic, partition), lag in group_lags(
                committed, lambda t: ends[t] if t in ends else _latest(admin, t, available)).items():
            labels = (name, group_id, topic, str(partition))
            self.metrics.group_lag.labels(*labels).set(lag)
            seen.add(labels)
        return seen

    # -- reconciliation -------------------------------------------------------------------------------

    def counts(self, keys: Iterable[WindowKey] | None = None) -> dict[WindowKey, dict[str, TierCount]]:
        """The counted windows (``keys``, or all) with their measures' counts (hosts and readers summed)."""
        window_ms = self.config["window.ms"]
        wanted = None if keys is None else [(measure, k.topic, k.datacenter, k.window_start)
                                            for k in keys for measure in self._known.get(k, ())]
        merged: dict[WindowKey, dict[str, TierCount]] = defaultdict(dict)
        for reader in self._readers:
            snapshot: dict[CountKey, TierCount] = reader.counts.snapshot(wanted)
            for (measure, topic, datacenter, start), counted in snapshot.items():
                measures = merged[WindowKey(topic, datacenter, start, start + window_ms)]
                mine = measures.get(measure)
                if mine is None:
                    measures[measure] = counted
                else:
                    mine.add(counted.count, counted.bytes, counted.sketch)
        return merged

    def reconcile_closed(self, now_ms: int | None = None) -> list[WindowResult]:
        """Reconcile the windows past their grace whose counts changed since they were last reconciled, whose ready
        tiers grew, or whose expected tiers changed (only those are read from the counts); the new results."""
        now_ms = _now_ms() if now_ms is None else now_ms
        grace = self.config["grace.ms"]
        self._take_changes(now_ms)
        due = {k for k in self._unreconciled if k.window_end + grace <= now_ms}
        grown = set()
        for key in due:
            seen = self._active.setdefault((key.topic, key.datacenter), set())
            tiers = self._tiers(key)
            if not seen.issuperset(tiers):
                seen.update(tiers)
                grown.add((key.topic, key.datacenter))
        if grown:
            # A tier newly counting a topic and datacenter: its silence in their other windows is now a loss.
            due.update(k for k in self._known if (k.topic, k.datacenter) in grown and k.window_end + grace <= now_ms)
        due |= self._update_readiness(due, now_ms)
        self._unreconciled.difference_update(due)
        counts = self.counts(due)
        fresh = []
        threshold = self.config["completeness.threshold"]
        for key in sorted(due):
            measures = counts.get(key)
            if measures is None:
                continue
            ready_at = self._ready_at.get(key, {})
            result = reconcile(key, measures, TIERS, self._expected_tiers(key), ready_at, threshold)
            for tier in result.pending:
                result.pending[tier] = self._waiting_for(key, tier, ready_at)
            signature = _signature(result)
            if signature == self._reconciled.get(key):
                continue
            undecoded = result.undecoded
            unread = [d for d in undecoded if not self._read_difference(key, d, result)]
            told = self._tell_unexpected(key, result, measures.get(_FIRST_DATA_TIER))
            if len(unread) < len(undecoded) or told:
                account(result)
                signature = _signature(result)
            again = bool(unread) or told is None
            if not again and signature == self._reconciled.get(key):
                continue  # named as before, once read back
            self.metrics.count_named(result, self._results.get(key))
            self.metrics.window_changed(self._results.get(key), result)
            if again:
                self._unreconciled.add(key)  # read again at the next pass, changed or not
            else:
                self._reconciled[key] = signature
            data = result_to_json(result, now_ms, ready_at)
            with self.lock:
                self.results[key] = data
            self._results[key] = result
            fresh.append(result)
        self.results_log.append([self.results[r.key] for r in fresh])
        if self.results_log.needs_compaction():
            with self.lock:
                retained = list(self.results.values())
            self.results_log.rewrite(retained)
        self._export_pending(now_ms)
        self._refresh_pending()
        for result in fresh:
            if result.state == "incomplete":
                log.warning("window %s %s %d: %s", result.key.topic, result.key.datacenter, result.key.window_start,
                            _describe(result))
        return fresh

    def _waiting_for(self, key: WindowKey, tier: str, ready_at: dict[str, int]) -> dict[str, object]:
        unsettled = self._unsettled.get(key)
        if tier == PRODUCER and unsettled:
            return {"lagRecords": unsettled, "waitingFor": f"{unsettled} events the producers still retry (in flight "
                                                           f"when they published their counts)"}
        return self.readiness.waiting_for(key, tier, ready_at)

    def _tiers(self, key: WindowKey) -> set[str]:
        return {parse_measure(m).tier for m in self._known.get(key, ())} & set(TIERS)

    def _update_readiness(self, due: set[WindowKey], now_ms: int) -> set[WindowKey]:
        """Note the tiers newly ready for the windows past their grace; the windows where some were."""
        grace = self.config["grace.ms"]
        runs = self._finished_runs()
        grown = set()
        considered = [key for key in due | self._awaiting if key.window_end + grace <= now_ms]
        self._unsettled = self._producers_unsettled(considered)
        for key in considered:
            tiers = self._tiers(key) | self._expected_tiers(key)
            ready_at = self._ready_at.setdefault(key, {})
            # Events the producers still retry may yet reach the cluster, or fail: their tier is not final.
            counted = tiers - {PRODUCER} if self._unsettled.get(key) and PRODUCER not in ready_at else tiers
            if self.readiness.update(key, counted, ready_at, now_ms, runs):
                grown.add(key)
            if tiers.issubset(ready_at):
                self._awaiting.discard(key)
            else:
                self._awaiting.add(key)
        return grown

    def _producers_unsettled(self, keys: Iterable[WindowKey]) -> dict[WindowKey, int]:
        """The events the producers still had in flight when they last published their counts of each of ``keys``
        (only windows whose counts say some were in flight at some point are read)."""
        measure = unsettled_measure(PRODUCER)
        wanted = [key for key in keys if measure in self._known.get(key, ())]
        if not wanted:
            return {}
        return {key: measures[measure].count for key, measures in self.counts(wanted).items()
                if measure in measures and measures[measure].count}

    def _finished_runs(self) -> list[EtlRun] | None:
        if self._etl_runs is None:
            return None
        try:
            runs = self._etl_runs.runs(_RUNS_LOOKED_AT)
        except (OSError, ValueError) as exc:
            log.warning("cannot read the ETL's run history (read again at the next pass): %s", exc)
            return []
        return [EtlRun(int(run.started_at * 1000), int(run.finished_at * 1000), frozenset(run.topic_errors))
                for run in runs if run.outcome in (SUCCEEDED, NOTHING_NEW, PARTIAL) and run.finished_at is not None]

    def _export_pending(self, now_ms: int) -> None:
        """audit_pending_windows{tier} and audit_oldest_pending_window_age_seconds{tier}."""
        pending: dict[str, list[int]] = {tier: [] for tier in TIERS}
        for key in self._awaiting:
            ready = self._ready_at.get(key, {})
            for tier in self._tiers(key) | self._expected_tiers(key):
                if tier not in ready:
                    pending[tier].append(key.window_end)
        for tier, ends in pending.items():
            self.metrics.pending_windows.labels(tier).set(len(ends))
            self.metrics.pending_age.labels(tier).set(max(0.0, (now_ms - min(ends)) / 1000) if ends else 0.0)

    def _refresh_pending(self) -> None:
        """What the pending tiers of each stored result wait for now (their lag moves between results; served, not
        written)."""
        with self.lock:
            for key in self._awaiting:
                data = self.results.get(key)
                if data is not None and data.get("pending"):
                    ready_at = self._ready_at.get(key, {})
                    self.results[key] = {**data, "pending": {tier: self._waiting_for(key, tier, ready_at)
                                                             for tier in data["pending"]}}

    def _take_changes(self, now_ms: int) -> None:
        """Note the windows the readers counted since the last pass (and which measures), and forget those past
        retention."""
        window_ms = self.config["window.ms"]
        for reader in self._readers:
            for measure, topic, datacenter, start in reader.counts.take_changed():
                key = WindowKey(topic, datacenter, start, start + window_ms)
                self._known.setdefault(key, set()).add(measure)
                self._unreconciled.add(key)
                self._note_window(start)
        horizon = now_ms - self.config["retain.ms"]
        if self._oldest is not None and self._oldest < horizon:
            for key in [k for k in {*self._known, *self._results} if k.window_start < horizon]:
                self._known.pop(key, None)
                self._unreconciled.discard(key)
                self._awaiting.discard(key)
                self._ready_at.pop(key, None)
                self._reconciled.pop(key, None)
                self._held.pop(key, None)
                self.metrics.window_changed(self._results.pop(key, None), None)
                with self.lock:
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

    def _read_difference(self, key: WindowKey, discrepancy: Discrepancy, result: WindowResult) -> bool:
        """Name the events of a difference too large for the sketches by reading the window from the clusters
        that hold the two tiers' events (what the mirror acknowledged is what the offline cluster holds), with
        what was quarantined on the way; left undecoded when a tier has nothing to read (the producers, the
        warehouse) or both read the same cluster. False when a cluster could not be read now (the window is
        reconciled again at the next pass)."""
        clusters = {"datacenter": self._clusters.get(key.datacenter), "offline": self._clusters.get("offline")}
        earlier = clusters.get(_READ_FROM.get(discrepancy.earlier, ""))
        later = clusters.get(_READ_FROM.get(discrepancy.later, ""))
        if earlier is None or later is None or earlier is later:
            return True
        low, high = TIERS.index(discrepancy.earlier), TIERS.index(discrepancy.later)
        quarantined = [q for q in result.quarantined if low < TIERS.index(q.tier) <= high and q.count]
        if any(q.ids is None for q in quarantined):
            return True  # more set aside than named: left undecoded
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
        for q in quarantined:
            after.update(q.ids or {})
        discrepancy.missing = {i: n - after[i] for i, n in sorted(before.items()) if after[i] < n}
        discrepancy.duplicated = {i: n - before[i] for i, n in sorted(after.items()) if before[i] < n}
        discrepancy.decoded = True
        discrepancy.read = True
        return True


    def _tell_unexpected(self, key: WindowKey, result: WindowResult, counted: TierCount | None) -> bool | None:
        """Tell the events ``result`` names duplicated at the datacenter tier from those no producer created, by
        counting their copies in the window read back from the datacenter cluster (``counted``: what the audit counted
        there) -- read again only when what is named or counted there changed. True when some were unexpected (name
        again), False when none (or nothing to read), None when the cluster could not be read now (they stay named
        duplicated; read again at the next pass)."""
        step = next((d for d in result.discrepancies
                     if (d.earlier, d.later) == (PRODUCER, _FIRST_DATA_TIER) and d.decoded and d.duplicated), None)
        cluster = self._clusters.get(key.datacenter)
        if step is None or cluster is None or counted is None or counted.sketch is None:
            return False
        wanted = (counted.count, tuple(sorted(step.duplicated.items())))
        known = self._held.get(key)
        if known is not None and known[0] == wanted:
            held = known[1]
        else:
            try:
                found = scan_window(cluster, key.topic, key.window_start, key.window_end, self.config["grace.ms"],
                                    key.datacenter)
            except (KafkaClientError, KafkaProtocolError, OSError) as exc:
                log.warning("cannot read window %s %s %d to tell duplicated events from unexpected ones (named "
                            "duplicated; retried at the next pass): %s", key.topic, key.datacenter, key.window_start,
                            describe_error(exc))
                return None
            held = held_copies(found, counted.sketch, step.duplicated)
            self._held[key] = (wanted, held)
        return bool(split_unexpected(step, held))


def _latest(admin: AdminClient, topic: str, available: Iterable[str]) -> dict[int, int | None]:
    """The last stable offsets of ``topic`` (none for a topic the cluster does not have)."""
    return admin.list_offsets(topic, isolation_level=READ_COMMITTED) if topic in available else {}


def _describe(result: WindowResult) -> str:
    parts = [f"{tier} {state}" for tier, state in result.tier_states().items() if state != "complete"]
    if result.unaccounted:
        parts.append(f"unaccounted for ({result.identity})")
    return ", ".join(parts) or "incomplete"


def _signature(result: WindowResult) -> tuple:
    return (tuple(sorted(result.counts.items())), result.state, tuple(sorted(result.ready)),
            tuple((d.earlier, d.later, tuple(sorted(d.missing.items())), tuple(sorted(d.duplicated.items())),
                   tuple(sorted(d.unexpected.items())), d.decoded, d.unnamed) for d in result.discrepancies),
            tuple((q.tier, q.reason, q.count, q.without_id) for q in result.quarantined))

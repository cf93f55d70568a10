"""`make pipeline-up` end to end, from a fresh clone of the repository, on a reduced topology under supervisord: dc1 of
three brokers with replication 3 and min.insync.replicas 2 as the default topology has them, dc2 of one, an offline
cluster of two, low rates, 2 s audit windows, an ETL run every 15 s, and emulators that list every event they create
(``created.log``). Security is on, as by default: SASL_SSL brokers with ACLs, HTTPS registry and dashboard with
basic authentication, ZooKeeper ACLs; the test reads the clusters and the audit as admin.

One deployment, in phases: undisturbed (the windows reconciled so far are complete at every tier with nothing named;
`python -m pipeline status` healthy; Prometheus scraped every target; `make pipeline-up` again starts nothing twice;
every broker, the registry, the dashboard and ZooKeeper refuse a client without the right credentials);
what the topology promises (every topic replicated as it says, nothing listening beyond its host, var/ owner-only);
every chaos drill while the emulators go on (a broker of dc1 killed and failed over, with the audit's verdict; the
mirror, the ETL in the middle of a run, the registry and the audit killed; ZooKeeper stopped for longer than the
brokers' sessions; a broker's disk filled; poison records written into dc1); then the emulators stopped and the
pipeline drained. At the end the accounting identity of docs/accounting.md is checked exactly, event by event:

    every event the emulators created is in the warehouse (by lineage), or named lost at its tier, or named
    quarantined with its reason -- and none is both; every event held more than once anywhere is named duplicated;
    the one event held that no emulator created (the poison event) is named unexpected, not duplicated; the poison
    records are quarantined and named; every window's identity holds.

The dashboard shows the topics in Chromium, and `make pipeline-down` leaves no process behind.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from infra.deployment import clusters
from infra.deployment.poison import NULL_VALUE_KEY, STRAY_LINE, UNKNOWN_SCHEMA_ID
from infra.deployment.programs import HttpAccess, broker_log_dir, http_get, http_ok, programs, scrape_jobs
from infra.deployment.secrets import ADMIN, Secrets
from infra.deployment.small_disk import BALLAST_NAME
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS
from schemas.serde import event_key, schema_id_of
from tests.support.broker import REPO_ROOT
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.deployment import (
    Deployment,
    admin_security,
    created_events,
    listeners,
    loose_permissions,
    process_tree,
    source_events,
    unrefused,
    warehouse_events,
)
from tests.support.polling import wait_until

pytestmark = [pytest.mark.slow(first=True), pytest.mark.timeout(1500)]

WINDOW_MS = 2000
DRILL_TIMEOUT_S = 400


def make(clone: Path, target: str, deployment: Deployment, timeout: float = 600) -> subprocess.CompletedProcess:
    """``make TARGET`` in the clone, on the test's topology, with this interpreter's virtualenv (``-o setup``: the
    suite's own `make test` has just installed it)."""
    venv = Path(sys.executable).parent.parent
    return subprocess.run(["make", "--no-print-directory", "-o", "setup", target, f"VENV={venv}",
                           f"TOPOLOGY={deployment.path}"], cwd=clone, capture_output=True, text=True, timeout=timeout)


def get(url: str, access: HttpAccess | None = None) -> Any:
    return json.loads(http_get(url, access, 10))


def windows(deployment: Deployment) -> list[dict[str, Any]]:
    topology = deployment.topology
    return get(f"{topology.dashboard_url}api/windows", HttpAccess.of(topology))["windows"]


def window_detail(deployment: Deployment, window: dict[str, Any]) -> dict[str, Any]:
    topology = deployment.topology
    return get(f"{topology.dashboard_url}api/windows/{window['topic']}/{window['datacenter']}/{window['windowStart']}",
               HttpAccess.of(topology))


def settled(window: dict[str, Any]) -> bool:
    """Whether every tier of the window is ready (the warehouse included) and its identity holds."""
    identity = window.get("identity")
    return (window["state"] != "pending" and not window["pending"] and "warehouse" in window["counts"]
            and identity is not None and identity["holds"])


def drill(deployment: Deployment, *arguments: str) -> str:
    """``python -m pipeline chaos ARGUMENTS`` on the deployment, which must end well; its output."""
    result = deployment.command("chaos", *arguments, module="pipeline", timeout=DRILL_TIMEOUT_S, check=False)
    assert result.returncode == 0, f"{arguments}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    print(result.stdout)
    return result.stdout


def targets_up(deployment: Deployment) -> list[str]:
    """Prometheus's active targets that are not up (empty once every one was scraped successfully)."""
    targets = get(f"{deployment.topology.prometheus_url}/api/v1/targets")["data"]["activeTargets"]
    expected = sum(len(job.targets) for job in scrape_jobs(deployment.topology))
    down = [f"{t['labels']['job']} {t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}" for t in targets
            if t["health"] != "up"]
    return down if len(targets) == expected else [f"{len(targets)} targets, not {expected}"]


def configs(deployment: Deployment, cluster: str) -> dict[str, tuple[int, dict[str, str]]]:
    """topic -> (replication factor, configs in effect) of every topic of ``cluster``."""
    topology = deployment.topology
    with clusters.admin(topology.cluster_zookeeper(topology.cluster(cluster)), security=admin_security(topology)) as admin:
        return {d.name: (d.replication_factor, admin.describe_configs(d.name))
                for d in admin.describe_topics(admin.list_topics())}


def spans(lineages: set[tuple[str, str, int, int]]) -> str:
    """Lineages as offset ranges per source partition: ``dc1 page-views-0 [17-20, 31]``."""
    by_partition: dict[tuple[str, str, int], list[int]] = collections.defaultdict(list)
    for datacenter, topic, partition, offset in lineages:
        by_partition[(datacenter, topic, partition)].append(offset)
    parts = []
    for (datacenter, topic, partition), offsets in sorted(by_partition.items()):
        ranges: list[list[int]] = []
        for offset in sorted(offsets):
            if ranges and offset == ranges[-1][1] + 1:
                ranges[-1][1] = offset
            else:
                ranges.append([offset, offset])
        shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges[:8])
        parts.append(f"{datacenter} {topic}-{partition} [{shown}{', ...' if len(ranges) > 8 else ''}]")
    return "; ".join(parts)


class Named:
    """What the audit names over every window: events lost (id -> tier), duplicated (id -> tiers), unexpected (id ->
    tiers: created by no audited producer), quarantined with an id (id -> (tier, reason)) and without one ((tier,
    reason) -> count)."""

    def __init__(self, deployment: Deployment, summaries: list[dict[str, Any]]) -> None:
        self.lost: dict[str, str] = {}
        self.lost_by_count: dict[str, int] = collections.Counter()
        self.duplicated: dict[str, set[str]] = collections.defaultdict(set)
        self.unexpected: dict[str, set[str]] = collections.defaultdict(set)
        self.quarantined: dict[str, tuple[str, str]] = {}
        self.quarantined_without_id: dict[tuple[str, str], int] = collections.Counter()
        for summary in summaries:
            if not summary["namedEvents"]:
                continue
            window = window_detail(deployment, summary)
            for tier, ids in window["lost"].items():
                self.lost.update(dict.fromkeys(ids, tier))
            for tier, n in window["lostByCount"].items():
                self.lost_by_count[tier] += n
            for tier, ids in window["duplicated"].items():
                for event_id in ids:
                    self.duplicated[event_id].add(tier)
            for tier, ids in window["unexpected"].items():
                for event_id in ids:
                    self.unexpected[event_id].add(tier)
            for quarantine in window["quarantined"]:
                for event_id, copies in quarantine["ids"].items():
                    if copies > 0:
                        self.quarantined[event_id] = (quarantine["tier"], quarantine["reason"])
                if quarantine["withoutId"]:
                    self.quarantined_without_id[(quarantine["tier"], quarantine["reason"])] += quarantine["withoutId"]


def undrained(deployment: Deployment, created: dict[str, Any], sources: dict[tuple[str, str, int, int], str | None]
              ) -> str:
    """What still differs once the sources stopped: created events neither loaded nor named, lineages missing from
    (or unknown to) the warehouse, the windows not settled, and the ends of the mirror, audit and ETL logs."""
    rows = warehouse_events(deployment.topology)
    loaded = {lineage for lineage, _ in rows}
    stored = {lineage for lineage, event_id in sources.items() if event_id in created}
    found = windows(deployment)
    named = Named(deployment, found)
    unaccounted = set(created) - {event_id for _, event_id in rows} - set(named.lost) - set(named.quarantined)
    partial = [{k: w[k] for k in ("topic", "datacenter", "windowStart", "state", "counts", "pending", "identity")}
               for w in found if not settled(w)]
    return (f"{len(created)} events created, {len(stored)} of them stored, {len(loaded)} loaded\n"
            f"created but neither loaded nor named: {sorted(unaccounted)[:10]} ({len(unaccounted)})\n"
            f"stored but not loaded: {spans(stored - loaded) or 'none'}\n"
            f"loaded but not stored: {spans(loaded - stored) or 'none'}\n"
            f"{len(partial)} windows not settled: {partial[:6]}"
            + "".join(f"\n{program} log:\n{deployment.log(program, 2500)}" for program in ("mirror", "audit", "etl")))


def poison_records(deployment: Deployment, output: str) -> dict[str, tuple[Any, Any, str | None]]:
    """The records the poison-record drill says it wrote into dc1, read back: kind -> (key, value, event id)."""
    places = re.findall(r"(a stray line of text|a null value|an event written with schema id \d+[^:]*): "
                        r"PageViewEvent-(\d+) offset (\d+) of dc1(?:, event id ([0-9a-f-]{36}))?", output)
    assert len(places) == 3, output
    topology = deployment.topology
    stored = {}
    with clusters.admin(topology.cluster_zookeeper(topology.cluster("dc1")), security=admin_security(topology)) as admin:
        addresses = admin.cluster.brokers()
        for kind, partition, offset, event_id in places:
            host, port = addresses[admin.cluster.leader("PageViewEvent", int(partition))]
            with SimpleConsumer(host, port, security=admin.cluster.security) as consumer:
                message = next(m for m in consumer.fetch(FetchRequest("PageViewEvent", int(partition), int(offset),
                                                                      1 << 20)) if m.offset == int(offset))
            stored[kind.split(" ")[1]] = (message.key, message.value, event_id or None)
    return stored


def test_every_event_created_is_loaded_or_named_through_every_drill_from_a_fresh_clone(tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: `make setup` installs it"
    deployment = Deployment(window_ms=WINDOW_MS, brokers={"dc1": 3, "offline": 2})
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True, timeout=120)
    try:
        began = time.monotonic()
        up = make(clone, "pipeline-up", deployment)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        print(f"make pipeline-up took {time.monotonic() - began:.1f}s")
        topology = deployment.topology
        assert topology.security and topology.registry_url.startswith("https://")
        admin_password = Secrets.of(topology).password(ADMIN)
        for shown in (topology.dashboard_url, topology.prometheus_url, topology.registry_url,
                      "python -m audit report", "python -m audit trace", "first events in the offline cluster",
                      f"login {ADMIN} / {admin_password}", "--command-config", "admin.properties"):
            assert shown in up.stdout, up.stdout
        # No other secret is printed.
        for user, password in Secrets.of(topology).passwords().items():
            assert user == ADMIN or password not in up.stdout + up.stderr, user
        alerts_page = re.search(r"\(alerts: (\S+)\)", up.stdout)
        assert alerts_page and http_ok(alerts_page.group(1)), up.stdout

        # Undisturbed: the windows settled so far are complete at every tier, nothing named.
        wait_until(lambda: sum(settled(w) for w in windows(deployment)) >= 2 * len(EVENT_TOPICS), 150, interval=1,
                   message=lambda: f"windows settled at every tier, warehouse included:\n{deployment.log('etl')}")
        for window in windows(deployment):
            if settled(window):
                assert window["state"] == "complete" and window["namedEvents"] == 0, window
                assert set(window["completeness"].values()) == {1.0}, window
        status = deployment.command("status", module="pipeline", check=False)
        assert status.returncode == 0, status.stdout + status.stderr
        for program in programs(topology):
            assert program.name in status.stdout
        wait_until(lambda: targets_up(deployment) == [], 60, interval=1,
                   message=lambda: f"Prometheus scraped every target: {targets_up(deployment)}")
        # Secured: nobody without the right credentials gets in, anywhere.
        assert unrefused(topology) == []

        # Again while it runs: nothing is started twice.
        before = {info.name: info.pid for info in deployment.supervisor.infos()}
        began = time.monotonic()
        again = make(clone, "pipeline-up", deployment)
        assert again.returncode == 0 and "supervisord already running" in again.stdout, again.stdout + again.stderr
        print(f"make pipeline-up while running took {time.monotonic() - began:.1f}s")
        assert {info.name: info.pid for info in deployment.supervisor.infos()} == before

        # What the topology promises: every topic replicated as its cluster says (the offline cluster's event topics
        # made by the mirror, with the offline cluster's own min.insync.replicas), nothing listening beyond the
        # topology's host, nothing under var/ its group or others may read (the warehouse written by Spark too).
        dc1 = configs(deployment, "dc1")
        assert {(dc1[t][0], dc1[t][1]["min.insync.replicas"]) for t in (*EVENT_TOPICS, AUDIT_TOPIC)} == {(3, "2")}
        assert (dc1[AUDIT_TOPIC][1]["retention.ms"], dc1[AUDIT_TOPIC][1]["retention.bytes"]) == (
            str(24 * 3_600_000), "-1")
        offline = configs(deployment, "offline")
        assert {(offline[t][0], offline[t][1]["min.insync.replicas"]) for t in (*EVENT_TOPICS, AUDIT_TOPIC)} == {
            (2, "1")}
        found = listeners(process_tree(deployment.pids()))
        assert {port for port, _ in topology.ports()} <= {listener.port for listener in found}
        elsewhere = [listener for listener in found if listener.address not in (topology.host, f"::ffff:{topology.host}")]
        assert elsewhere == [], "\n".join(map(str, elsewhere))
        assert loose_permissions(deployment.var_dir) == []

        # The drills while the emulators go on.
        drilled_from_ms = time.time() * 1000
        outputs = {}
        # A broker of dc1: a failover, nothing failed, and the audit's verdict over its windows names nothing.
        outputs["kill-broker"] = output = drill(deployment, "kill-broker", "dc1", "--wait-audit")
        assert "Expect a failover" in output and "no partition goes offline" in output
        killed = re.search(r"SIGKILL (broker-dc1-\d)", output)
        assert killed, output
        assert re.search(r"(leadership of the \d+ partitions broker \d led moved to broker\(s\) [\d, ]+|broker \d "
                         r"registered again [\d.]+s after the kill, before the controller moved the leadership of the "
                         r"\d+ partitions it led: it leads them again \(its partitions had no live leader meanwhile\)); "
                         r"no partition was without a leader", output), output
        assert "in the ISR of every partition it holds" in output
        assert re.search(r"the emulators of dc1 failed to store 0 event\(s\)", output), output
        for tier in ("producer", "datacenter", "mirror", "offline", "warehouse"):
            assert re.search(rf"{tier}\s+completeness 1\.000 \(\d+ of \d+ created\), lost 0, duplicated 0, "
                             rf"quarantined 0", output), (tier, output)
        # The mirror, the ETL in the middle of a run (its Spark JVM with it), ZooKeeper stopped for longer than the
        # brokers' sessions.
        # The mirror copies exactly once: its restart aborts what the killed process left open and reads on from the
        # offsets committed with the records, so no tier after it names a duplicate.
        outputs["kill-mirror"] = output = drill(deployment, "kill-mirror", "--wait-audit")
        assert "fences the killed process" in output, output
        for tier in ("mirror", "offline", "warehouse"):
            assert re.search(rf"{tier}\s+completeness 1\.000 \(\d+ of \d+ created\), lost 0, duplicated 0, "
                             rf"quarantined 0", output), (tier, output)
        outputs["kill-etl"] = output = drill(deployment, "kill-etl", "--during-run")
        assert "java" in output and "the restarted ETL's first run finished" in output
        outputs["pause-zookeeper"] = output = drill(deployment, "pause-zookeeper")
        assert "every program running and healthy" in output
        # The registry and the audit come back as they were.
        output = drill(deployment, "kill-registry")
        assert re.search(r"the restarted registry serves the same \d+ schema version\(s\) under the same ids", output)
        output = drill(deployment, "kill-audit")
        assert re.search(r"the restarted audit reconciled \d+ window\(s\) since it started", output), output
        # A broker's disk fills up: appends refused while it is full, nothing lost, its log back on the disk after.
        output = drill(deployment, "fill-disk", "dc1", "--seconds", "8")
        chosen = re.search(r"log directory of broker-dc1-(\d)", output)
        assert chosen, output
        refused = re.search(r"after 8s full \(No space left on device\): (\d+) produce append\(s\) refused as leader, "
                            r"(\d+) follower append\(s\) failed", output)
        assert refused and int(refused.group(1)) + int(refused.group(2)) > 0, output
        log_dir = broker_log_dir(topology, topology.cluster("dc1"), int(chosen.group(1)))
        assert not os.path.ismount(log_dir) and not (log_dir / BALLAST_NAME).exists()
        # Poison records written into dc1: a stray line, a null value, an event under a schema id nobody registered.
        poison = poison_records(deployment, drill(deployment, "poison-record", "dc1", "PageViewEvent"))
        assert poison["stray"][:2] == (None, STRAY_LINE)
        assert poison["null"][:2] == (NULL_VALUE_KEY, None)
        _, value, poison_id = poison["event"]
        assert schema_id_of(bytes(value)) == UNKNOWN_SCHEMA_ID and event_key(bytes(value)).event_id == poison_id
        # A drill that cannot run says why in one line.
        refused = deployment.command("chaos", "poison-record", "offline", "PageViewEvent", module="pipeline",
                                     check=False)
        assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
            "python -m pipeline chaos: poison-record writes into a datacenter's cluster, and 'offline' is none of "
            "dc1, dc2"], refused.stderr
        restarted = sorted(name for name, pid in before.items()
                           if {i.name: i.pid for i in deployment.supervisor.infos()}[name] != pid)
        assert {killed.group(1), "mirror", "etl", "registry", "audit", f"broker-dc1-{chosen.group(1)}"} == set(restarted)
        assert all(info.running for info in deployment.supervisor.infos())
        drilled_ms = time.time() * 1000
        print(f"drills took {(drilled_ms - drilled_from_ms) / 1000:.0f}s")

        # The sources stop (each flushes what it has, publishes its last counts and lists what it created); everything
        # is mirrored, loaded and reconciled.
        for datacenter in topology.datacenters:
            deployment.supervisor.stop(f"emulators-{datacenter.name}")
        stopped = deployment.command("status", module="pipeline", check=False)
        assert stopped.returncode == 1 and "STOPPED" in stopped.stdout, stopped.stdout
        created = created_events(topology)
        sources = source_events(topology)

        def drained() -> bool:
            rows = warehouse_events(topology)
            stored = {lineage for lineage, event_id in sources.items() if event_id in created}
            return {lineage for lineage, _ in rows} == stored and all(settled(w) for w in windows(deployment))
        wait_until(drained, 240, interval=2,
                   message=lambda: "the pipeline drained: " + undrained(deployment, created, sources))
        final = windows(deployment)
        named = Named(deployment, final)
        rows = warehouse_events(topology)

        # The identity, event by event: every event created is in the warehouse, or named lost, or named quarantined,
        # and exactly one of these; nothing was lost through the drills.
        loaded = collections.Counter(event_id for _, event_id in rows)
        quarantined_created = {event_id for event_id in named.quarantined if event_id in created}
        assert named.lost == {} and not named.lost_by_count, (named.lost, named.lost_by_count)
        assert set(created) == set(loaded) | quarantined_created, undrained(deployment, created, sources)
        assert not set(loaded) & set(named.quarantined)
        # Nothing in the warehouse that was not created, but for the poison event, which is quarantined, not loaded.
        assert set(loaded) <= set(created)
        # Every event held more than once anywhere is named duplicated: in a datacenter's cluster, in the warehouse.
        held = collections.Counter(event_id for event_id in sources.values() if event_id is not None)
        duplicated_somewhere = {e for e, n in held.items() if n > 1} | {e for e, n in loaded.items() if n > 1}
        assert duplicated_somewhere <= set(named.duplicated), duplicated_somewhere - set(named.duplicated)
        # Once the named duplicates are set aside, every event id is in the warehouse once: ids are unique.
        assert all(n == 1 for e, n in loaded.items() if e not in named.duplicated)
        # Every row is the event its lineage says it is.
        assert all(sources[lineage] == event_id for lineage, event_id in rows)
        # The one event held that no emulator created, the poison event, is named unexpected at dc1, not duplicated.
        assert {e for e in held if e not in created} == {poison_id}
        assert named.unexpected == {poison_id: {"datacenter"}}, named.unexpected
        assert poison_id not in named.duplicated
        # The poison records: each quarantined in the warehouse with its reason, the event by its id.
        assert named.quarantined[poison_id] == ("warehouse", "unknown schema id"), named.quarantined
        assert named.quarantined_without_id[("warehouse", "null value")] == 1, named.quarantined_without_id
        assert named.quarantined_without_id[("warehouse", "not in the Confluent wire format")] == 1
        # Every window's identity holds; the windows before the drills are complete with nothing named.
        for window in final:
            assert settled(window), window
            if window["windowEnd"] < drilled_from_ms - 10_000:
                assert window["state"] == "complete" and window["namedEvents"] == 0, window
        print(f"{len(created)} events created, {len(held)} stored, {sum(loaded.values())} warehouse rows "
              f"({len(loaded)} events), {len(named.duplicated)} events named duplicated, {len(named.unexpected)} unexpected, "
              f"{len(named.quarantined)} quarantined with an id, {sum(named.quarantined_without_id.values())} without")

        # The dashboard shows every topic.
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                # The deployment's own CA is not Chromium's: its certificate is checked by the tests above.
                page = browser.new_page(viewport={"width": 1400, "height": 1800}, ignore_https_errors=True,
                                        http_credentials={"username": ADMIN, "password": admin_password})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(topology.dashboard_url)
                page.wait_for_function("document.querySelectorAll('#grid .grid-row').length >= %d"
                                       % len(EVENT_TOPICS), timeout=30_000)
                shown = page.eval_on_selector_all("#grid .grid-row", "rows => rows.map(r => r.dataset.topic)")
                assert sorted(set(shown)) == sorted(EVENT_TOPICS)
                assert errors == []
            finally:
                browser.close()

        every_pid = deployment.pids() | set(before.values())
        down = make(clone, "pipeline-down", deployment)
        assert down.returncode == 0, down.stdout + down.stderr
        assert deployment.supervisor.pid() is None
        assert deployment.leftovers() == []
        assert not [pid for pid in every_pid if Path(f"/proc/{pid}").exists()
                    and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    finally:
        deployment.close()

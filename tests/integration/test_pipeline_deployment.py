"""`make pipeline-up` end to end, from a fresh clone of the repository, on a reduced topology (free ports, low rates,
2 s audit windows, an ETL run every 15 s) under supervisord.

One deployment runs a few minutes in three phases: undisturbed (the windows reconciled at every tier so far are
complete, with nothing named; `python -m pipeline status` sees every process healthy; Prometheus scraped every
target; `make pipeline-up` again starts nothing twice), then the chaos drills while the emulators go on (one broker of dc1, the mirror and the ETL in the middle
of a run SIGKILLed and restarted by supervisord, ZooKeeper stopped for longer than the brokers' sessions), then
the emulators stopped and the pipeline drained. At the end the warehouse holds every event the datacenters
stored, with its exact lineage, nothing is lost at any tier and every extra copy is one the audit named; the
dashboard shows the topics in Chromium, and `make pipeline-down` leaves no process behind.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from audit.reconcile import TIERS
from infra.deployment.programs import http_ok, programs, scrape_jobs
from schemas.events import EVENT_TOPICS
from tests.support.broker import REPO_ROOT
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.deployment import Deployment, source_events, warehouse_events
from tests.support.polling import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WINDOW_MS = 2000


def make(clone: Path, target: str, deployment: Deployment, timeout: float = 600) -> subprocess.CompletedProcess:
    """``make TARGET`` in the clone, on the test's topology, with this interpreter's virtualenv (``-o setup``: the
    suite's own `make test` has just installed it)."""
    venv = Path(sys.executable).parent.parent
    return subprocess.run(["make", "--no-print-directory", "-o", "setup", target, f"VENV={venv}",
                           f"TOPOLOGY={deployment.path}"], cwd=clone, capture_output=True, text=True, timeout=timeout)


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def windows(deployment: Deployment) -> list[dict[str, Any]]:
    return get(f"http://127.0.0.1:{deployment.topology.audit.http_port}/api/windows")["windows"]


def window_detail(deployment: Deployment, window: dict[str, Any]) -> dict[str, Any]:
    return get(f"http://127.0.0.1:{deployment.topology.audit.http_port}/api/windows/{window['topic']}/"
               f"{window['datacenter']}/{window['windowStart']}")


def whole(window: dict[str, Any]) -> bool:
    """Whether every tier counted the window and none holds fewer events than the producers acknowledged (the
    completeness of a window the producers acknowledged nothing of is None: its events are named as extra)."""
    return set(window["counts"]) == set(TIERS) and all(c is None or c >= 1.0 for c in window["completeness"].values())


def targets_up(deployment: Deployment) -> list[str]:
    """Prometheus's active targets that are not up (empty once every one was scraped successfully)."""
    targets = get(f"{deployment.topology.prometheus_url}/api/v1/targets")["data"]["activeTargets"]
    expected = sum(len(job.targets) for job in scrape_jobs(deployment.topology))
    down = [f"{t['labels']['job']} {t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}" for t in targets
            if t["health"] != "up"]
    return down if len(targets) == expected else [f"{len(targets)} targets, not {expected}"]


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


def undrained(deployment: Deployment, sources: dict[tuple[str, str, int, int], str]) -> str:
    """What still differs once the sources stopped: lineages missing from (or unknown to) the warehouse, the windows
    not yet whole, and the ends of the logs of the mirror, the audit and the ETL."""
    loaded = {lineage for lineage, _ in warehouse_events(deployment.topology)}
    partial = [{k: w[k] for k in ("topic", "datacenter", "windowStart", "counts", "completeness")}
               for w in windows(deployment) if not whole(w)]
    return (f"{len(sources)} events stored, {len(loaded)} loaded\n"
            f"missing from the warehouse: {spans(set(sources) - loaded) or 'none'}\n"
            f"loaded but not stored: {spans(loaded - set(sources)) or 'none'}\n"
            f"{len(partial)} windows not whole: {partial[:6]}"
            + "".join(f"\n{program} log:\n{deployment.log(program, 2500)}" for program in ("mirror", "audit", "etl")))


def test_the_whole_pipeline_from_a_fresh_clone_loses_nothing_through_the_chaos_drills(tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: `make setup` installs it"
    deployment = Deployment(window_ms=WINDOW_MS)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True, timeout=120)
    try:
        began = time.monotonic()
        up = make(clone, "pipeline-up", deployment)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        print(f"make pipeline-up took {time.monotonic() - began:.1f}s")
        topology = deployment.topology
        for shown in (topology.dashboard_url, topology.prometheus_url, topology.registry_url,
                      "python -m audit report", "python -m audit trace", "first events in the offline cluster"):
            assert shown in up.stdout, up.stdout
        alerts_page = re.search(r"\(alerts: (\S+)\)", up.stdout)
        assert alerts_page and http_ok(alerts_page.group(1)), up.stdout

        # Undisturbed: the windows reconciled at every tier so far are exactly complete, nothing named.
        wait_until(lambda: sum(whole(w) for w in windows(deployment)) >= 2 * len(EVENT_TOPICS), 150, interval=1,
                   message=lambda: f"windows reconciled at every tier, warehouse included:\n{deployment.log('etl')}")
        status = deployment.command("status", module="pipeline", check=False)
        assert status.returncode == 0, status.stdout + status.stderr
        for program in programs(topology):
            assert program.name in status.stdout
        wait_until(lambda: targets_up(deployment) == [], 60, interval=1,
                   message=lambda: f"Prometheus scraped every target: {targets_up(deployment)}")

        # Again while it runs: nothing is started twice.
        before = {info.name: info.pid for info in deployment.supervisor.infos()}
        began = time.monotonic()
        again = make(clone, "pipeline-up", deployment)
        assert again.returncode == 0 and "supervisord already running" in again.stdout, again.stdout + again.stderr
        print(f"make pipeline-up while running took {time.monotonic() - began:.1f}s")
        assert {info.name: info.pid for info in deployment.supervisor.infos()} == before

        # The drills while the emulators go on: one broker of dc1, the mirror, the ETL in the middle of a run
        # (SIGKILL, each restarted by supervisord), then ZooKeeper stopped for longer than the brokers' sessions.
        killed_at_ms = time.time() * 1000
        drills = {}
        for drill in (("kill-broker", "dc1"), ("kill-mirror",), ("kill-etl", "--during-run"), ("pause-zookeeper",)):
            drills[drill[0]] = deployment.command("chaos", *drill, module="pipeline", timeout=300).stdout
            print(drills[drill[0]])
        # the ETL went with its Spark JVM, and its restarted scheduler's first run did not fail
        assert "java" in drills["kill-etl"] and "the restarted ETL's first run finished" in drills["kill-etl"]
        assert "every program running and healthy" in drills["pause-zookeeper"]
        after = {info.name: info.pid for info in deployment.supervisor.infos()}
        restarted = sorted(name for name in before if after[name] != before[name])
        assert restarted in (["broker-dc1-1", "etl", "mirror"], ["broker-dc1-2", "etl", "mirror"]), restarted
        assert all(info.running for info in deployment.supervisor.infos())
        drilled_ms = time.time() * 1000
        wait_until(lambda: max(w["windowStart"] for w in windows(deployment)) > drilled_ms + 2 * WINDOW_MS, 60,
                   interval=1, message="windows after the drills reconciled")

        # The sources stop; everything they stored is mirrored, loaded and reconciled.
        for datacenter in topology.datacenters:
            deployment.supervisor.stop(f"emulators-{datacenter.name}")
        stopped = deployment.command("status", module="pipeline", check=False)
        assert stopped.returncode == 1 and "STOPPED" in stopped.stdout, stopped.stdout
        sources = source_events(topology)

        def drained() -> bool:
            loaded = {lineage for lineage, _ in warehouse_events(topology)}
            return loaded == set(sources) and all(whole(w) for w in windows(deployment))
        wait_until(drained, 180, interval=2, message=lambda: "the pipeline drained: " + undrained(deployment, sources))
        final = windows(deployment)

        # The warehouse: every stored event exactly with its lineage; the extra copies are the ones the audit named.
        rows = warehouse_events(topology)
        assert {lineage for lineage, _ in rows} == set(sources)
        assert all(sources[lineage] == event_id for lineage, event_id in rows)
        copies = collections.Counter(event_id for _, event_id in rows)
        extra_in_warehouse = {event_id for event_id, n in copies.items() if n > 1}
        named_duplicates: set[str] = set()
        for window in final:
            assert whole(window), window
            if None in window["completeness"].values():
                print("no event acknowledged by the producers:", window_detail(deployment, window))
            if window["windowEnd"] < killed_at_ms - 10_000:
                assert window["namedEvents"] == 0 and set(window["completeness"].values()) == {1.0}, window
            if window["namedEvents"]:
                for discrepancy in window_detail(deployment, window)["discrepancies"]:
                    assert discrepancy["missing"] == {}, discrepancy
                    named_duplicates |= set(discrepancy["duplicated"])
        assert extra_in_warehouse <= named_duplicates, extra_in_warehouse - named_duplicates
        produced = sum(w["counts"]["producer"] for w in final)
        print(f"{len(sources)} events stored, {produced} acknowledged, {len(rows)} warehouse rows, "
              f"{len(extra_in_warehouse)} events duplicated (all named by the audit)")
        assert produced <= len(set(sources.values())) <= len(sources)

        # The dashboard shows every topic.
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1800})
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

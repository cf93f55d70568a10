"""The audit dashboard in a real headless Chromium (Debian's, driven by Playwright) on a running pipeline, served
over HTTPS with basic authentication (the browser logs in; a request without the login gets 401): it
loads without console errors, shows every topic's tiers, turns the tier where events were lost red (the tiers after
it amber: short), a tier that quarantined records amber and a tier still pending grey, and shows what is named --
lost at its tier, quarantined with its reason, pending with what it waits for -- when a cell is clicked.
Screenshots are kept under the test's tmp_path (and, when AUDIT_SCREENSHOT_DIR is set, copied there)."""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from pipeline.etl_runs import SUCCEEDED, RangeReport, RunHistory, RunReport
from schemas.events import EVENT_TOPICS
from tests.support.audit import (
    AuditProcess,
    all_reconciled,
    audit_args,
    audit_count,
    publish_audit_count,
    publish_phantom_count,
    run_pipeline,
)
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.cluster import BrokerCluster
from tests.support.http_security import http_security_files
from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.registry import RegistryProcess

pytestmark = pytest.mark.slow


def keep(screenshot: Path) -> None:
    target = os.environ.get("AUDIT_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(target) / screenshot.name)


def test_dashboard_shows_the_pipeline_and_names_an_injected_loss(clusters: dict[str, BrokerCluster],
                                                                 registry: RegistryProcess, tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), "Debian's chromium is missing: `make setup` installs it"
    dc1, offline = clusters["dc1"], clusters["offline"]
    stored = run_pipeline(dc1, offline, registry, tmp_path, rate=800, duration=2)
    # An ETL run history in the warehouse (as `python -m etl run` records it).
    report = RunReport("run-7", "etl", time.time() - 30, ranges=[RangeReport("PageViewEvent", 0, 0, 120, 120, 9000)])
    report.finish(SUCCEEDED, time.time() - 12)
    RunHistory(tmp_path / "warehouse", "etl").record(report)
    # No Prometheus on this port: the page must say so and keep working.
    secured = http_security_files(tmp_path / "security")
    args = audit_args(dc1, offline, registry, tmp_path / "audit", "--set",
                      f"prometheus.url=http://127.0.0.1:{free_port()}",
                      "--set", f"warehouse.dir={tmp_path / 'warehouse'}", *secured.settings("http."))
    login = secured.logins["reader"]
    audit = AuditProcess(tmp_path, args, login=login, ca_file=secured.ca_file).wait_ready()
    errors: list[str] = []
    try:
        windows = wait_until(lambda: all_reconciled(audit, stored, ("producer", "datacenter", "mirror", "offline")),
                             90, interval=0.3, message="the pipeline reconciled")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(audit.url + "/api/windows", timeout=5, context=audit.context)
        assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Basic realm=")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                # Chromium does not know our CA (its trust store is the system's NSS one); urllib checked it above.
                page = browser.new_page(viewport={"width": 1400, "height": 1800}, ignore_https_errors=True,
                                        http_credentials={"username": login[0], "password": login[1]})
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(audit.url + "/")
                page.wait_for_function("document.querySelectorAll('#grid .grid-row').length >= %d"
                                       % len(EVENT_TOPICS), timeout=30_000)
                shown = page.eval_on_selector_all("#grid .grid-row", "rows => rows.map(r => r.dataset.topic)")
                assert sorted(set(shown)) == sorted(EVENT_TOPICS)
                assert "Prometheus unreachable" in page.inner_text("#alerts")
                page.wait_for_function("document.getElementById('etl-runs').textContent.includes('succeeded')",
                                       timeout=15_000)
                assert "120" in page.inner_text("#etl-runs")
                before = tmp_path / "dashboard-complete.png"
                page.screenshot(path=str(before), full_page=True)
                keep(before)
                assert page.locator("#grid .grid-row[data-topic='PageViewEvent'] .hm").count() == 1
                assert cells(page, "PageViewEvent", 0) == [] and cells(page, "PageViewEvent", 1) == []

                victim = max((w for w in windows if w["topic"] == "PageViewEvent"), key=lambda w: w["windowStart"])
                lost = sorted(str(uuid.uuid4()) for _ in range(2))
                injected = time.monotonic()
                publish_phantom_count(dc1, registry, "PageViewEvent", victim["windowStart"], lost)
                # The mirror set a stray record aside in the same window; the ETL counted a ClickEvent window, so
                # the warehouse tier is expected there and pending until a run that covers it (none will).
                publish_audit_count(offline, registry, audit_count(
                    "PageViewEvent", "mirror", victim["windowStart"], 0, quarantined="too large for the target",
                    withoutId="1", recordId=uuid.uuid4().hex))
                clicks = min(w["windowStart"] for w in windows if w["topic"] == "ClickEvent")
                publish_audit_count(offline, registry, audit_count("ClickEvent", "warehouse", clicks, 0,
                                                                   recordId=uuid.uuid4().hex))
                # Red at the datacenter tier, where the events went missing; amber after it (the mirror quarantined
                # a record besides).
                label = time.strftime("%H:%M:%S", time.gmtime(victim["windowStart"] / 1000))
                wait_until(lambda: cells(page, "PageViewEvent", 0) == [[label, ["datacenter"]]]
                           and cells(page, "PageViewEvent", 1) == [[label, ["mirror", "offline"]]],
                           60, interval=0.5, message=lambda: f"the window with the loss turned red at the datacenter "
                                                             f"tier (red: {cells(page, 'PageViewEvent', 0)}, amber: "
                                                             f"{cells(page, 'PageViewEvent', 1)}, {errors})")
                grey = wait_until(lambda: cells(page, "ClickEvent", 2), 60, interval=0.5,
                                  message="the warehouse pending for ClickEvent")
                assert {tiers == ["warehouse"] for _, tiers in grey} == {True}
                click_cell(page, "PageViewEvent", 0)
                page.wait_for_function("document.getElementById('named').textContent.includes('lost at')",
                                       timeout=15_000)
                # (-s shows it) from the loss's count published to the named events on the page, grace 0.5 s
                print(f"injected loss named on the dashboard after {time.monotonic() - injected:.1f}s")
                named = page.inner_text("#named")
                assert "lost at datacenter (the first tier without them): 2" in named
                assert all(event in named for event in lost)
                assert "quarantined at mirror (too large for the target): 1 (1 without an event id)" in named
                assert "identity at offline: created" in named and ": holds" in named
                after = tmp_path / "dashboard-loss-named.png"
                page.screenshot(path=str(after), full_page=True)
                keep(after)
                click_cell(page, "ClickEvent", 2)
                page.wait_for_function("document.getElementById('named').textContent.includes('pending at')",
                                       timeout=15_000)
                assert "pending at warehouse (not compared yet): waiting for an ETL run started after" in \
                    page.inner_text("#named")
                assert "pending" in page.inner_text("#status")
            finally:
                browser.close()
        assert errors == []
        assert audit.stop() == 0
    finally:
        audit.kill()


def cells(page, topic: str, z: int) -> list:
    """[window label, [tiers]] of ``topic``'s heatmap, per window that has cells of colour ``z`` (0 red: lost, 1
    amber: quarantined, duplicated or short, 2 grey: pending, 3 green)."""
    return page.evaluate("""([topic, z]) => {
        const row = document.querySelector(`#grid .grid-row[data-topic='${topic}']`);
        const trace = row.data[0];
        return trace.x.map((label, i) => [label, trace.y.filter((tier, j) => trace.z[j][i] === z)])
                      .filter(([, tiers]) => tiers.length > 0);
    }""", [topic, z])


def click_cell(page, topic: str, z: int) -> None:
    """Click the first cell of colour ``z`` the way a user would, at its place on the heatmap."""
    box = page.evaluate("""([topic, z]) => {
        const row = document.querySelector(`#grid .grid-row[data-topic='${topic}']`);
        const trace = row.data[0];
        const y = trace.z.findIndex(r => r.includes(z));
        const x = trace.z[y].indexOf(z);
        const layout = row._fullLayout;
        const rect = row.getBoundingClientRect();
        return {x: rect.left + layout.margin.l + layout.xaxis.l2p(x),
                y: rect.top + layout.margin.t + layout.yaxis.l2p(y)};
    }""", [topic, z])
    page.mouse.click(box["x"], box["y"])

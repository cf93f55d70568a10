"""`python -m pipeline status` without a deployment: the text and exit code of status documents given as plain data,
the figures made of the sources' answers, and a source that does not answer."""

from __future__ import annotations

import http.client
import http.server
import urllib.error
import urllib.request
import threading
from typing import Any, Iterator

import pytest

from infra.deployment.status import (
    EXIT_NOT_RUNNING,
    SourceError,
    alerts_figure,
    audit_figure,
    exit_code,
    get_json,
    vector_by_label,
)
from infra.deployment.status_text import duration, render
from tests.support.ports import free_port

NOW = 1_795_400_000.0  # 2026-11-23 02:13:20Z
NAMES = ("zookeeper-1", "broker-dc1-1", "mirror", "etl", "emulators-dc1")


def process(name: str, state: str = "RUNNING", healthy: bool | None = True) -> dict[str, Any]:
    running = state == "RUNNING"
    return {"name": name, "kind": name.split("-")[0], "stage": "services", "state": state,
            "pid": 4000 + len(name) if running else None, "uptime_s": 3725.0 if running else None,
            "description": "pid 1, uptime 1:02:05" if running else "Nov 23 04:00 AM",
            "healthy": healthy if running else None, "health": f"{name} answers"}


def window(start: int, topic: str = "PageViewEvent", datacenter: str = "dc1", state: str = "complete",
           pending: dict[str, Any] | None = None, **completeness: float | None) -> dict[str, Any]:
    """A window as the audit's /api/windows summarises it."""
    ratios = {"producer": 1.0, "datacenter": 1.0, "mirror": 1.0, "offline": 1.0, **completeness}
    return {"topic": topic, "datacenter": datacenter, "windowStart": start, "windowEnd": start + 60_000,
            "state": state, "counts": {tier: 10 for tier in ratios}, "completeness": ratios, "pending": pending or {},
            "lostEvents": {}, "duplicatedEvents": {}, "unexpectedEvents": {}, "quarantinedEvents": {}, "namedEvents": 0,
            "namedTiers": [],
            "undecoded": [], "unaccounted": False}


def document(processes: list[dict[str, Any]] | None = None, **figures: dict[str, Any]) -> dict[str, Any]:
    starts = [1_795_399_800_000 + 60_000 * i for i in range(3)]
    defaults = {
        "events_per_second": {"value": {"dc1": 39.84, "dc2": None}},
        "mirror_lag": {"value": {"dc1": 12.0, "dc2": 0.0}},
        "etl": {"value": {"run_id": "20261123T021100000-abcdef", "started_at": NOW - 140, "outcome": "succeeded",
                          "rows": 4321, "duration_s": 8.25, "error": None, "last_success_at": NOW - 140}},
        "audit": {"value": audit_figure({"threshold": 0.999}, [window(s) for s in starts])},
        "alerts": {"value": {"firing": [], "pending": 0}},
    }
    return {"time": NOW, "topology": "/t/topology.yml", "var_dir": "/t",
            "supervisord": {"pid": 99, "config": "/t/s.conf"},
            "processes": processes if processes is not None else [process(name) for name in NAMES],
            "figures": {**defaults, **figures}}


def test_every_process_running_and_healthy_exits_0_and_every_process_and_figure_is_shown() -> None:
    doc = document()
    text = render(doc)
    assert exit_code(doc) == 0
    lines = text.splitlines()
    for name in NAMES:
        row = next(line for line in lines if line.startswith(name + " "))
        assert row.split()[1:5] == ["RUNNING", str(4000 + len(name)), "1:02:05", "ok"], row
    assert "events/s      dc1 39.8   dc2 no data" in text
    assert "mirror lag    dc1 12 records   dc2 0 records" in text
    assert "last ETL run  2026-11-23 02:11:00Z (0:02:20 ago): succeeded, 4321 rows in 8.2s " \
           "(run 20261123T021100000-abcdef)" in text
    assert "02:12:00-02:13:00  producer 1.000  datacenter 1.000  mirror 1.000  offline 1.000" in text
    assert "incomplete windows: 0 of 3 reconciled" in text
    assert "alerts        none firing" in text


@pytest.mark.parametrize("state, healthy", [("STOPPED", None), ("BACKOFF", None), ("FATAL", None), ("ABSENT", None),
                                            ("RUNNING", False)])
def test_a_process_not_running_or_not_healthy_exits_1_and_is_shown_so(state: str, healthy: bool | None) -> None:
    doc = document([process("zookeeper-1"), process("mirror", state, healthy), process("etl")])
    assert exit_code(doc) == 1
    row = next(line for line in render(doc).splitlines() if line.startswith("mirror "))
    assert row.split()[1] == state
    if state == "RUNNING":
        assert "FAILING  mirror answers" in row
    else:
        assert row.split()[2:5] == ["-", "-", "-"]


def test_supervisord_not_running_is_one_line_and_exit_3() -> None:
    doc = {**document(), "supervisord": None, "processes": [], "figures": {}}
    assert exit_code(doc) == EXIT_NOT_RUNNING == 3
    assert render(doc) == "supervisord is not running for /t: the deployment is down (`make pipeline-up` starts it)"


def test_a_source_that_does_not_answer_is_shown_as_such() -> None:
    error = "Prometheus at http://127.0.0.1:9090/api/v1/query does not answer ([Errno 111] Connection refused)"
    text = render(document(events_per_second={"error": error}, alerts={"error": error},
                           audit={"error": "the audit at http://127.0.0.1:8090/api/settings answered HTTP 500"}))
    assert f"events/s      not known: {error}" in text
    assert f"alerts        not known: {error}" in text
    assert "audit         not known: the audit at http://127.0.0.1:8090/api/settings answered HTTP 500" in text
    assert "Traceback" not in text


def test_a_failed_etl_run_shows_its_error_and_the_last_success() -> None:
    failed = {"run_id": "r2", "started_at": NOW - 30, "outcome": "failed", "rows": 0, "duration_s": 1.5,
              "error": "EtlError: no broker answers", "last_success_at": NOW - 3600}
    text = render(document(etl={"value": failed}))
    assert "failed, 0 rows in 1.5s (run r2)" in text
    assert "error: EtlError: no broker answers" in text
    assert "last success: 2026-11-23 01:13:20Z (1:00:00 ago)" in text
    assert "last ETL run  no run recorded yet" in render(document(etl={"value": None}))


def test_audit_figure_shows_the_newest_windows_pending_tiers_with_their_lag_and_what_is_named_per_tier() -> None:
    minute = 60_000
    windows = [window(i * minute, topic) for i in range(8) for topic in ("PageViewEvent", "ClickEvent")]
    windows += [window(8 * minute, "PageViewEvent", "dc1", "incomplete", mirror=0.98, offline=0.98),
                window(8 * minute, "ClickEvent", state="pending", offline=0.5,
                       pending={"offline": {"lagRecords": 1200, "waitingFor": "..."}}),
                window(9 * minute, "ClickEvent", "dc2", "pending", offline=0.2,
                       pending={"offline": {"lagRecords": 3400, "waitingFor": "..."}}),
                {**window(9 * minute, "PageViewEvent", "dc2", "incomplete", warehouse=0.9),
                 "lostEvents": {"producer": 2}, "duplicatedEvents": {"offline": 1},
                 "unexpectedEvents": {"datacenter": 1},
                 "quarantinedEvents": {"warehouse": {"unknown schema id": 1}}, "unaccounted": True}]
    figure = audit_figure({"threshold": 0.999}, windows)
    assert (figure["windows"], figure["incomplete"], figure["pending"], figure["unaccounted"]) == (20, 2, 2, 1)
    assert [w["window_start"] for w in figure["recent"]] == [i * minute for i in range(5, 10)]
    assert figure["recent"][3]["completeness"] == {"producer": 1.0, "datacenter": 1.0, "mirror": 0.98,
                                                   "offline": 0.98}
    assert figure["recent"][3]["pending"] == ["offline"]
    assert figure["pending_tiers"] == {"offline": {"windows": 2, "lag_records": 3400, "oldest": 8 * minute}}
    assert figure["named"] == [
        {"topic": "PageViewEvent", "datacenter": "dc2", "window_start": 9 * minute, "tier": tier, "lost": lost,
         "duplicated": duplicated, "unexpected": unexpected, "quarantined": quarantined, "decoded": True}
        for tier, lost, duplicated, unexpected, quarantined in (
            ("producer", 2, 0, 0, {}), ("datacenter", 0, 0, 1, {}), ("offline", 0, 1, 0, {}),
            ("warehouse", 0, 0, 0, {"unknown schema id": 1}))]
    text = render(document(audit={"value": figure}))
    assert "00:08:00-00:09:00  producer 1.000  datacenter 1.000  mirror 0.980  offline pending" in text
    assert "incomplete windows: 2 of 20 reconciled; 2 pending, 1 unaccounted for; 1 name lost, duplicated, " \
           "unexpected or quarantined events" in text
    assert "pending at offline: 2 window(s) since 00:08:00, 3400 records behind (lag, not loss)" in text
    assert "PageViewEvent dc2 1970-01-01 00:09:00 at producer: 2 lost" in text
    # An event no producer created, which the ETL then could not load: unexpected, and quarantined.
    assert "PageViewEvent dc2 1970-01-01 00:09:00 at datacenter: 1 unexpected (created by no audited producer)" in text
    assert "PageViewEvent dc2 1970-01-01 00:09:00 at warehouse: 1 quarantined (unknown schema id)" in text
    with pytest.raises(SourceError):
        audit_figure({"threshold": 0.999}, [{"windowStart": 0}])


def test_alerts_figure_lists_the_firing_ones_grouped_by_name_and_counts_the_pending() -> None:
    def alert(name: str, state: str, **labels: str) -> dict[str, Any]:
        return {"labels": {"alertname": name, "severity": "critical", **labels}, "state": state,
                "annotations": {"summary": f"{name} on {labels}"}, "activeAt": "2026-11-23T02:10:00Z"}

    answer = {"status": "success", "data": {"alerts": [
        alert("TargetDown", "firing", job="mirror", instance="127.0.0.1:9311"),
        alert("AuditEventsLost", "firing", topic="ClickEvent", tier="mirror"),
        alert("AuditEventsLost", "firing", topic="PageViewEvent", tier="mirror"),
        alert("KafkaNoActiveController", "pending", cluster="dc1")]}}
    figure = alerts_figure(answer)
    assert [a["name"] for a in figure["firing"]] == ["AuditEventsLost", "AuditEventsLost", "TargetDown"]
    assert figure["firing"][2]["labels"] == {"instance": "127.0.0.1:9311", "job": "mirror"}
    assert figure["pending"] == 1
    text = render(document(alerts={"value": figure}))
    assert "alerts        3 firing (1 pending):" in text
    assert "AuditEventsLost (critical) tier=mirror,topic=ClickEvent: AuditEventsLost on" in text
    assert "(and 1 more)" in text
    assert "TargetDown (critical) instance=127.0.0.1:9311,job=mirror" in text
    with pytest.raises(SourceError, match="bad query"):
        alerts_figure({"status": "error", "error": "bad query"})
    with pytest.raises(SourceError):
        alerts_figure({"status": "success", "data": {}})


def test_a_vector_by_label_names_what_has_no_sample_and_rejects_a_strange_result() -> None:
    result = [{"metric": {"datacenter": "dc1"}, "value": [1.0, "40.5"]}]
    assert vector_by_label(result, "datacenter", ["dc1", "dc2"]) == {"dc1": 40.5, "dc2": None}
    with pytest.raises(SourceError):
        vector_by_label([{"metric": {"datacenter": "dc1"}}], "datacenter", ["dc1"])


def test_durations() -> None:
    assert [duration(s) for s in (None, 0, 5.9, 3725, 90_061)] == ["-", "0:00:00", "0:00:05", "1:02:05", "1d 1:01:01"]


@pytest.fixture
def http_server() -> Iterator[int]:
    """A local HTTP server answering /json with JSON, /text with text and /fail with HTTP 500."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = {"/json": (200, b'{"a": 1}'), "/text": (200, b"not json")}.get(self.path, (500, b""))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_get_json_says_in_one_line_what_did_not_answer(http_server: int) -> None:
    base = f"http://127.0.0.1:{http_server}"
    assert get_json(f"{base}/json", "the audit") == {"a": 1}
    with pytest.raises(SourceError, match=r"^the audit at .*/fail answered HTTP 500$"):
        get_json(f"{base}/fail", "the audit")
    with pytest.raises(SourceError, match=r"^the audit at .*/text did not answer JSON$"):
        get_json(f"{base}/text", "the audit")
    closed = free_port()
    with pytest.raises(SourceError, match=rf"^Prometheus at http://127.0.0.1:{closed}/x does not answer \(.*refused"):
        get_json(f"http://127.0.0.1:{closed}/x", "Prometheus")


@pytest.mark.parametrize("error", [http.client.HTTPException(), urllib.error.URLError(ConnectionResetError())])
def test_a_source_failing_without_a_message_is_named_by_its_type(monkeypatch: pytest.MonkeyPatch,
                                                                  error: Exception) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(urllib.request, "urlopen", fail)
    with pytest.raises(SourceError, match=r"^the audit at http://x/ does not answer \((HTTPException|"
                                          r"ConnectionResetError)\)$"):
        get_json("http://x/", "the audit")

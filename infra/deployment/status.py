"""`status`: every process of the deployment (supervisord's state, pid, uptime, its health check) and the key
figures (events/s per datacenter, mirror lag, the last ETL run, audit completeness, alerts firing).

:func:`gather` asks supervisord, the health checks and each source of figures, concurrently, and returns one
plain document (what ``--json`` prints); :mod:`infra.deployment.status_text` turns that document into text. A
source that does not answer is a figure ``{"error": "..."}`` in the document, never an exception. Exit code: 0
when every process is RUNNING and healthy, 1 otherwise, 3 when supervisord is not running.

Where the figures come from:

- events/s: Prometheus, ``rate(emulator_events_acknowledged_total[1m])`` of the emulators (job ``emulator``)
  summed by ``datacenter``: events the datacenter's cluster acknowledged.
- mirror lag: Prometheus, ``kafka_consumergroup_lag`` of the mirror's group as the audit measures it from the
  outside (the group's committed offsets in each source's ZooKeeper against the partitions' latest offsets), per
  source cluster. The mirror's own ``mirror_lag_records`` covers only the partitions it owns at the moment and
  vanishes with it; the outside view keeps counting while the mirror is down, which is when it matters.
- the last ETL run: the run history in the warehouse (:class:`pipeline.etl_runs.RunHistory`).
- audit: the audit's JSON API (``/api/settings`` and ``/api/windows``, whose summaries say per window its state,
  the tiers pending with their lag, and how many events are named lost, duplicated, unexpected and quarantined per
  tier).
- alerts: Prometheus's ``/api/v1/alerts``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
import urllib.error
import urllib.parse
import xmlrpc.client
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from infra.deployment.programs import HttpAccess, Program, http_get, programs
from infra.deployment.supervisor import ProcessInfo, Supervisor
from infra.deployment.topology import Topology, load
from pipeline.error_text import describe_error

__all__ = ["EXIT_NOT_RUNNING", "SourceError", "add_parser", "alerts_figure", "audit_figure", "exit_code", "gather",
           "process_rows", "vector_by_label"]

EXIT_HEALTHY, EXIT_UNHEALTHY, EXIT_NOT_RUNNING = 0, 1, 3
HTTP_TIMEOUT_S = 5.0
RECENT_WINDOWS = 5
NAMED_WINDOWS = 10
ABSENT = "ABSENT"  # a program of the topology supervisord does not know (its configuration is older)


class SourceError(RuntimeError):
    """A source of figures did not answer, or answered something else than expected (the message says which)."""


def add_parser(subparsers: argparse._SubParsersAction,
               add_topology_option: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``status`` on ``subparsers``."""
    text = "every process of the deployment, its health, and the key figures"
    parser = subparsers.add_parser(
        "status", help=text,
        description="Every process of the deployment with supervisord's state, pid, uptime and its health check; "
                    "events/s per datacenter, mirror lag, the last ETL run, audit completeness and the alerts "
                    "firing. Exit code 0 when every process runs and is healthy, 1 otherwise, 3 when supervisord "
                    "is not running.")
    add_topology_option(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")
    parser.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace) -> int:
    """Print the status of the deployment of ``args.topology`` (text, or JSON with ``--json``); the exit code."""
    from infra.deployment.status_text import render

    document = gather(load(args.topology))
    if args.json:
        print(json.dumps(document, indent=1))
    else:
        print(render(document))
    return exit_code(document)


def exit_code(document: Mapping[str, Any]) -> int:
    """0 every process RUNNING and healthy, 1 otherwise, 3 supervisord not running."""
    if document["supervisord"] is None:
        return EXIT_NOT_RUNNING
    return EXIT_HEALTHY if all(p["state"] == "RUNNING" and p["healthy"] for p in document["processes"]) \
        else EXIT_UNHEALTHY


def gather(topology: Topology) -> dict[str, Any]:
    """The status document of ``topology``'s deployment (see the module's docstring)."""
    now = time.time()
    supervisor = Supervisor(topology)
    document: dict[str, Any] = {"time": now, "topology": str(topology.path), "var_dir": str(topology.var_dir),
                                "supervisord": None, "processes": [], "figures": {}}
    try:
        if not supervisor.running():
            return document
        infos = {info.name: info for info in supervisor.infos()}
    except (OSError, xmlrpc.client.Error):
        return document  # supervisord went away between the two questions
    document["supervisord"] = {"pid": supervisor.pid(), "config": str(supervisor.config_path)}
    everything = programs(topology)
    figures: dict[str, Callable[[], Any]] = {
        "events_per_second": lambda: events_per_second(topology),
        "mirror_lag": lambda: mirror_lag(topology),
        "etl": lambda: last_etl_run(topology),
        "audit": lambda: audit_figure(*audit_answers(topology)),
        "alerts": lambda: alerts_figure(get_json(f"{topology.prometheus_url}/api/v1/alerts", "Prometheus")),
    }
    with ThreadPoolExecutor(max_workers=len(everything) + len(figures)) as pool:
        running = [p for p in everything if p.name in infos and infos[p.name].running]
        checks = {p.name: pool.submit(p.health, infos[p.name].started) for p in running}
        answers = {name: pool.submit(_figure, source) for name, source in figures.items()}
        health = {name: future.result() for name, future in checks.items()}
        document["figures"] = {name: future.result() for name, future in answers.items()}
    document["processes"] = process_rows(everything, infos, health, now)
    return document


def process_rows(everything: list[Program], infos: Mapping[str, ProcessInfo], health: Mapping[str, bool],
                 now: float) -> list[dict[str, Any]]:
    """One row per program: supervisord's state, pid, uptime and description, and its health (None: not checked,
    the program is not running)."""
    rows = []
    for program in everything:
        info = infos.get(program.name)
        running = info is not None and info.running
        rows.append({"name": program.name, "kind": program.kind, "stage": program.stage,
                     "state": info.state if info is not None else ABSENT,
                     "pid": info.pid if running else None,
                     "uptime_s": round(now - info.started, 1) if running and info.started else None,
                     "description": info.description if info is not None else "not in supervisord's configuration "
                                                                               "(run up again)",
                     "healthy": health.get(program.name) if running else None,
                     "health": program.health.description})
    return rows


def _figure(source: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"value": source()}
    except SourceError as exc:
        return {"error": str(exc)}


# -- the sources ----------------------------------------------------------------------------------------------

def get_json(url: str, what: str, timeout: float = HTTP_TIMEOUT_S, access: HttpAccess | None = None) -> Any:
    """The JSON answer of GET ``url`` (over HTTPS as ``access`` says, when given); SourceError naming ``what`` when
    it does not answer or answers no JSON."""
    try:
        return json.loads(http_get(url, access, timeout))
    except urllib.error.HTTPError as exc:
        raise SourceError(f"{what} at {url} answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        reason = describe_error(exc.reason) if isinstance(exc.reason, BaseException) else exc.reason
        raise SourceError(f"{what} at {url} does not answer ({reason})") from None
    except (OSError, http.client.HTTPException) as exc:
        raise SourceError(f"{what} at {url} does not answer ({describe_error(exc)})") from None
    except ValueError:
        raise SourceError(f"{what} at {url} did not answer JSON") from None


def prometheus_query(topology: Topology, query: str) -> list[dict[str, Any]]:
    """The instant vector ``query`` evaluates to now (Prometheus's result list)."""
    url = f"{topology.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    answer = get_json(url, "Prometheus")
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else None
        raise SourceError(f"Prometheus could not evaluate {query}: {error or 'unexpected answer'}")
    return answer["data"]["result"]


def vector_by_label(result: list[dict[str, Any]], label: str, names: list[str]) -> dict[str, float | None]:
    """Each of ``names`` with the value of the sample whose ``label`` is that name (None: no such sample)."""
    try:
        found = {sample["metric"].get(label): float(sample["value"][1]) for sample in result}
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise SourceError("Prometheus answered an unexpected result") from None
    return {name: found.get(name) for name in names}


def events_per_second(topology: Topology) -> dict[str, float | None]:
    """Events per second the datacenter's cluster acknowledged to its emulators, over the last minute."""
    names = [dc.name for dc in topology.datacenters if dc.emulators is not None]
    result = prometheus_query(topology, 'sum by (datacenter) (rate(emulator_events_acknowledged_total'
                                        '{job="emulator"}[1m]))')
    return vector_by_label(result, "datacenter", names)


def mirror_lag(topology: Topology) -> dict[str, float | None]:
    """Records of each datacenter the mirror's group has yet to commit past (the audit's measure)."""
    group = topology.mirror.settings.get("group.id", "mirror")
    result = prometheus_query(topology, f'sum by (cluster) (kafka_consumergroup_lag{{job="audit",group="{group}"}})')
    return vector_by_label(result, "cluster", [dc.name for dc in topology.datacenters])


def last_etl_run(topology: Topology) -> dict[str, Any] | None:
    """The newest run in the ETL's history (None: no run recorded yet), with the start of the newest success."""
    from pipeline.etl_runs import SUCCEEDED, RunHistory

    group = topology.etl.settings.get("group.id", "etl")
    history = RunHistory(topology.warehouse, group)
    try:
        runs = history.runs(1)
        if not runs:
            return None
        run = runs[0]
        success = run if run.outcome == SUCCEEDED else history.last_success()
    except (OSError, ValueError, TypeError) as exc:
        raise SourceError(f"the ETL's run history in {history.directory} cannot be read ({exc})") from None
    return {"run_id": run.run_id, "started_at": run.started_at, "outcome": run.outcome, "rows": run.rows,
            "duration_s": run.duration_s, "error": (run.error or "").strip().splitlines()[0] if run.error else None,
            "last_success_at": success.started_at if success is not None else None}


def audit_answers(topology: Topology) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The audit's settings and every retained window's summary."""
    base, access = topology.dashboard_url.rstrip("/"), HttpAccess.of(topology)
    settings = get_json(f"{base}/api/settings", "the audit", access=access)
    windows = get_json(f"{base}/api/windows", "the audit", access=access)
    try:
        return settings, list(windows["windows"])
    except (KeyError, TypeError):
        raise SourceError("the audit answered an unexpected /api/windows") from None


def audit_figure(settings: Mapping[str, Any], windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The audit's results in figures: completeness per tier of the newest windows (the worst topic and datacenter
    of each window; a tier still pending in one of them is shown pending), how many windows are incomplete, pending
    and unaccounted for, the tiers pending with their lag, and the newest windows naming events (lost, duplicated,
    unexpected, quarantined per reason, per tier)."""
    from audit.reconcile import TIERS

    try:
        threshold = float(settings["threshold"])
        worst: dict[tuple[int, int], dict[str, float]] = {}
        waiting: dict[tuple[int, int], set[str]] = {}
        pending_tiers: dict[str, dict[str, Any]] = {}
        states = {"incomplete": 0, "pending": 0, "unaccounted": 0}
        named = []
        for window in windows:
            span = (window["windowStart"], window["windowEnd"])
            pending = window.get("pending") or {}
            ratios = worst.setdefault(span, {})
            for tier, ratio in window["completeness"].items():
                if ratio is not None and tier not in pending:
                    ratios[tier] = min(ratio, ratios.get(tier, ratio))
            waiting.setdefault(span, set()).update(pending)
            states["incomplete"] += window["state"] == "incomplete"
            states["pending"] += window["state"] == "pending"
            states["unaccounted"] += bool(window.get("unaccounted"))
            for tier, wait in pending.items():
                figure = pending_tiers.setdefault(tier, {"windows": 0, "lag_records": None, "oldest": span[0]})
                figure["windows"] += 1
                figure["oldest"] = min(figure["oldest"], span[0])
                if wait.get("lagRecords") is not None:
                    figure["lag_records"] = max(figure["lag_records"] or 0, wait["lagRecords"])
            named += _named(window)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise SourceError("the audit answered an unexpected result") from None
    order = {tier: index for index, tier in enumerate(TIERS)}
    recent = [{"window_start": start, "window_end": end,
               "completeness": dict(sorted(ratios.items(), key=lambda item: order.get(item[0], len(order)))),
               "pending": sorted(waiting[(start, end)], key=lambda t: order.get(t, len(order)))}
              for (start, end), ratios in sorted(worst.items())[-RECENT_WINDOWS:]]
    named.sort(key=lambda n: (n["window_start"], n["topic"], n["datacenter"], order.get(n["tier"], len(order))))
    return {"threshold": threshold, "windows": len(windows), **states,
            "named_windows": len({(n["topic"], n["datacenter"], n["window_start"]) for n in named}),
            "recent": recent, "pending_tiers": dict(sorted(pending_tiers.items(), key=lambda i: order.get(i[0], len(order)))),
            "named": named[-NAMED_WINDOWS:]}


def _named(window: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per tier, what ``window`` (an /api/windows summary) names."""
    lost, duplicated = window.get("lostEvents") or {}, window.get("duplicatedEvents") or {}
    unexpected, quarantined = window.get("unexpectedEvents") or {}, window.get("quarantinedEvents") or {}
    undecoded = {step.split("->")[-1] for step in window.get("undecoded") or []}
    tiers = [t for t in window["counts"]
             if lost.get(t) or duplicated.get(t) or unexpected.get(t) or quarantined.get(t) or t in undecoded]
    return [{"topic": window["topic"], "datacenter": window["datacenter"], "window_start": window["windowStart"],
             "tier": tier, "lost": lost.get(tier, 0), "duplicated": duplicated.get(tier, 0),
             "unexpected": unexpected.get(tier, 0),
             "quarantined": dict(sorted((quarantined.get(tier) or {}).items())), "decoded": tier not in undecoded}
            for tier in tiers]


def alerts_figure(answer: Any) -> dict[str, Any]:
    """The alerts firing (name, severity, summary, labels) and how many are pending, from /api/v1/alerts."""
    try:
        if answer.get("status") != "success":
            raise SourceError(f"Prometheus answered /api/v1/alerts with {answer.get('error') or 'an error'}")
        alerts = answer["data"]["alerts"]
        firing = [{"name": a["labels"].get("alertname", "?"), "severity": a["labels"].get("severity"),
                   "summary": a.get("annotations", {}).get("summary"), "active_at": a.get("activeAt"),
                   "labels": {k: v for k, v in sorted(a["labels"].items()) if k not in ("alertname", "severity")}}
                  for a in alerts if a["state"] == "firing"]
        pending = sum(1 for a in alerts if a["state"] == "pending")
    except (KeyError, TypeError, AttributeError):
        raise SourceError("Prometheus answered an unexpected /api/v1/alerts") from None
    return {"firing": sorted(firing, key=lambda a: (a["name"], sorted(a["labels"].items()))), "pending": pending}


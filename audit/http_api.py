"""The audit's HTTP service (aiohttp, on its own thread): the dashboard at ``/``, Prometheus ``/metrics``, and
the reconciliation results as JSON -- ``/api/windows`` (every retained window: its state, counts, completeness, the
tiers pending and what they wait for, how many events are named lost, duplicated, unexpected and quarantined per
tier, the identity) and ``/api/windows/{topic}/{datacenter}/{start}`` (one window with its named events, see
:mod:`audit.results`). ``/api/health`` answers 200 while every reader counts, 503 once one stopped (the service is
going down; ``/metrics`` answers 503 then too). ``/api/prometheus/{query,alerts}`` passes the dashboard's questions
on to the Prometheus server (same origin for the browser; an unreachable Prometheus is an ``error`` answer, not a
failed request) -- only the queries the dashboard asks (:data:`DASHBOARD_QUERIES`), any other is refused with 403.

With ``http.authentication.method=BASIC`` every path (but ``http.authentication.skip.paths``) needs a user of the
users file (401 with the challenge the browser answers with its login prompt); /metrics too: Prometheus scrapes it
with its ``basic_auth``. With ``http.ssl.keystore.location`` it speaks HTTPS."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import aiohttp
import plotly
from aiohttp import web

from audit.reconcile import TIERS
from audit.service import AuditService
from pipeline.error_text import describe_error
from pipeline.etl_runs import RunHistory
from pipeline.security.http_auth import basic_auth_middleware
from pipeline.security.http_settings import HttpSecurity
from pipeline.service.metrics_server import metrics_response

__all__ = ["AuditHttpServer"]


_DASHBOARD = Path(__file__).resolve().parent / "dashboard"
_PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
_PROMETHEUS_ENDPOINTS = {"query": "/api/v1/query", "alerts": "/api/v1/alerts"}
PROMETHEUS_TIMEOUT_S = 5.0
# The PromQL expressions dashboard.js sends, exactly: the proxy forwards these and nothing else.
DASHBOARD_QUERIES = frozenset({
    "sum by (cluster, group) (kafka_consumergroup_lag)",
    *(f"histogram_quantile({q}, sum by (le, tier) (rate(audit_tier_latency_seconds_bucket[5m])))"
      for q in ("0.5", "0.99")),
    "etl_last_success_timestamp_seconds", "etl_last_run_rows", "etl_last_run_duration_seconds",
    "sum by (group) (etl_runs_total)", "etl_consecutive_failures",
})


_DETAIL = ("discrepancies", "lost", "duplicated", "unexpected", "quarantined")


def _summary(data: dict[str, Any]) -> dict[str, Any]:
    """A window without its named ids: how many per tier (and reason), the tiers naming something, the steps left
    undecoded."""
    lost = {tier: sum(ids.values()) + data.get("lostByCount", {}).get(tier, 0)
            for tier, ids in data.get("lost", {}).items()}
    for tier, n in data.get("lostByCount", {}).items():
        lost.setdefault(tier, n)
    duplicated = {tier: sum(ids.values()) for tier, ids in data.get("duplicated", {}).items()}
    unexpected = {tier: sum(ids.values()) for tier, ids in (data.get("unexpected") or {}).items()}
    quarantined: dict[str, dict[str, int]] = {}
    for q in data.get("quarantined", []):
        quarantined.setdefault(q["tier"], {})[q["reason"]] = q["count"] + q["withoutId"]
    undecoded = [f"{d['earlier']}->{d['later']}" for d in data["discrepancies"] if not d["decoded"]]
    named_tiers = {*lost, *duplicated, *unexpected, *quarantined, *(u.split("->")[1] for u in undecoded)}
    return {**{k: v for k, v in data.items() if k not in _DETAIL}, "lostEvents": lost, "duplicatedEvents": duplicated,
            "unexpectedEvents": unexpected, "quarantinedEvents": quarantined,
            "namedEvents": sum(lost.values()) + sum(duplicated.values()) + sum(unexpected.values())
            + sum(n for reasons in quarantined.values() for n in reasons.values()),
            "namedTiers": sorted(named_tiers, key=_tier_order), "undecoded": undecoded,
            "unaccounted": bool(data.get("identity")) and not data["identity"]["holds"]}


def _tier_order(tier: str) -> int:
    return TIERS.index(tier) if tier in TIERS else len(TIERS)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _forwarded(endpoint: str, query: Any) -> dict[str, str] | None:
    """The parameters passed on to Prometheus for a dashboard request, or None when it is not one the dashboard
    makes (an exact query of :data:`DASHBOARD_QUERIES`; alerts take none)."""
    if endpoint == "alerts":
        return {} if not query else None
    if set(query) != {"query"} or len(query.getall("query")) != 1 or query["query"] not in DASHBOARD_QUERIES:
        return None
    return {"query": query["query"]}


class AuditHttpServer:
    """Serves ``service``'s results and metrics on 127.0.0.1/0.0.0.0:``port`` until ``stop``."""

    def __init__(self, service: AuditService, host: str, port: int) -> None:
        self.service = service
        self.security = HttpSecurity.from_config(service.config, "http.")
        # Read here, so that a wrong users file or keystore fails the start with its error.
        self._authenticator = self.security.authenticator("audit", service.metrics.failed_logins)
        self._tls = self.security.ssl_context() if self.security.keystore else None
        self.host = host
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-http", daemon=True)
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None

    def start(self) -> "AuditHttpServer":
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise OSError(f"cannot serve HTTP on {self.host}:{self.port}: {self._error}")
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        middlewares = []
        if self._authenticator is not None:
            middlewares.append(basic_auth_middleware(self._authenticator, _error,
                                                     skip_paths=self.security.skip_paths))
        app = web.Application(middlewares=middlewares)
        app.router.add_get("/", self._file(_DASHBOARD / "index.html", "text/html"))
        app.router.add_get("/static/dashboard.js", self._file(_DASHBOARD / "dashboard.js", "application/javascript"))
        app.router.add_get("/static/plotly.min.js", self._file(_PLOTLY_JS, "application/javascript"))
        app.router.add_get("/api/settings", self._settings)
        app.router.add_get("/api/health", self._health)
        app.router.add_get("/api/prometheus/{endpoint}", self._prometheus)
        app.router.add_get("/api/etl/runs", self._etl_runs)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/api/windows", self._windows)
        app.router.add_get("/api/windows/{topic}/{datacenter}/{start}", self._window)
        self._runner = web.AppRunner(app, access_log=None)
        try:
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._tls)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    @staticmethod
    def _file(path: Path, content_type: str) -> Any:
        async def serve(request: web.Request) -> web.Response:
            return web.Response(body=path.read_bytes(), content_type=content_type,
                                headers={"Cache-Control": "no-cache"})
        return serve

    async def _settings(self, request: web.Request) -> web.Response:
        config = self.service.config
        return web.json_response({"threshold": config["completeness.threshold"], "windowMs": config["window.ms"],
                                  "graceMs": config["grace.ms"]})

    async def _etl_runs(self, request: web.Request) -> web.Response:
        """The ETL's newest runs from its history in the warehouse (``{"runs": null}`` without a warehouse)."""
        config = self.service.config
        if not config["warehouse.dir"]:
            return web.json_response({"runs": None})
        runs = RunHistory(config["warehouse.dir"], config["etl.group"]).runs(20)
        return web.json_response({"runs": [{"runId": r.run_id, "startedAt": r.started_at, "outcome": r.outcome,
                                            "rows": r.rows, "bytes": r.bytes, "durationS": r.duration_s,
                                            "skipped": sum(s.count for s in r.skipped),
                                            "error": (r.error or "").splitlines()[0] if r.error else None}
                                           for r in runs]})

    async def _prometheus(self, request: web.Request) -> web.Response:
        path = _PROMETHEUS_ENDPOINTS.get(request.match_info["endpoint"])
        if path is None:
            raise web.HTTPNotFound(text="only query and alerts are passed on")
        params = _forwarded(request.match_info["endpoint"], request.query)
        if params is None:
            return _error(403, "only the dashboard's own queries are passed on to Prometheus")
        url = self.service.config["prometheus.url"].rstrip("/") + path
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROMETHEUS_TIMEOUT_S)) as session:
                async with session.get(url, params=params) as answer:
                    return web.json_response(await answer.json(content_type=None))
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            return web.json_response({"status": "error", "error": f"Prometheus at {url}: {describe_error(exc)}"})

    async def _health(self, request: web.Request) -> web.Response:
        health = self.service.health()
        return web.json_response(health, status=200 if health["healthy"] else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return metrics_response(self.service.metrics.registry, healthy=self.service.health()["healthy"])

    async def _windows(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            raise web.HTTPBadRequest(text="since is milliseconds since the epoch") from None
        with self.service.lock:
            found = [d for k, d in sorted(self.service.results.items())
                     if (topic is None or k.topic == topic) and k.window_start >= since]
        return web.json_response({"windows": [_summary(d) for d in found]})

    async def _window(self, request: web.Request) -> web.Response:
        info = request.match_info
        try:
            start = int(info["start"])
        except ValueError:
            raise web.HTTPBadRequest(text="the window start is milliseconds since the epoch") from None
        with self.service.lock:
            found = [d for key, d in self.service.results.items()
                     if (key.topic, key.datacenter, key.window_start) == (info["topic"], info["datacenter"], start)]
        if found:
            return web.json_response(found[0])
        raise web.HTTPNotFound(text="no reconciled window there")

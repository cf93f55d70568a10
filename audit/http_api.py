"""The audit's HTTP API (aiohttp, on its own thread): Prometheus ``/metrics`` and the reconciliation results
as JSON -- ``/api/windows`` (every retained window: counts, completeness, how many events are named) and
``/api/windows/{topic}/{datacenter}/{start}`` (one window with its named events)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from audit.service import AuditService

__all__ = ["AuditHttpServer"]


def _summary(data: dict[str, Any]) -> dict[str, Any]:
    named = sum(sum(d["missing"].values()) + sum(d["duplicated"].values()) for d in data["discrepancies"])
    return {**{k: v for k, v in data.items() if k != "discrepancies"}, "namedEvents": named,
            "undecoded": [f"{d['earlier']}->{d['later']}" for d in data["discrepancies"] if not d["decoded"]]}


class AuditHttpServer:
    """Serves ``service``'s results and metrics on 127.0.0.1/0.0.0.0:``port`` until ``stop``."""

    def __init__(self, service: AuditService, host: str, port: int) -> None:
        self.service = service
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
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/api/windows", self._windows)
        app.router.add_get("/api/windows/{topic}/{datacenter}/{start}", self._window)
        self._runner = web.AppRunner(app, access_log=None)
        try:
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        except OSError as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _windows(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        since = int(request.query.get("since", "0"))
        rows = [_summary(d) for k, d in sorted(self.service.results.items())
                if (topic is None or k.topic == topic) and k.window_start >= since]
        return web.json_response({"windows": rows})

    async def _window(self, request: web.Request) -> web.Response:
        info = request.match_info
        try:
            start = int(info["start"])
        except ValueError:
            raise web.HTTPBadRequest(text="the window start is milliseconds since the epoch") from None
        for key, data in self.service.results.items():
            if (key.topic, key.datacenter, key.window_start) == (info["topic"], info["datacenter"], start):
                return web.json_response(data)
        raise web.HTTPNotFound(text="no reconciled window there")

"""How a service serves Prometheus's /metrics: prometheus_client's HTTP server, on a thread of its own, bound to the
configured metrics.host and metrics.port (the broker, the emulators, the mirror, the ETL's scheduler).

A service that already answers HTTP with an aiohttp app (the schema registry, the audit) keeps /metrics a route of
that app, answered by :func:`metrics_response`: its one port is what the deployment scrapes and checks, and the
audit's /metrics answers 503 once a reader stopped, as its /api/health does; a second server would add a port to
configure and change what Prometheus scrapes, for nothing gained.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, start_http_server

__all__ = ["MetricsServer", "metrics_response", "serve_metrics", "serving_metrics"]

log = logging.getLogger(__name__)


class MetricsServer:
    """A running /metrics endpoint; :meth:`close` stops it (also as a context manager)."""

    def __init__(self, server: Any, thread: Any) -> None:
        self._server = server
        self._thread = thread
        self.address: tuple[str, int] = tuple(server.server_address[:2])  # type: ignore[assignment]
        self.port: int = self.address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Serve ``registry`` at http://host:port/metrics from a thread until closed. Port 0 picks a free one."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    served = MetricsServer(server, thread)
    log.info("serving Prometheus metrics at http://%s:%d/metrics", host, served.port)
    return served


@contextmanager
def serving_metrics(registry: CollectorRegistry, host: str, port: int | None) -> Iterator[MetricsServer | None]:
    """Serve ``registry`` while the block runs, when ``port`` is set (a metrics.port setting); None otherwise."""
    if port is None:
        yield None
        return
    with serve_metrics(registry, host, port) as served:
        yield served


def metrics_response(registry: CollectorRegistry, *, healthy: bool = True) -> Any:
    """The answer of an aiohttp app's /metrics route: ``registry`` in Prometheus's text format (503 unless
    ``healthy``)."""
    from aiohttp import web

    return web.Response(body=generate_latest(registry), status=200 if healthy else 503,
                        headers={"Content-Type": CONTENT_TYPE_LATEST})

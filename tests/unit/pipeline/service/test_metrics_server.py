"""pipeline.service.metrics_server: /metrics from prometheus_client's server on the configured address."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from pipeline.service.metrics_server import metrics_response, serve_metrics, serving_metrics


def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("skeleton_things", "things", registry=registry).inc(3)
    return registry


def test_serves_the_registry_on_the_address_given_until_closed() -> None:
    with serve_metrics(registry(), "127.0.0.1", 0) as server:
        assert server.address == ("127.0.0.1", server.port) and server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as answer:
            assert b"skeleton_things_total 3.0" in answer.read()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5)


def test_without_a_port_nothing_is_served() -> None:
    with serving_metrics(registry(), "127.0.0.1", None) as server:
        assert server is None
    with serving_metrics(registry(), "127.0.0.1", 0) as server:
        assert server is not None and server.port > 0


def test_an_aiohttp_route_answers_the_same_text_503_when_unhealthy() -> None:
    answer = metrics_response(registry())
    assert answer.status == 200 and b"skeleton_things_total 3.0" in answer.body
    assert answer.headers["Content-Type"].startswith("text/plain")
    assert metrics_response(registry(), healthy=False).status == 503

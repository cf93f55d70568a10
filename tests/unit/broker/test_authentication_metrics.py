"""The SASL authentication counters as Prometheus exports them, by listener and mechanism."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from broker.authentication_metrics import AuthenticationMetrics
from broker.server.sasl_authenticator import AuthenticationStats


def test_counts_by_listener_and_mechanism():
    stats = AuthenticationStats()
    stats.count(stats.succeeded, "SASL_SSL", "SCRAM-SHA-512")
    stats.count(stats.succeeded, "SASL_SSL", "SCRAM-SHA-512")
    stats.count(stats.failed, "SASL_PLAINTEXT", "PLAIN")
    registry = CollectorRegistry()
    registry.register(AuthenticationMetrics(stats))
    text = generate_latest(registry).decode()
    assert 'kafka_server_socket_server_metrics_successful_authentication_total{listener="SASL_SSL",mechanism="SCRAM-SHA-512"} 2.0' in text
    assert 'kafka_server_socket_server_metrics_failed_authentication_total{listener="SASL_PLAINTEXT",mechanism="PLAIN"} 1.0' in text

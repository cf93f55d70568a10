"""AuthenticationMetrics: the listeners' authentications (SASL exchanges, failed TLS handshakes as mechanism SSL) by
outcome, listener and mechanism, for Prometheus.

Kafka's socket-server-metrics ``successful-authentication-total`` and ``failed-authentication-total``, labelled
by listener and mechanism; read from the authenticators' AuthenticationStats at scrape time.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.server.sasl_authenticator import AuthenticationStats


class AuthenticationMetrics(Collector):
    """Counters of successful and failed SASL authentications."""

    def __init__(self, stats: AuthenticationStats) -> None:
        self._stats = stats

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        for name, table, text in (
                ("successful_authentication", self._stats.succeeded,
                 "SASL authentications that succeeded, by listener and mechanism: successful-authentication-total"),
                ("failed_authentication", self._stats.failed,
                 "SASL authentications refused (wrong password, unknown user, unsupported mechanism) and TLS "
                 "handshakes failed (mechanism SSL), by listener and mechanism: failed-authentication-total")):
            family = CounterMetricFamily(f"kafka_server_socket_server_metrics_{name}", text,
                                         labels=["listener", "mechanism"])
            for (listener, mechanism), count in sorted(dict.copy(table).items()):
                family.add_metric([listener, mechanism], count)
            yield family

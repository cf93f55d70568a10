"""AuthenticationMetrics: the SASL listeners' authentications by outcome, listener and mechanism, for Prometheus.

Kafka's socket-server-metrics ``successful-authentication-total`` and ``failed-authentication-total`` of the SASL
exchanges, labelled by listener and mechanism (the socket server's unlabelled failed-authentication counter adds
failed TLS handshakes); read from the authenticators' AuthenticationStats at scrape time.
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
                 "SASL authentications refused (wrong password, unknown user, unsupported mechanism), by listener "
                 "and mechanism: failed-authentication-total")):
            family = CounterMetricFamily(f"kafka_server_sasl_{name}", text,
                                         labels=["listener", "mechanism"])
            for (listener, mechanism), count in sorted(dict.copy(table).items()):
                family.add_metric([listener, mechanism], count)
            yield family

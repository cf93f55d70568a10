"""Scraping a broker process's Prometheus endpoint (metrics.port) in tests."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import BrokerProcess
from tests.support.polling import wait_until

Samples = dict[tuple[str, frozenset], float]
_ENDPOINT = re.compile(r"serving Prometheus metrics at http://([^:]+):(\d+)/metrics")


def metrics_url(broker: BrokerProcess) -> str:
    """The /metrics URL the broker logged at its last start (metrics.port=0 picks the port)."""
    found = wait_until(lambda: _ENDPOINT.findall(broker.log_text()), 10, message="the metrics endpoint in the log")
    host, port = found[-1]
    return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}/metrics"


def scrape(broker: BrokerProcess) -> Samples:
    """Every sample of one scrape, keyed by (sample name, labels)."""
    with urllib.request.urlopen(metrics_url(broker), timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: object) -> float | None:
    """One sample's value by name and labels (None when absent)."""
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))

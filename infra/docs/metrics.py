"""Every service's Prometheus metrics, enumerated from the metric definitions without starting a service.

Each service keeps its metrics in a ``CollectorRegistry`` of its own. Registries built from plain metric objects
are created as the service creates them; the broker's collectors that read live state at scrape time (partitions,
logs, connections, the log cleaner) are given an empty broker's worth of state, so that they name their families.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from audit.metrics import AuditMetrics
from broker.coordinator.coordinator_metrics import GroupCoordinatorMetrics
from broker.coordinator.transaction_metrics import TransactionCoordinatorMetrics
from broker.log.cleaner_metrics import LogCleanerMetrics
from broker.metrics import BrokerMetrics
from broker.state_metrics import BrokerStateCollector
from etl.metrics import EtlMetrics
from infra.docs.markdown import table
from mirror.metrics import MirrorMetrics
from producers.metrics import EmulatorMetrics
from schemas.registry.service import Metrics as RegistryMetrics

__all__ = ["MetricRow", "SERVICES", "metric_rows", "render_metrics"]


@dataclass(frozen=True)
class MetricRow:
    """One metric family as a scrape shows it."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


class _IdleCleaner:
    """A log cleaner that has run no pass."""

    @staticmethod
    def stats() -> dict:
        zero = {key: 0 for key in ("max_buffer_utilization_percent", "max_clean_time_secs", "cleaner_recopy_percent",
                                   "max_dirty_percent", "time_since_last_run_ms", "uncleanable_partitions_count",
                                   "backlog_bytes")}
        return {**zero, "logs": {}, "workers": {}}


def _broker_registry() -> CollectorRegistry:
    """The broker's registry as ``broker.kafka_server`` assembles it, over a broker that hosts nothing."""
    metrics = BrokerMetrics()
    nothing = SimpleNamespace(topic_names=list, hosted_partitions=list, all_logs=dict)
    connections = SimpleNamespace(connection_count=0, connections_created=0, connections_closed=0, client_errors={})
    metrics.registry.register(BrokerStateCollector(0, nothing, nothing, nothing, connections, lambda: False))
    metrics.registry.register(GroupCoordinatorMetrics())
    metrics.registry.register(TransactionCoordinatorMetrics())
    metrics.registry.register(LogCleanerMetrics(_IdleCleaner()))  # type: ignore[arg-type]
    return metrics.registry


# (service, where its metrics are declared, how to build its registry), in the order of the pipeline
SERVICES: tuple[tuple[str, str, Callable[[], CollectorRegistry]], ...] = (
    ("Broker", "broker/metrics.py, broker/state_metrics.py, broker/coordinator/coordinator_metrics.py, "
               "broker/coordinator/transaction_metrics.py, broker/log/cleaner_metrics.py", _broker_registry),
    ("Schema registry", "schemas/registry/service.py", lambda: RegistryMetrics().registry),
    ("Frontend emulators", "producers/metrics.py", lambda: EmulatorMetrics().registry),
    ("Mirror", "mirror/metrics.py", lambda: MirrorMetrics().registry),
    ("ETL", "etl/metrics.py", lambda: EtlMetrics("etl").registry),
    ("Audit", "audit/metrics.py", lambda: AuditMetrics().registry),
)


def _exposed_name(name: str, kind: str) -> str:
    return f"{name}_total" if kind == "counter" else name


def _collector_rows(collector: object) -> Iterator[MetricRow]:
    # prometheus_client keeps label names only in ``_labelnames`` (of a metric object or a metric family).
    if isinstance(collector, MetricWrapperBase):
        kind = collector._type
        yield MetricRow(_exposed_name(collector._name, kind), kind, tuple(collector._labelnames),
                        collector._documentation)
        return
    for family in collector.collect():  # type: ignore[attr-defined]
        labels = getattr(family, "_labelnames", None)
        if labels is None:
            labels = sorted({k for s in family.samples for k in s.labels if k != "le"})
        yield MetricRow(_exposed_name(family.name, family.type), family.type, tuple(labels), family.documentation)


def metric_rows(registry: CollectorRegistry) -> list[MetricRow]:
    """Every metric family ``registry`` exports, sorted by name."""
    rows = {}
    # the collectors registered, in no particular order; the rows are sorted below
    for collector in list(registry._collector_to_names):
        for row in _collector_rows(collector):
            rows[row.name] = row
    return sorted(rows.values(), key=lambda row: row.name)


def render_metrics(services: Sequence[tuple[str, str, Callable[[], CollectorRegistry]]] = SERVICES) -> str:
    """One section per service: every metric's name, type, labels and help text."""
    sections = []
    for title, declared_in, build in services:
        rows = [(f"`{row.name}`", row.kind, ", ".join(row.labels), row.help) for row in metric_rows(build())]
        sections.append(f"### {title}\n\nDeclared in {', '.join(f'`{p.strip()}`' for p in declared_in.split(','))}."
                        "\n\n" + table(("metric", "type", "labels", "help"), rows))
    return "\n\n".join(sections)

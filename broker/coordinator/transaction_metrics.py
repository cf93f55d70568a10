"""The transaction coordinator's Prometheus metrics: open transactions and the oldest one's age (at scrape time),
transactions ended by outcome and abort reason, producers fenced."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Why a transaction was aborted: its producer asked, it outlived its timeout, or a new producer instance fenced it.
ABORT_REASONS = ("client", "timeout", "fenced")


class TransactionCoordinatorMetrics(Collector):
    """Counts kept by the TransactionCoordinator; ``open_transactions`` gives (count, oldest start ms) on demand."""

    def __init__(self) -> None:
        self.open_transactions: Callable[[], tuple[int, int | None]] = lambda: (0, None)
        self.now_ms: Callable[[], int] = lambda: 0
        self.committed = 0
        self.aborted = dict.fromkeys(ABORT_REASONS, 0)
        self.producers_fenced = 0

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        count, oldest = self.open_transactions()
        yield GaugeMetricFamily("kafka_coordinator_transaction_open_transactions",
                                "Transactions this broker coordinates that are Ongoing, PrepareCommit or PrepareAbort",
                                value=count)
        yield GaugeMetricFamily("kafka_coordinator_transaction_oldest_open_transaction_age_seconds",
                                "Age of the oldest open transaction this broker coordinates (0 when none is open)",
                                value=0 if oldest is None else max(0, self.now_ms() - oldest) / 1000)
        committed = CounterMetricFamily("kafka_coordinator_transaction_committed",
                                        "Transactions this coordinator decided to commit (PrepareCommit written)")
        committed.add_metric([], self.committed)
        yield committed
        aborted = CounterMetricFamily("kafka_coordinator_transaction_aborted",
                                      "Transactions this coordinator decided to abort (PrepareAbort written), by "
                                      "reason: client (EndTxn), timeout (transaction.timeout.ms passed), fenced "
                                      "(a new producer instance with the same transactional id)", labels=["reason"])
        for reason in ABORT_REASONS:
            aborted.add_metric([reason], self.aborted[reason])
        yield aborted
        fenced = CounterMetricFamily("kafka_coordinator_transaction_producers_fenced",
                                     "Producer epochs fenced by InitProducerId from a new instance or by a timeout")
        fenced.add_metric([], self.producers_fenced)
        yield fenced

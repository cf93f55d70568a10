"""The log cleaner's Prometheus metrics (Kafka's kafka.log:type=LogCleaner and LogCleanerManager gauges),
read from LogCleaner.stats() at scrape time."""

from __future__ import annotations

from typing import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.log.log_cleaner import LogCleaner

_CLEANER_GAUGES = (
    ("kafka_log_logcleaner_max_buffer_utilization_percent", "max_buffer_utilization_percent",
     "Share of the offset map the last pass filled"),
    ("kafka_log_logcleaner_max_clean_time_secs", "max_clean_time_secs", "Duration of the last pass"),
    ("kafka_log_logcleaner_cleaner_recopy_percent", "cleaner_recopy_percent",
     "Bytes the last pass wrote, as a share of those it read"),
    ("kafka_log_logcleanermanager_max_dirty_percent", "max_dirty_percent", "Dirty share of the dirtiest compacted log"),
    ("kafka_log_logcleanermanager_time_since_last_run_ms", "time_since_last_run_ms",
     "Time since a cleaner thread last looked for a log to clean"),
    ("kafka_log_logcleanermanager_uncleanable_partitions_count", "uncleanable_partitions_count",
     "Compacted logs left uncleaned after a failed pass"),
    ("kafka_log_logcleanermanager_backlog_bytes", "backlog_bytes", "Bytes of the dirty sections of all compacted logs"),
)

_PER_LOG = (
    ("kafka_log_logcleaner_dirty_ratio", "dirty_ratio", GaugeMetricFamily, "Dirty share of the log's cleanable bytes"),
    ("kafka_log_logcleaner_dirty_bytes", "dirty_bytes", GaugeMetricFamily, "Bytes of the log's dirty section"),
    ("kafka_log_logcleaner_bytes_read", "bytes_read", CounterMetricFamily, "Bytes the cleaner read from the log"),
    ("kafka_log_logcleaner_bytes_written", "bytes_written", CounterMetricFamily, "Bytes the cleaner wrote to the log"),
    ("kafka_log_logcleaner_bytes_recovered", "bytes_recovered", CounterMetricFamily, "Bytes compaction freed in the log"),
    ("kafka_log_logcleaner_clean_time_secs", "clean_time_secs", CounterMetricFamily, "Time spent cleaning the log"),
)


class LogCleanerMetrics(Collector):
    """A Prometheus collector over a LogCleaner's stats()."""

    def __init__(self, cleaner: LogCleaner) -> None:
        self.cleaner = cleaner

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        stats = self.cleaner.stats()
        for name, key, text in _CLEANER_GAUGES:
            gauge = GaugeMetricFamily(name, text)
            gauge.add_metric([], float(stats[key]))  # type: ignore[arg-type]
            yield gauge
        logs: dict = stats["logs"]  # type: ignore[assignment]
        for name, key, family, text in _PER_LOG:
            metric = family(name, text, labels=["topic", "partition"])
            for (topic, partition), values in sorted(logs.items()):
                metric.add_metric([topic, str(partition)], float(values[key]))
            yield metric
        # The worker processes are outside the broker's own process_* metrics.
        cpu = CounterMetricFamily("kafka_log_logcleaner_worker_cpu_seconds", "CPU time of a cleaner worker process",
                                  labels=["worker"])
        rss = GaugeMetricFamily("kafka_log_logcleaner_worker_resident_memory_bytes",
                                "Resident memory of a cleaner worker process", labels=["worker"])
        workers: dict = stats["workers"]  # type: ignore[assignment]
        for i, (cpu_seconds, resident_bytes) in sorted(workers.items()):
            cpu.add_metric([str(i)], cpu_seconds)
            rss.add_metric([str(i)], float(resident_bytes))
        yield cpu
        yield rss

"""The ETL's configuration table: what a properties file (``--config``), ``--set KEY=VALUE`` or the command
line sets, for a single run (``python -m etl load``) and for the scheduler (``python -m etl run``).

Spark settings pass through with their own names (``spark.executor.memory=2g``, ``spark.sql.shuffle.partitions=8``)
and go to the SparkSession builder; ``spark.master`` is ``local[*]`` unless given (``--master``), and a
cluster URL there runs the same job on that cluster.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from pipeline.config import (
    Config,
    ConfigError,
    Property,
    parse_bool,
    parse_choice,
    parse_int,
    parse_optional_int,
    parse_regex,
    parse_str,
)
from pipeline.client.isolation import READ_COMMITTED, parse_isolation_level
from pipeline.security.client_settings import SECURITY_PROPERTIES, ClientSecurity
from pipeline.service.settings import LOG_LEVEL
from pipeline.testing_faults import fault_properties
from pipeline.zk.security import ZOOKEEPER_SECURITY_PROPERTIES, ZooKeeperSecurity
from schemas.events import AUDIT_TOPIC
from schemas.registry_client_settings import REGISTRY_CLIENT_PROPERTIES

__all__ = ["ETL_PROPERTIES", "EtlConfig", "PAUSE_POINTS", "parse_duration"]

# Where testing.pause.at stops a run (driver or task), in the order a run meets them: a task has loaded its first
# batch; the journal is written and the first staged file moved into a table; the manifest is written, the
# ZooKeeper commit not begun; the first partition's offset is written to ZooKeeper, the others not.
PAUSE_POINTS = ("loading", "publishing", "published", "committing")

_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``500ms``, ``30s``, ``5m``, ``1h``, ``1d`` or plain seconds -> seconds."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {text!r}")
    return float(match.group(1)) * _SECONDS[match.group(2) or "s"]


ETL_PROPERTIES = (
    Property("zookeeper.connect", parse_str, None, "the offline cluster's ZooKeeper, HOST:PORT[,...][/CHROOT] (required)"),
    Property("warehouse.dir", parse_str, None,
             "the warehouse: Parquet tables, manifests, journal and run history live under it (required)"),
    Property("topics", parse_regex, ".*", "regular expression of the topics to load (whole names)"),
    Property("exclude.topics", parse_regex, f"{re.escape(AUDIT_TOPIC)}|_.*",
             "regular expression of topics never loaded (whole names)"),
    Property("group.id", parse_str, "etl",
             "name of this ETL: its offsets in ZooKeeper (/consumers/GROUP/offsets), its lock and its run history"),
    Property("spark.master", parse_str, "local[*]", "Spark master URL; local[*] runs Spark inside this process"),
    Property("max.range.records", parse_int, 250_000,
             "a partition's new offsets are split into ranges of at most this many, one Spark task each", at_least=1),
    Property("concurrent.topics", parse_int, 4,
             "topics loaded at once, one Spark job each (their tasks share the executors)", at_least=1),
    Property("fetch.size", parse_int, 4 << 20, "bytes a task asks the broker for per fetch", at_least=1024),
    Property("isolation.level", parse_isolation_level, READ_COMMITTED,
             "read_committed: a run loads up to each partition's last stable offset and leaves out aborted "
             "transactions (the exactly-once mirror's, whatever a killed mirror left open); read_uncommitted: up to "
             "the high watermark, everything"),
    Property("out.of.range", parse_choice("fail", "earliest"), "fail",
             "when a partition's retention deleted offsets not yet loaded: fail names the partition and the number of "
             "lost offsets; earliest moves on to the log start and records the skipped count in the run's history"),
    Property("on.bad.record", parse_choice("quarantine", "fail"), "quarantine",
             "a record that cannot be loaded (no value, not in the Confluent wire format, an unknown schema id, a "
             "value that does not decode into the reader schema): quarantine sets it aside in the warehouse's "
             "quarantine table with its lineage and error (python -m etl quarantine) and loads the rest; fail fails "
             "its topic's load naming the record"),
    Property("schema.registry.url", parse_str, "http://localhost:8081",
             "schema registry the events' writer schemas are read from, comma-separated URLs"),
    *REGISTRY_CLIENT_PROPERTIES,
    Property("audit.enable", parse_bool, True, "publish tier-warehouse AuditCount records to the offline cluster"),
    Property("audit.window.ms", parse_int, 60_000, "audit window of event time", at_least=1),
    Property("audit.topic", parse_str, AUDIT_TOPIC, "topic the AuditCount records go to"),
    Property("schedule.every", parse_duration, 300.0, "the scheduler starts a run this long after the last one started"),
    Property("history.keep", parse_int, 1000, "run history entries kept (the oldest are deleted)", at_least=1),
    Property("warehouse.retention", parse_duration, 7 * 86400.0,
             "hour partitions of the tables and of the quarantine whose hour (of event time) ended longer ago than "
             "this are deleted by the runs; 0 keeps them forever"),
    Property("obsolete.files.keep", parse_duration, 600.0,
             "files a commit replaced (compaction, replay) or expired (retention) stay on disk this long for the "
             "queries already reading them, then a run deletes them"),
    Property("compaction.enable", parse_bool, True,
             "runs rewrite the small files of closed hour partitions into files of about compaction.target.bytes"),
    Property("compaction.target.bytes", parse_int, 128 << 20, "size of the files compaction writes", at_least=1024),
    Property("compaction.delay", parse_duration, 3600.0,
             "an hour partition is closed, and compacted, once its hour ended this long ago (later events land in "
             "a new file, compacted again at a later run)"),
    Property("compaction.max.partitions", parse_int, 48,
             "hour partitions a run compacts at most (the oldest first; the rest at the next runs)", at_least=1),
    Property("metrics.host", parse_str, "0.0.0.0", "address the scheduler's metrics server listens on"),
    Property("metrics.port", parse_optional_int, None,
             "the scheduler serves Prometheus metrics at http://METRICS.HOST:PORT/metrics (empty: none)",
             at_least=0, at_most=65535),
    LOG_LEVEL,
    *fault_properties(PAUSE_POINTS, drops_events=True),
    *SECURITY_PROPERTIES,
    *ZOOKEEPER_SECURITY_PROPERTIES,
)


class EtlConfig(Config):
    """Validated ETL settings plus the ``spark.*`` settings handed to Spark as they are."""

    kind = "etl setting"

    def __init__(self, values: Mapping[str, Any] | str | Path | None = None) -> None:
        if isinstance(values, (str, Path)):
            from pipeline.config import read_properties_file
            values = read_properties_file(values)
        own: dict[str, Any] = {}
        spark: dict[str, str] = {}
        for name, value in (values or {}).items():
            if name.startswith("spark.") and name != "spark.master":
                spark[name] = str(value)
            else:
                own[name] = value
        super().__init__(ETL_PROPERTIES, own)
        if not self["zookeeper.connect"]:
            raise ConfigError("give the offline cluster's ZooKeeper (--zookeeper HOST:PORT[/CHROOT])")
        if not self["warehouse.dir"]:
            raise ConfigError("give the warehouse directory (--warehouse DIR)")
        if "/" in self["group.id"]:
            raise ConfigError(f"group.id must not contain '/', got {self['group.id']!r}")
        if self["schedule.every"] <= 0:
            raise ConfigError("schedule.every must be positive")
        for name in ("warehouse.retention", "obsolete.files.keep", "compaction.delay"):
            if self[name] < 0:
                raise ConfigError(f"{name} must not be negative")
        if not self["metrics.host"]:
            raise ConfigError("metrics.host must name an address, e.g. 127.0.0.1")
        #: How the driver and the Spark tasks connect to the offline brokers.
        self.security = ClientSecurity.from_values(self.as_dict())
        #: How its ZooKeeper session (lock, schedule, offsets) authenticates and protects what it creates.
        self.zookeeper_security = ZooKeeperSecurity.from_values(self.as_dict())
        #: Settings for the SparkSession builder, ``spark.master`` apart.
        self.spark_settings = spark

    @property
    def warehouse(self) -> Path:
        return Path(self["warehouse.dir"])

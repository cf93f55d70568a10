"""Keeping the warehouse bounded, at the end of every run: retention, then compaction, each a commit of its own.

    retention    hour partitions (tables and quarantine) whose hour ended more than warehouse.retention ago
                 leave the live set (one manifest removing their files); a later fold deletes the files
    compaction   closed hour partitions' small files rewritten into few (etl.compaction), one manifest per run

Both go through the commit protocol (etl.commit), so that a run killed in the middle leaves the warehouse as
before or as after, never in between. Upkeep is best effort: a failure is logged and recorded in the run's
report (``maintenance_error``) but does not undo or fail the run's load, and the next run tries again. A lost
lock stops the run (LockLost), as anywhere else.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from etl.commit import Committer, LockLost
from etl.compaction import compact_topic, compaction_plan
from etl.config import EtlConfig
from etl.files import fsync_file
from etl.plan import EtlError
from etl.store import Manifest, Warehouse, new_run_id
from pipeline.etl_runs import RunReport

__all__ = ["COMPACTION", "RETENTION", "keep_warehouse"]

log = logging.getLogger(__name__)

RETENTION = "retention"
COMPACTION = "compaction"


def keep_warehouse(config: EtlConfig, warehouse: Warehouse, committer: Committer, session: Callable[[], object],
                   report: RunReport, now: float | None = None) -> None:
    """Expire, then compact; what was done goes to ``report.maintenance``, a failure to
    ``report.maintenance_error``. ``session()`` gives the SparkSession (started only when there is something to
    compact)."""
    now = time.time() if now is None else now
    try:
        if config["warehouse.retention"] > 0:
            expire(warehouse, committer, now - config["warehouse.retention"], report)
        if config["compaction.enable"]:
            compact(config, warehouse, committer, session, now, report)
    except LockLost:
        raise
    except (EtlError, OSError, ValueError, Py4JError, PySparkException) as error:
        text = _first_line(f"{type(error).__name__}: {error}" if not isinstance(error, EtlError) else str(error))
        log.error("run %s: keeping the warehouse failed (the next run tries again): %s", report.run_id, text)
        report.maintenance_error = text


def expire(warehouse: Warehouse, committer: Committer, before: float, report: RunReport) -> None:
    """Remove from the live set every hour partition that ended by ``before`` (seconds since the epoch)."""
    expired = {p: files for p, files in warehouse.snapshot().partitions().items() if p.ends_at() <= before}
    if not expired:
        return
    removed = sorted(f for files in expired.values() for f in files)
    committer.commit(Manifest(new_run_id(), [], removed=removed, kind=RETENTION))
    log.info("run %s: %d hour partitions past retention expired (%d files)", report.run_id, len(expired),
             len(removed))
    _add(report, partitions_expired=len(expired), files_expired=len(removed))


def compact(config: EtlConfig, warehouse: Warehouse, committer: Committer, session: Callable[[], object],
            now: float, report: RunReport) -> None:
    """Compact the closed partitions that need it (at most compaction.max.partitions) in one commit."""
    tasks = compaction_plan(warehouse.snapshot(), now - config["compaction.delay"], config["compaction.target.bytes"],
                            config["compaction.max.partitions"])
    if not tasks:
        return
    run_id = new_run_id()
    spark = session()
    moves = []
    try:
        for topic in sorted({t.partition.topic for t in tasks}):
            moves += compact_topic(spark, warehouse.root, topic, [t for t in tasks if t.partition.topic == topic],
                                   warehouse.staging_dir(run_id) / "tables" / topic, run_id,
                                   config["compaction.target.bytes"])
        for move in moves:
            fsync_file(warehouse.root / move.staged)
        committer.commit(Manifest(run_id, [], moves, removed=sorted(f for t in tasks for f in t.files),
                                  kind=COMPACTION))
    except BaseException:
        if not warehouse.journal_path(run_id).exists():
            warehouse.discard(run_id)
        raise
    compacted = sum(len(t.files) for t in tasks)
    log.info("run %s: %d hour partitions compacted, %d files into %d", report.run_id, len(tasks), compacted,
             len(moves))
    _add(report, partitions_compacted=len(tasks), files_compacted=compacted, files_written=len(moves))


def _add(report: RunReport, **counts: int) -> None:
    for name, count in counts.items():
        report.maintenance[name] = report.maintenance.get(name, 0) + count


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text

"""Fault drills (`python -m pipeline chaos`) against a live reduced deployment: the ETL killed with its Spark JVM
in the middle of a run, and ZooKeeper stopped for longer than the brokers' sessions; afterwards every program is
healthy, the ETL's next run succeeds and the warehouse holds every offline offset and every mirrored event once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from etl.history import RunHistory
from etl.report import FAILED
from infra.deployment.programs import programs
from schemas.events import EVENT_TOPICS
from tests.support.deployment import Deployment
from tests.support.etl import warehouse_rows
from tests.support.polling import wait_until


def _lineage_duplicates(warehouse: Path) -> list[tuple]:
    keys: Counter[tuple] = Counter()
    for topic in EVENT_TOPICS:
        for row in warehouse_rows(warehouse, topic).values():  # asserts (topic, partition, offset) once each
            keys[(row["kafka_topic"], row["source_cluster"], row["source_partition"], row["source_offset"])] += 1
    return [key for key, n in keys.items() if n > 1]


def test_kill_etl_during_a_run_and_pause_zookeeper_leave_a_healthy_pipeline_and_no_duplicate_rows() -> None:
    deployment = Deployment()
    try:
        deployment.up()
        topology = deployment.topology
        history = RunHistory(topology.warehouse, "etl")

        killed = deployment.command("chaos", "kill-etl", "--during-run", module="pipeline", timeout=300)
        assert "SIGKILL to etl's process group" in killed.stdout and "java" in killed.stdout, killed.stdout
        assert "the restarted ETL's first run finished" in killed.stdout, killed.stdout
        newest = history.runs(limit=1)[0]
        assert newest.outcome != FAILED, newest.error
        assert _lineage_duplicates(topology.warehouse) == []

        paused = deployment.command("chaos", "pause-zookeeper", module="pipeline", timeout=300)
        resumed = time.time()
        assert "SIGCONT" in paused.stdout and "every program running and healthy" in paused.stdout, paused.stdout
        assert "under a new session: none" not in paused.stdout, paused.stdout  # the default pause expires them

        for program in programs(topology):
            assert deployment.supervisor.info(program.name).running, program.name
            wait_until(program.health, timeout=30, message=f"{program.name}: {program.health.description}")
        after = wait_until(lambda: [r for r in history.runs(limit=5)
                                    if r.started_at > resumed and r.finished_at is not None],
                           timeout=120, interval=0.5,
                           message=lambda: f"an ETL run after the pause\n{deployment.log('etl')}")
        assert all(run.outcome != FAILED for run in after), [run.error for run in after]
        for topic in EVENT_TOPICS:
            warehouse_rows(topology.warehouse, topic)  # every offline offset at most once
    finally:
        deployment.close()
    assert deployment.leftovers() == []

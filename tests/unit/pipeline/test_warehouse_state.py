"""The warehouse's folded state: manifests folded into the checkpoint and pruned, snapshots read without the lock,
files removed by a commit deleted only after their grace, retention and the compaction plan, owner-only files."""

from __future__ import annotations

import calendar
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from etl.commit import Committer
from etl.compaction import compaction_plan
from etl.config import EtlConfig
from etl.files import write_atomically
from etl.maintenance import keep_warehouse
from etl.plan import OffsetRange
from etl.store import Journal, Manifest, Move, Warehouse, new_run_id
from pipeline import warehouse_state as checkpoint_module
from pipeline.durable_file import make_private_dir
from pipeline.etl_runs import RunReport
from pipeline.warehouse_state import Checkpoint, HourPartition, hour_partition_of

HOUR = 3600.0
#: 2023-11-14 22:00 UTC.
T0 = calendar.timegm((2023, 11, 14, 22, 0, 0))


def hour_dir(topic: str, at: float, quarantine: bool = False) -> str:
    moment = time.gmtime(at)
    table = f"_quarantine/{topic}" if quarantine else topic
    return f"{table}/date={time.strftime('%Y-%m-%d', moment)}/hour={moment.tm_hour}"


def commit(warehouse: Warehouse, files: dict[str, int], *, ranges: list[OffsetRange] | None = None,
           removed: list[str] | None = None, kind: str = "load") -> Manifest:
    """Stage files of ``files`` (path -> bytes) and publish them in one manifest; folded by the caller."""
    run_id = new_run_id()
    moves = []
    for index, (path, size) in enumerate(sorted(files.items())):
        staged = warehouse.staging_dir(run_id) / f"f{index}"
        make_private_dir(staged.parent)
        staged.write_bytes(b"x" * size)
        moves.append(Move(str(staged.relative_to(warehouse.root)), path, 0, 10, size))
    manifest = Manifest(run_id, ranges or [], moves, removed=removed or [], kind=kind)
    journal = Journal(manifest)
    warehouse.write_journal(journal)
    warehouse.publish(journal)
    warehouse.finish(run_id)
    return manifest


def test_folding_applies_the_manifests_prunes_them_and_the_snapshot_stays_the_same(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    first = f"{hour_dir('t', T0)}/a.parquet"
    commit(warehouse, {first: 100}, ranges=[OffsetRange("t", 0, 0, 10)])
    commit(warehouse, {f"{hour_dir('t', T0)}/b.parquet": 100, f"{hour_dir('t', T0, True)}/q.parquet": 5},
           ranges=[OffsetRange("t", 0, 10, 25), OffsetRange("t", 1, 0, 3)])
    before = warehouse.snapshot()
    assert before.loaded == {("t", 0): 25, ("t", 1): 3}
    assert before.table_files() == {"t": [first, f"{hour_dir('t', T0)}/b.parquet"]}
    assert before.quarantine_files() == {"t": [f"{hour_dir('t', T0, True)}/q.parquet"]}
    assert warehouse.fold(600.0) == 2
    assert list(warehouse.read_manifests()) == [] and warehouse.snapshot() == before
    assert warehouse.loaded() == {("t", 0): 25, ("t", 1): 3}
    assert warehouse.fold(600.0) == 0 and warehouse.snapshot() == before


def test_a_fold_killed_before_pruning_is_done_again_and_never_brings_back_a_removed_file(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    small = f"{hour_dir('t', T0)}/small.parquet"
    added = commit(warehouse, {small: 100}, ranges=[OffsetRange("t", 0, 0, 10)])
    big = f"{hour_dir('t', T0)}/compacted.parquet"
    compacted = commit(warehouse, {big: 1000}, removed=[small], kind="compaction")
    saved = {m.run_id: m.as_dict() for m in (added, compacted)}
    warehouse.fold(600.0)
    # The fold died after writing the checkpoint, before deleting the manifests: they are back on disk.
    for run_id, data in saved.items():
        write_atomically(warehouse.manifest_path(run_id), data)
    assert warehouse.snapshot().table_files() == {"t": [big]}
    assert warehouse.fold(600.0) == 0 and list(warehouse.read_manifests()) == []
    assert warehouse.snapshot().table_files() == {"t": [big]} and warehouse.loaded() == {("t", 0): 10}


def test_a_snapshot_read_while_a_fold_replaces_the_checkpoint_or_prunes_a_manifest_reads_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listing, reading = checkpoint_module.manifest_files, checkpoint_module.read_json
    for fold_at in ("listing", "reading"):
        warehouse = Warehouse(tmp_path / fold_at, "g")
        small = f"{hour_dir('t', T0)}/small.parquet"
        commit(warehouse, {small: 100}, ranges=[OffsetRange("t", 0, 0, 10)])
        warehouse.fold(600.0)
        big = f"{hour_dir('t', T0)}/big.parquet"
        commit(warehouse, {big: 1000}, removed=[small], kind="compaction")
        folds: list[str] = []

        def fold_once(when: str) -> None:
            if when == fold_at and not folds:
                folds.append(when)
                monkeypatch.setattr(checkpoint_module, "manifest_files", listing)
                warehouse.fold(600.0)

        def list_after_a_fold(directory: Path) -> list[Path]:
            # The reader holds the old checkpoint; a fold folds the manifest and prunes it before the listing.
            fold_once("listing")
            return listing(directory)

        def read_after_a_fold(path: Path) -> Any:
            # The reader listed the manifest; a fold prunes it before it is read.
            fold_once("reading")
            return reading(path)

        monkeypatch.setattr(checkpoint_module, "manifest_files", list_after_a_fold)
        monkeypatch.setattr(checkpoint_module, "read_json", read_after_a_fold)
        assert warehouse.snapshot().table_files() == {"t": [big]}, fold_at
        assert folds == [fold_at]
        monkeypatch.setattr(checkpoint_module, "manifest_files", listing)
        monkeypatch.setattr(checkpoint_module, "read_json", reading)


def test_files_a_commit_removed_are_deleted_after_their_grace_with_the_directories_they_empty(
        tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    old = f"{hour_dir('t', T0)}/old.parquet"
    commit(warehouse, {old: 100})
    warehouse.fold(600.0, now=1000.0)
    commit(warehouse, {}, removed=[old], kind="retention")
    warehouse.fold(600.0, now=2000.0)
    assert (tmp_path / old).exists() and warehouse.snapshot().table_files() == {}
    assert warehouse.checkpoint().obsolete == {old: 2000.0}
    warehouse.fold(600.0, now=2599.0)
    assert (tmp_path / old).exists(), "queries still reading it have 600 s"
    warehouse.fold(600.0, now=2600.0)
    assert not (tmp_path / old).exists() and not (tmp_path / hour_dir("t", T0)).parent.exists()
    assert (tmp_path / "t").is_dir() and warehouse.checkpoint().obsolete == {}


def test_the_warehouse_s_files_and_directories_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        warehouse = Warehouse(tmp_path / "warehouse", "g")
        with warehouse.exclusive():
            commit(warehouse, {f"{hour_dir('t', T0)}/a.parquet": 10}, ranges=[OffsetRange("t", 0, 0, 1)])
            warehouse.fold(600.0)
    finally:
        os.umask(previous)
    modes = {path.relative_to(tmp_path).as_posix(): stat.S_IMODE(path.stat().st_mode)
             for path in (tmp_path / "warehouse").rglob("*") if not path.name.startswith("a.parquet")}
    assert {p: m for p, m in modes.items() if m != (0o700 if (tmp_path / p).is_dir() else 0o600)} == {}
    assert stat.S_IMODE((tmp_path / "warehouse").stat().st_mode) == 0o700
    assert "warehouse/_etl/g/checkpoint.json" in modes and "warehouse/t/date=2023-11-14/hour=22" in modes


def test_hour_partitions_are_named_by_their_directories_and_end_an_hour_after_they_start() -> None:
    assert hour_partition_of("t/date=2023-11-14/hour=22/x.parquet") == HourPartition(False, "t", "2023-11-14", 22)
    assert hour_partition_of("_quarantine/t/date=2023-11-14/hour=3/x.parquet") == \
        HourPartition(True, "t", "2023-11-14", 3)
    assert hour_partition_of("t/x.parquet") is None and hour_partition_of("_etl/g/checkpoint.json") is None
    assert HourPartition(False, "t", "2023-11-14", 22).ends_at() == T0 + HOUR


def test_the_checkpoint_round_trips_and_refuses_another_format() -> None:
    checkpoint = Checkpoint(3, ["r1"], {("t", 0): 5}, {"t/date=2023-11-14/hour=1/a.parquet": (2, 30)}, {"x": 1.5})
    assert Checkpoint.from_dict(checkpoint.as_dict()) == checkpoint
    with pytest.raises(ValueError, match="format 2"):
        Checkpoint.from_dict({**checkpoint.as_dict(), "format": 2})


# -- compaction's plan and retention ----------------------------------------------------------------------


def snapshot_of(files: dict[str, tuple[int, int]]) -> Any:
    return checkpoint_module.Snapshot({}, files)


def test_only_closed_hours_with_more_small_files_than_their_bytes_need_are_compacted_oldest_first() -> None:
    target = 1000
    files = {
        **{f"{hour_dir('t', T0)}/s{i}.parquet": (10, 100) for i in range(5)},   # closed, 5 small: compacted
        **{f"{hour_dir('t', T0 + HOUR)}/s{i}.parquet": (10, 100) for i in range(3)},  # still open: not yet
        f"{hour_dir('u', T0)}/big.parquet": (90, 900), f"{hour_dir('u', T0)}/small.parquet": (1, 10),  # one small
        **{f"{hour_dir('v', T0)}/h{i}.parquet": (60, 600) for i in range(4)},  # none small: left alone
        **{f"{hour_dir('t', T0, True)}/q{i}.parquet": (1, 10) for i in range(4)},  # the quarantine: left alone
        **{f"{hour_dir('w', T0 - HOUR)}/s{i}.parquet": (10, 100) for i in range(2)},  # older: first
    }
    plan = compaction_plan(snapshot_of(files), closed_before=T0 + 1.5 * HOUR, target_bytes=target, max_partitions=5)
    assert [(t.partition.topic, t.partition.hour, len(t.files), t.rows, t.bytes) for t in plan] == \
        [("w", 21, 2, 20, 200), ("t", 22, 5, 50, 500)]
    assert len(compaction_plan(snapshot_of(files), T0 + 1.5 * HOUR, target, max_partitions=1)) == 1
    assert compaction_plan(snapshot_of(files), T0 + 2 * HOUR, target, 5)[-1].partition.hour == 23
    # Two small files that together need two files of the target size are not worth rewriting.
    assert compaction_plan(snapshot_of({f"{hour_dir('t', T0)}/a.parquet": (1, 450),
                                        f"{hour_dir('t', T0)}/b.parquet": (1, 450)}), T0 + 2 * HOUR, 500, 5) == []


def test_retention_expires_old_hour_partitions_tables_and_quarantine_in_one_commit(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path, "g")
    old, old_quarantined = f"{hour_dir('t', T0)}/a.parquet", f"{hour_dir('t', T0, True)}/q.parquet"
    recent = f"{hour_dir('t', T0 + 5 * HOUR)}/b.parquet"
    commit(warehouse, {old: 10, old_quarantined: 10, recent: 10}, ranges=[OffsetRange("t", 0, 0, 3)])
    config = EtlConfig({"zookeeper.connect": "zk:2181", "warehouse.dir": str(tmp_path), "group.id": "g",
                        "warehouse.retention": "3h", "audit.enable": "false"})
    report = RunReport("r", "g", T0)
    started: list[bool] = []
    committer = Committer(config, warehouse, None)  # type: ignore[arg-type]  # no ranges: no ZooKeeper commit
    keep_warehouse(config, warehouse, committer, lambda: started.append(True), report, now=T0 + 4 * HOUR + 1)
    assert report.maintenance == {"partitions_expired": 2, "files_expired": 2} and report.maintenance_error is None
    assert warehouse.snapshot().table_files() == {"t": [recent]} and warehouse.snapshot().quarantine_files() == {}
    assert warehouse.loaded() == {("t", 0): 3}, "what was loaded stays loaded"
    assert started == [], "nothing to compact: no Spark"
    assert (tmp_path / old).exists(), "deleted by a later fold, after obsolete.files.keep"

"""The warehouse on disk: tables, plans, staging, journal, manifests and checkpoint, and the commit protocol's
file steps.

    WAREHOUSE/<topic>/date=YYYY-MM-DD/hour=H/<name>.parquet              the tables
    WAREHOUSE/_quarantine/<topic>/date=YYYY-MM-DD/hour=H/<name>.parquet  records that could not be loaded
    WAREHOUSE/_etl/<group>/plans/<run>.json        the run's ranges, written before any data is read
    WAREHOUSE/_etl/<group>/staging/<run>/...       what the run wrote, not yet published
    WAREHOUSE/_etl/<group>/journal/<run>.json      the moves of a publish and its manifest, written before them
    WAREHOUSE/_etl/<group>/manifests/<run>.json    a published commit not folded yet: ranges, files added and
                                                   removed, skipped offsets, audit counts
    WAREHOUSE/_etl/<group>/checkpoint.json         every manifest folded so far (pipeline.warehouse_state)
    WAREHOUSE/_etl/<group>/history/...             the run history (pipeline.etl_runs)
    WAREHOUSE/_etl/<group>/run.lock                held (flock) by the run in progress

A manifest is the commit point: its ranges are loaded, its files are live and the files it removes are not, and
the next run starts where its ranges end. The journal lives from just before the first move until the steps
after the manifest (the ZooKeeper commit, the audit) are done; ``Journal.steps`` says which of those are. Once
a commit is complete its manifest is folded into the checkpoint and deleted. Every file that matters is
written atomically and crash-safely (etl.files), owner-only. Run ids sort in time order.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from etl.files import fsync_directory, read_json, write_atomically
from etl.plan import OffsetRange
from pipeline.durable_file import make_private_dir
from pipeline.etl_runs import SkippedOffsets
from pipeline.testing_faults import Faults
from pipeline.warehouse_state import (
    CHECKPOINT_NAME,
    MANIFESTS_NAME,
    QUARANTINE_DIR,
    Checkpoint,
    Snapshot,
    fold,
    group_directory,
    manifest_files,
    read_snapshot,
)

__all__ = ["LOAD", "Journal", "Manifest", "Move", "RunInProgress", "Warehouse", "new_run_id"]

#: What a commit did (``Manifest.kind``): loaded new offsets, or changed the files of what was loaded.
LOAD = "load"

log = logging.getLogger(__name__)


def new_run_id(now: float | None = None) -> str:
    """A run id that sorts in start order: UTC time to the millisecond, then random hex."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}"
    return f"{stamp}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Move:
    """One staged file and where publishing puts it (both relative to the warehouse)."""

    staged: str
    published: str
    range_index: int
    rows: int
    bytes: int


@dataclass
class Manifest:
    """A published commit: its ranges, its files (with the range each belongs to), skipped offsets, audit counts,
    the files it removes from the live set (compaction, replay, retention) and what kind of commit it is."""

    run_id: str
    ranges: list[OffsetRange]
    files: list[Move] = field(default_factory=list)
    skipped: list[SkippedOffsets] = field(default_factory=list)
    #: AuditCount records of the tier-warehouse audit (their ``host`` is the run's driver).
    audit: list[dict[str, Any]] = field(default_factory=list)
    #: Per range index: rows written and bytes of the messages loaded.
    range_stats: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Live files this commit replaces or expires (relative to the warehouse).
    removed: list[str] = field(default_factory=list)
    kind: str = LOAD

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "kind": self.kind, "ranges": [r.as_dict() for r in self.ranges],
                "files": [m.__dict__ for m in self.files], "removed": list(self.removed),
                "skipped": [s.__dict__ for s in self.skipped], "audit": self.audit,
                "range_stats": {str(k): list(v) for k, v in self.range_stats.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Manifest":
        return cls(data["run_id"], [OffsetRange.from_dict(r) for r in data["ranges"]],
                   [Move(**m) for m in data.get("files", [])],
                   [SkippedOffsets(**s) for s in data.get("skipped", [])], list(data.get("audit", [])),
                   {int(k): (int(v[0]), int(v[1])) for k, v in data.get("range_stats", {}).items()},
                   list(data.get("removed", [])), data.get("kind", LOAD))


@dataclass
class Journal:
    """A publish in progress: the moves to make, the manifest to write, and the later steps already done."""

    manifest: Manifest
    steps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"manifest": self.manifest.as_dict(), "steps": list(self.steps)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Journal":
        return cls(Manifest.from_dict(data["manifest"]), list(data.get("steps", [])))


class RunInProgress(Exception):
    """Another run of the same group holds the warehouse."""


class Warehouse:
    """The paths of one ETL group's warehouse and the file steps of the commit protocol."""

    def __init__(self, root: str | Path, group: str) -> None:
        self.root = Path(root).absolute()
        self.group = group
        self.etl = group_directory(self.root, group)
        self.plans = self.etl / "plans"
        self.staging = self.etl / "staging"
        self.journals = self.etl / "journal"
        self.manifests = self.etl / MANIFESTS_NAME
        self.checkpoint_path = self.etl / CHECKPOINT_NAME

    def table(self, topic: str) -> Path:
        return self.root / topic

    def staging_dir(self, run_id: str) -> Path:
        return self.staging / run_id

    def staged_table(self, run_id: str, topic: str) -> Path:
        """Where the run's Spark job writes ``topic``'s rows (it must not exist before)."""
        return self.staging / run_id / "tables" / topic

    def staged_quarantine(self, run_id: str, topic: str) -> Path:
        """Where the run's tasks write ``topic``'s quarantined records."""
        return self.staging / run_id / QUARANTINE_DIR / topic

    # -- plans -------------------------------------------------------------------------------------

    def write_plan(self, run_id: str, ranges: list[OffsetRange], skipped: list[SkippedOffsets]) -> Path:
        path = self.plans / f"{run_id}.json"
        write_atomically(path, {"run_id": run_id, "ranges": [r.as_dict() for r in ranges],
                                "skipped": [s.__dict__ for s in skipped]})
        return path

    # -- manifests ---------------------------------------------------------------------------------

    def manifest_path(self, run_id: str) -> Path:
        return self.manifests / f"{run_id}.json"

    def read_manifests(self) -> Iterator[Manifest]:
        """The manifests not folded into the checkpoint yet, oldest first."""
        for path in manifest_files(self.manifests):
            yield Manifest.from_dict(read_json(path))

    def snapshot(self) -> Snapshot:
        """The live state: the checkpoint and the manifests not folded into it (safe without the run lock)."""
        return read_snapshot(self.checkpoint_path, self.manifests)

    def loaded(self) -> dict[tuple[str, int], int]:
        """Per topic-partition, where the published ranges (and the skipped offsets) end."""
        return self.snapshot().loaded

    def checkpoint(self) -> Checkpoint:
        return Checkpoint.read(self.checkpoint_path)

    def fold(self, keep_obsolete_s: float, now: float | None = None) -> int:
        """Fold the complete commits' manifests into the checkpoint and delete the files that stopped being live
        at least ``keep_obsolete_s`` ago; the number of manifests folded. Under the run lock."""
        pending = frozenset(j.manifest.run_id for j in self.journals_pending())
        return fold(self.checkpoint_path, self.manifests, now=time.time() if now is None else now,
                    keep_obsolete_s=keep_obsolete_s, delete=self._delete_obsolete, pending=pending)[1]

    def _delete_obsolete(self, path: str) -> None:
        """Delete a file no longer live, and the hour and date directories it leaves empty."""
        file = self.root / path
        file.unlink(missing_ok=True)
        directory = file.parent
        for _ in range(2):
            try:
                directory.rmdir()
            except OSError:  # not empty, or gone
                break
            directory = directory.parent

    # -- journal and publishing --------------------------------------------------------------------

    def journal_path(self, run_id: str) -> Path:
        return self.journals / f"{run_id}.json"

    def write_journal(self, journal: Journal) -> None:
        write_atomically(self.journal_path(journal.manifest.run_id), journal.as_dict())

    def journals_pending(self) -> list[Journal]:
        """The journals left by runs that died while publishing or before the steps after it, oldest first."""
        if not self.journals.is_dir():
            return []
        return [Journal.from_dict(read_json(p)) for p in sorted(self.journals.glob("*.json"))]

    def publish(self, journal: Journal, faults: Faults = Faults()) -> None:
        """Make the journal's moves (those not made yet) and write its manifest: the commit point.

        Idempotent, so a journal left by a dead run is rolled forward by calling it again.
        """
        manifest = journal.manifest
        if self.manifest_path(manifest.run_id).exists():
            return
        directories: set[Path] = set()
        for move in manifest.files:
            staged, published = self.root / move.staged, self.root / move.published
            if staged.exists():
                make_private_dir(published.parent)
                os.replace(staged, published)
                directories.add(published.parent)
                faults.pause("publishing")
            elif not published.exists():
                raise FileNotFoundError(f"run {manifest.run_id}: neither the staged file {staged} nor the published "
                                        f"{published} exists; the warehouse was changed by hand")
        # The moves, and the directories they created, durable up to the warehouse itself.
        synced: set[Path] = set()
        for directory in sorted(directories):
            while directory not in synced:
                fsync_directory(directory)
                synced.add(directory)
                if directory == self.root or self.root not in directory.parents:
                    break
                directory = directory.parent
        write_atomically(self.manifest_path(manifest.run_id), manifest.as_dict())

    def step_done(self, journal: Journal, step: str) -> None:
        """Record in the journal that ``step`` (after the manifest) is done."""
        journal.steps.append(step)
        self.write_journal(journal)

    def finish(self, run_id: str) -> None:
        """Remove what a published run no longer needs: its journal, staging and plan."""
        self.journal_path(run_id).unlink(missing_ok=True)
        fsync_directory(self.journals)
        self.discard(run_id)

    def discard(self, run_id: str) -> None:
        """Remove a run's staging and plan (a run that published nothing, or whose publish is complete)."""
        shutil.rmtree(self.staging_dir(run_id), ignore_errors=True)
        (self.plans / f"{run_id}.json").unlink(missing_ok=True)

    def abandoned_runs(self) -> list[str]:
        """Runs with a plan or staging but neither journal nor manifest: they died before publishing."""
        runs = set()
        if self.staging.is_dir():
            runs.update(p.name for p in self.staging.iterdir())
        if self.plans.is_dir():
            runs.update(p.name[:-len(".json")] for p in self.plans.glob("*.json"))
        return sorted(r for r in runs if not self.journal_path(r).exists() and not self.manifest_path(r).exists())

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the group's run lock (``_etl/<group>/run.lock``, flock) for a run; RunInProgress if another
        process of this host holds it. The kernel drops it when the holder dies, however it dies."""
        make_private_dir(self.etl)
        with open(os.open(self.etl / "run.lock", os.O_RDWR | os.O_CREAT, 0o600), "r+") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                raise RunInProgress(f"another run of group {self.group} is in progress on this warehouse "
                                    f"(process {lock.read().strip() or 'unknown'})") from None
            lock.seek(0)
            lock.truncate()
            lock.write(str(os.getpid()))
            lock.flush()
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def remove_strays(self) -> None:
        """Temporary files of atomic writes that a dead run left."""
        for directory in (self.plans, self.journals, self.manifests, self.etl):
            if directory.is_dir():
                for stray in directory.glob("*.tmp"):
                    stray.unlink(missing_ok=True)

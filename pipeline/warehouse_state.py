"""The warehouse's live state, folded: where each partition's loaded offsets end and which files make up the tables
and the quarantine, so that planning and readers read a bounded amount whatever the history. The ETL writes it;
its readers (``etl query``, ``audit trace``) list the live files with :func:`live_files`.

    WAREHOUSE/_etl/<group>/checkpoint.json    the state of every manifest folded so far
    WAREHOUSE/_etl/<group>/manifests/<run>.json    published commits not folded yet (usually none or one)

A manifest (etl.store) is still the commit point: it adds files (its moves), removes files (compaction, replay,
retention) and moves partitions' ends on. Folding applies the manifests on disk to the checkpoint, writes it
atomically, then deletes them; applying a manifest twice changes nothing (sets of files, maxima of ends), so a
fold killed anywhere is simply done again. The checkpoint names the manifests it folded that may still be on
disk (``folded``), so that a reader never applies a manifest on top of a checkpoint that already removed what
the manifest added.

A **snapshot** is the checkpoint plus the manifests not folded into it. :func:`read_snapshot` reads one without
the run lock: it keeps the checkpoint it read open and starts again if, by the time it read the manifests, the
checkpoint was replaced (a fold ran) or a manifest vanished (pruned). Readers (``etl query``, the quarantine
commands, compaction) read the files a snapshot lists, never a directory listing: files a commit removed stay on
disk for ``obsolete.files.keep`` (queries already reading them go on), then a fold deletes them.

The format is plain JSON (``format`` 1), so that other readers of the warehouse can follow it:

    {"format": 1, "sequence": N, "folded": [run ids],
     "loaded": {topic: {partition: end offset}},
     "files": {path relative to the warehouse: [rows, bytes]},
     "obsolete": {path: seconds since the epoch when it stopped being live}}

A table file's path is ``<topic>/date=D/hour=H/<name>.parquet``, a quarantined record's file
``_quarantine/<topic>/date=D/hour=H/<name>.parquet``.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from pipeline.durable_file import fsync_dir, make_private_dir, write_atomically

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_NAME", "Checkpoint", "HourPartition", "MANIFESTS_NAME", "QUARANTINE_DIR",
           "Snapshot", "SnapshotChanged", "group_directory", "hour_partition_of", "live_files", "read_snapshot"]

CHECKPOINT_FORMAT = 1
#: The warehouse directory of the quarantine table (one subdirectory per topic).
QUARANTINE_DIR = "_quarantine"
#: An ETL group's checkpoint file and manifest directory, in its directory (:func:`group_directory`).
CHECKPOINT_NAME = "checkpoint.json"
MANIFESTS_NAME = "manifests"
_HOUR_DIRECTORY = re.compile(r"date=([0-9]{4}-[0-9]{2}-[0-9]{2})/hour=([0-9]{1,2})")
_ATTEMPTS = 20


class SnapshotChanged(RuntimeError):
    """The warehouse kept changing while a snapshot was read (a fold at every attempt)."""


@dataclass(frozen=True, order=True)
class HourPartition:
    """One hour directory of a table or of the quarantine: ``<table>/date=D/hour=H``."""

    quarantine: bool
    topic: str
    date: str
    hour: int

    @property
    def directory(self) -> str:
        return f"{QUARANTINE_DIR + '/' if self.quarantine else ''}{self.topic}/date={self.date}/hour={self.hour}"

    def ends_at(self) -> float:
        """The end of the hour, seconds since the epoch (UTC)."""
        return calendar.timegm(time.strptime(self.date, "%Y-%m-%d")) + (self.hour + 1) * 3600.0


def hour_partition_of(path: str) -> HourPartition | None:
    """The hour partition a warehouse file belongs to (None: not a table or quarantine file)."""
    parts = path.split("/")
    quarantine = parts[0] == QUARANTINE_DIR
    if quarantine:
        parts = parts[1:]
    if len(parts) != 4:
        return None
    found = _HOUR_DIRECTORY.fullmatch(f"{parts[1]}/{parts[2]}")
    if found is None:
        return None
    return HourPartition(quarantine, parts[0], found.group(1), int(found.group(2)))


@dataclass
class Checkpoint:
    """The folded state (see the module's text); ``apply`` folds one manifest's changes in."""

    sequence: int = 0
    folded: list[str] = field(default_factory=list)
    loaded: dict[tuple[str, int], int] = field(default_factory=dict)
    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    obsolete: dict[str, float] = field(default_factory=dict)

    def apply(self, manifest: Mapping[str, Any], now: float) -> None:
        """Fold one manifest (its ``as_dict`` form): its ranges and skipped offsets move the ends on, its moves
        become live files, its removed files stop being live (obsolete from ``now``)."""
        for r in [*manifest.get("ranges", []), *manifest.get("skipped", [])]:
            key = (r["topic"], int(r["partition"]))
            self.loaded[key] = max(self.loaded.get(key, 0), int(r["end"]))
        removed = set(manifest.get("removed", []))
        for move in manifest.get("files", []):
            if move["published"] not in removed:
                self.files[move["published"]] = (int(move["rows"]), int(move["bytes"]))
        for path in removed:
            if self.files.pop(path, None) is not None:
                self.obsolete[path] = now

    def as_dict(self) -> dict[str, Any]:
        loaded: dict[str, dict[str, int]] = {}
        for (topic, partition), end in sorted(self.loaded.items()):
            loaded.setdefault(topic, {})[str(partition)] = end
        return {"format": CHECKPOINT_FORMAT, "sequence": self.sequence, "folded": sorted(self.folded),
                "loaded": loaded, "files": {p: list(v) for p, v in sorted(self.files.items())},
                "obsolete": dict(sorted(self.obsolete.items()))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Checkpoint":
        if data.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"checkpoint format {data.get('format')!r} is not {CHECKPOINT_FORMAT}")
        return cls(int(data["sequence"]), list(data.get("folded", [])),
                   {(topic, int(p)): int(end) for topic, ends in data.get("loaded", {}).items()
                    for p, end in ends.items()},
                   {p: (int(v[0]), int(v[1])) for p, v in data.get("files", {}).items()},
                   {p: float(t) for p, t in data.get("obsolete", {}).items()})

    @classmethod
    def read(cls, path: Path) -> "Checkpoint":
        """The checkpoint at ``path``; an empty one when there is none yet."""
        try:
            return cls.from_dict(read_json(path))
        except FileNotFoundError:
            return cls()

    def write(self, path: Path) -> None:
        make_private_dir(path.parent)
        write_atomically(path, json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":")).encode(), mode=0o600)


@dataclass
class Snapshot:
    """The warehouse's live state at one moment: partitions' loaded ends and live files (see the module's text)."""

    loaded: dict[tuple[str, int], int]
    files: dict[str, tuple[int, int]]

    def table_files(self) -> dict[str, list[str]]:
        """Each table's live files, by topic (paths relative to the warehouse, sorted)."""
        return self._by_topic(quarantine=False)

    def quarantine_files(self) -> dict[str, list[str]]:
        """Each topic's live quarantine files."""
        return self._by_topic(quarantine=True)

    def partitions(self) -> dict[HourPartition, list[str]]:
        """The live files of every hour partition, tables and quarantine."""
        found: dict[HourPartition, list[str]] = {}
        for path in sorted(self.files):
            partition = hour_partition_of(path)
            if partition is not None:
                found.setdefault(partition, []).append(path)
        return found

    def _by_topic(self, quarantine: bool) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for path in sorted(self.files):
            partition = hour_partition_of(path)
            if partition is not None and partition.quarantine == quarantine:
                found.setdefault(partition.topic, []).append(path)
        return found


def group_directory(warehouse: Path, group: str) -> Path:
    """The directory of one ETL group's state in ``warehouse``."""
    return warehouse / "_etl" / group


def live_files(warehouse: Path) -> dict[str, list[Path]]:
    """The live files of each table of ``warehouse``, by topic in name order (the quarantine's under
    ``_quarantine``): the snapshots of every ETL group that loads into it."""
    found: dict[str, set[str]] = {}
    groups = warehouse / "_etl"
    for group in sorted(groups.iterdir()) if groups.is_dir() else ():
        if not group.is_dir():
            continue
        state = group_directory(warehouse.absolute(), group.name)
        snapshot = read_snapshot(state / CHECKPOINT_NAME, state / MANIFESTS_NAME)
        for topic, files in snapshot.table_files().items():
            found.setdefault(topic, set()).update(files)
        for files in snapshot.quarantine_files().values():
            found.setdefault(QUARANTINE_DIR, set()).update(files)
    return {topic: [warehouse / f for f in sorted(files)] for topic, files in sorted(found.items())}


def manifest_files(directory: Path) -> list[Path]:
    """The manifests on disk, in run order."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.json"))


def read_snapshot(checkpoint_path: Path, manifests: Path) -> Snapshot:
    """A consistent snapshot of one group's state, read without the run lock (see the module's text)."""
    for _ in range(_ATTEMPTS):
        try:
            source = open(checkpoint_path, "rb")
        except FileNotFoundError:
            source = None
        try:
            checkpoint = Checkpoint.from_dict(json.load(source)) if source is not None else Checkpoint()
            try:
                pending = [read_json(p) for p in manifest_files(manifests) if p.stem not in checkpoint.folded]
            except FileNotFoundError:
                continue  # pruned by a fold meanwhile
            if _replaced(checkpoint_path, source):
                continue
        finally:
            if source is not None:
                source.close()
        now = time.time()
        for manifest in pending:
            checkpoint.apply(manifest, now)
        return Snapshot(checkpoint.loaded, checkpoint.files)
    raise SnapshotChanged(f"the warehouse's state {checkpoint_path} changed at each of {_ATTEMPTS} reads")


def _replaced(path: Path, opened: Any) -> bool:
    """Whether ``path`` is no longer the file ``opened`` (None: there was none) -- a fold wrote a new one. Holding
    the old file open keeps its inode from being reused."""
    try:
        now = os.stat(path).st_ino
    except FileNotFoundError:
        return opened is not None
    return opened is None or now != os.fstat(opened.fileno()).st_ino


def fold(checkpoint_path: Path, manifests: Path, *, now: float, keep_obsolete_s: float,
         delete: Callable[[str], None], pending: frozenset[str] = frozenset()) -> tuple[Checkpoint, int]:
    """Fold the manifests on disk into the checkpoint, delete the obsolete files older than ``keep_obsolete_s``
    (``delete(path)``: the caller removes the file and any directory it leaves empty), write the checkpoint,
    prune the manifests; (the new checkpoint, the number of manifests folded). Manifests of the runs in
    ``pending`` (their journals still have steps to do) are left for a later fold. Under the run lock only."""
    checkpoint = Checkpoint.read(checkpoint_path)
    on_disk = [p for p in manifest_files(manifests) if p.stem not in pending]
    applied = 0
    for path in on_disk:
        if path.stem not in checkpoint.folded:
            checkpoint.apply(read_json(path), now)
            applied += 1
    due = [p for p, since in checkpoint.obsolete.items() if now - since >= keep_obsolete_s]
    for path in sorted(due):
        if path in checkpoint.files:
            continue  # live again (a rerun wrote the same name): never delete a live file
        delete(path)
    for path in due:
        checkpoint.obsolete.pop(path, None)
    if applied or due:
        checkpoint.sequence += 1
        checkpoint.folded = [p.stem for p in on_disk]
        checkpoint.write(checkpoint_path)
    for path in on_disk:
        path.unlink(missing_ok=True)
    if on_disk:
        # A manifest whose removal a power cut undid would be folded again after `folded` forgot it.
        fsync_dir(manifests)
    return checkpoint, applied


def read_json(path: Path) -> Any:
    """The JSON document in ``path`` (a checkpoint, a manifest)."""
    with open(path) as source:
        return json.load(source)

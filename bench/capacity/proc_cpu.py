"""CPU time and resident memory of a supervisord tree from /proc, per process kind.

A process belongs to the kind of the nearest supervised program above it (a broker, the ETL with its Spark JVM
and Python workers, ...); supervisord itself is a kind of its own. CPU time is a process's ``utime + stime`` plus
``cutime + cstime``, the time of its children that exited and were waited for (Spark's short-lived workers), so
that a process that lived only between two samples is not missed; a child that was sampled before and exited
meanwhile brings its whole time into its parent's, so the part before the first sample is taken off again.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["ProcSample", "SUPERVISORD", "cpu_seconds_by_kind", "kinds_of", "parse_stat", "program_kind",
           "read_processes", "rss_by_kind"]

SUPERVISORD = "supervisord"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_NUMBERED = re.compile(r"(broker-[a-z0-9]+|zookeeper|emulators)-[a-z0-9]+")


@dataclass(frozen=True)
class ProcSample:
    """One process at one moment: its parent, its start (clock ticks since boot, which tells a reused pid apart),
    its CPU seconds (its own and its waited-for children's) and resident bytes."""

    ppid: int
    started: int
    cpu_s: float
    rss: int


def program_kind(name: str) -> str:
    """The kind of supervised program ``name``: broker-dc1-2 -> broker-dc1, emulators-dc2 -> emulators,
    zookeeper-1 -> zookeeper, any other its own name."""
    match = _NUMBERED.fullmatch(name)
    return match.group(1) if match else name


def parse_stat(text: str, statm: str = "0 0") -> tuple[int, ProcSample]:
    """(pid, sample) from the text of /proc/PID/stat (and /proc/PID/statm)."""
    pid = int(text[:text.index(" ")])
    fields = text[text.rindex(")") + 2:].split()
    # fields from the state on: ppid is 1, utime 11, stime 12, cutime 13, cstime 14, starttime 19
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return pid, ProcSample(int(fields[1]), int(fields[19]), ticks / _CLOCK_TICKS, int(statm.split()[1]) * _PAGE)


def read_processes(proc: Path = Path("/proc")) -> dict[int, ProcSample]:
    """Every process of the machine now (those that vanish while read are left out)."""
    found = {}
    for entry in os.listdir(proc):
        if entry.isdigit():
            try:
                stat = (proc / entry / "stat").read_text()
                statm = (proc / entry / "statm").read_text()
            except OSError:
                continue
            pid, sample = parse_stat(stat, statm)
            found[pid] = sample
    return found


def kinds_of(processes: Mapping[int, ProcSample], roots: Mapping[int, str]) -> dict[int, str]:
    """pid -> kind for every process at or below one of ``roots`` (pid -> kind); a process below two roots
    belongs to the nearest."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, sample in processes.items():
        children[sample.ppid].append(pid)
    kinds: dict[int, str] = {}
    # parents first, so that a nearer root below overrides
    todo = [(pid, kind) for pid, kind in roots.items() if pid in processes]
    while todo:
        pid, kind = todo.pop()
        kind = roots.get(pid, kind)
        if kinds.get(pid) == kind:
            continue
        kinds[pid] = kind
        todo += [(child, kind) for child in children[pid]]
    return kinds


def cpu_seconds_by_kind(before: Mapping[int, ProcSample], after: Mapping[int, ProcSample],
                        kinds: Mapping[int, str]) -> dict[str, float]:
    """CPU seconds each kind used between the two samples: a process in both (same start) by the difference, one
    started meanwhile by all its time, less the time before ``before`` of a child that exited meanwhile (its
    parent, alive in both, took all of its time into its own); ``kinds`` names the processes of ``after`` that
    count."""
    used: dict[str, float] = defaultdict(float)
    for pid, kind in kinds.items():
        now = after.get(pid)
        if now is None:
            continue
        then = before.get(pid)
        used[kind] += now.cpu_s - then.cpu_s if _same(then, now) else now.cpu_s
    for pid, then in before.items():
        parent = then.ppid
        if not _same(then, after.get(pid)) and parent in kinds and _same(before.get(parent), after.get(parent)):
            used[kinds[parent]] -= then.cpu_s
    return dict(used)


def _same(then: ProcSample | None, now: ProcSample | None) -> bool:
    """Whether two samples are of one process (a pid reused by another process has another start)."""
    return then is not None and now is not None and then.started == now.started


def rss_by_kind(processes: Mapping[int, ProcSample], kinds: Mapping[int, str]) -> dict[str, int]:
    """Resident bytes of each kind's processes together."""
    rss: dict[str, int] = defaultdict(int)
    for pid, kind in kinds.items():
        if pid in processes:
            rss[kind] += processes[pid].rss
    return dict(rss)

"""What a running deployment costs: the memory and CPU of each of its programs, and how fast each store it writes
grows, extrapolated to a day.

Start the deployment first (`make pipeline-up`, or with TOPOLOGY=...); this samples it every --every seconds for
--minutes without touching it, then prints per program the resident set (RSS) and proportional set (PSS: shared
pages counted once, what the machine really gives it) of its process tree, its CPU share (user + system time over
wall time), and per store its size at the start and end and its growth per day: the least-squares slope of its
size (bytes allocated on disk, as du counts them) over the samples, times 86,400 s. The extrapolation holds while
the rate stays as it is and before the store's retention starts deleting (a broker's log_retention_hours, the
AuditCount topic's audit_retention_hours, Prometheus's retention_time): the bound that then holds is printed
beside it.

    .venv/bin/python -m bench.deployment_footprint [--topology infra/topology.yml] [--minutes 10] [--every 30]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterable

from infra.deployment.supervisor import Supervisor
from infra.deployment.topology import DEFAULT_TOPOLOGY, Topology, load

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20
AUDIT_TOPIC_DIR = "AuditCount-"
SUPERVISORD = "supervisord"
ALL = "all (supervisord's tree)"


def allocated(paths: Iterable[Path], keep: Callable[[Path], bool] = lambda path: True) -> int:
    """Bytes allocated on disk to the files under ``paths`` that ``keep`` accepts."""
    total = 0
    for top in paths:
        for root, _, files in os.walk(top):
            for name in files:
                path = Path(root) / name
                if keep(path):
                    try:
                        total += path.lstat().st_blocks * 512
                    except FileNotFoundError:
                        pass  # deleted meanwhile
    return total


def stores(topology: Topology) -> dict[str, Callable[[], int]]:
    """Every store the deployment writes, by name: how to measure its size now."""
    var = topology.var_dir
    found: dict[str, Callable[[], int]] = {}
    for cluster in topology.clusters:
        data = [var / "data" / cluster.name]
        found[f"broker logs of {cluster.name} (event topics)"] = \
            lambda data=data: allocated(data, lambda p: not p.parent.name.startswith(AUDIT_TOPIC_DIR))
        found[f"AuditCount topic of {cluster.name}"] = \
            lambda data=data: allocated(data, lambda p: p.parent.name.startswith(AUDIT_TOPIC_DIR))
    warehouse = topology.warehouse
    found["warehouse tables"] = lambda: allocated([warehouse], lambda p: "_etl" not in p.relative_to(warehouse).parts)
    found["warehouse manifests, history, staging (_etl)"] = \
        lambda: allocated([warehouse], lambda p: "_etl" in p.relative_to(warehouse).parts)
    found["audit results (results.jsonl)"] = lambda: allocated([topology.audit_state_dir],
                                                               lambda p: p.name.startswith("results"))
    found["audit state (counts, checkpoints)"] = lambda: allocated([topology.audit_state_dir],
                                                                   lambda p: not p.name.startswith("results"))
    found["mirror state"] = lambda: allocated([var / "mirror"])
    found["ZooKeeper"] = lambda: allocated([var / "zookeeper"])
    found["Prometheus TSDB"] = lambda: allocated([var / "prometheus" / "data"])
    found["process logs (supervisord)"] = lambda: allocated([topology.logs_dir, topology.supervisor_dir])
    return found


def bounds(topology: Topology) -> dict[str, str]:
    """The retention or rotation that bounds each store, as the topology sets it."""
    found = {}
    for c in topology.clusters:
        per_partition = "no size limit" if c.log_retention_bytes < 0 else f"{c.log_retention_bytes / MIB:.0f} MiB"
        found[f"broker logs of {c.name} (event topics)"] = f"{c.log_retention_hours} h or {per_partition} a partition"
        found[f"AuditCount topic of {c.name}"] = f"{c.audit_retention_hours} h"
    found["ZooKeeper"] = f"{topology.zookeeper.snapshots_kept} snapshots"
    prometheus = topology.prometheus
    found["Prometheus TSDB"] = f"{prometheus.retention_time} or {prometheus.retention_size / MIB:.0f} MiB"
    programs = len(Supervisor(topology).infos()) + 1
    found["process logs (supervisord)"] = (f"{topology.logs.max_bytes / MIB:.0f} MiB x {topology.logs.backups + 1} "
                                           f"files x {programs}")
    return found


def process_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, CPU ticks used, RSS bytes) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[21]) * PAGE)
    return table


def pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def trees(roots: dict[str, int], table: dict[int, tuple[int, int, int]]) -> dict[str, set[int]]:
    """Each root's process and its descendants."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _, _) in table.items():
        children[parent].append(pid)
    found = {}
    for name, root in roots.items():
        members, todo = set(), [root]
        while todo:
            pid = todo.pop()
            if pid in table and pid not in members:
                members.add(pid)
                todo += children[pid]
        found[name] = members
    return found


def slope_per_day(samples: list[tuple[float, int]]) -> float:
    """The least-squares slope of (seconds, bytes), in bytes a day."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_b = sum(b for _, b in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    return 0.0 if not spread else sum((t - mean_t) * (b - mean_b) for t, b in samples) / spread * 86_400


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default=str(DEFAULT_TOPOLOGY))
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--json", metavar="FILE", help="also write the figures there")
    args = parser.parse_args()
    topology = load(args.topology)
    supervisor = Supervisor(topology)
    if not supervisor.running():
        raise SystemExit(f"the deployment of {args.topology} is not running: start it with make pipeline-up")
    measures = stores(topology)
    sizes: dict[str, list[tuple[float, int]]] = {name: [] for name in measures}
    memory: dict[str, list[tuple[int, int]]] = defaultdict(list)
    began = time.monotonic()
    first_ticks: dict[str, int] = {}
    last_ticks: dict[str, int] = {}
    while True:
        now = time.monotonic() - began
        roots = {info.name: info.pid for info in supervisor.infos() if info.running}
        table = process_table()
        groups = trees({**roots, ALL: supervisor.pid() or 0}, table)
        # supervisord's own process: its tree is every program's
        groups[SUPERVISORD] = {supervisor.pid() or 0} & set(table)
        for name, members in groups.items():
            ticks = sum(table[pid][1] for pid in members)
            first_ticks.setdefault(name, ticks)
            last_ticks[name] = ticks
            memory[name].append((sum(table[pid][2] for pid in members), sum(pss(pid) for pid in members)))
        for name, measure in measures.items():
            sizes[name].append((now, measure()))
        if now >= args.minutes * 60:
            break
        time.sleep(max(0.0, args.every - (time.monotonic() - began - now)))
    wall = time.monotonic() - began
    print(f"{len(next(iter(sizes.values())))} samples over {wall / 60:.1f} min of {topology.path}")
    print(f"\n{'program':<22} {'RSS MiB':>8} {'PSS MiB':>8} {'CPU %':>6}  (mean over the samples; CPU % of one core)")
    figures: dict[str, dict] = {"programs": {}, "stores": {}}
    for name in sorted(memory, key=lambda n: (n == ALL, n != SUPERVISORD, n)):
        rss = sum(r for r, _ in memory[name]) / len(memory[name]) / MIB
        pss_mib = sum(p for _, p in memory[name]) / len(memory[name]) / MIB
        cpu = (last_ticks[name] - first_ticks[name]) / CLOCK_TICKS / wall * 100
        figures["programs"][name] = {"rss_mib": round(rss, 1), "pss_mib": round(pss_mib, 1),
                                     "cpu_percent": round(cpu, 1)}
        print(f"{name:<22} {rss:8.1f} {pss_mib:8.1f} {cpu:6.1f}")
    limits = bounds(topology)
    print(f"\n{'store':<48} {'start MiB':>10} {'end MiB':>9} {'MiB/day':>9}  bounded by")
    for name, samples in sizes.items():
        per_day = slope_per_day(samples) / MIB
        figures["stores"][name] = {"start_mib": round(samples[0][1] / MIB, 2),
                                   "end_mib": round(samples[-1][1] / MIB, 2), "mib_per_day": round(per_day, 1)}
        print(f"{name:<48} {samples[0][1] / MIB:10.2f} {samples[-1][1] / MIB:9.2f} {per_day:9.1f}  "
              f"{limits.get(name, '(owned by its service: see its settings)')}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

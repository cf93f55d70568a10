"""The audit's cost: CPU seconds the audit service spends per million events it counts at a cluster tier.

A ZooKeeper, one broker (dc1) and a standalone registry on this machine; N emulator events stored first
(bench.etl_bench.load_events: Avro, lz4 batches, one topic per event type); then ``python -m audit run`` reads
dc1 from the start, counting every event under its topic, datacenter and window, its id into the window's sketch,
checkpointing counts and offsets every 5 s. Reported: wall time until every event was counted (a reconciled
window per event-time minute), and the audit process's CPU time (user + system, from /proc) per million events.

    .venv/bin/python -m bench.audit_bench [--events 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.etl_bench import load_events
from pipeline.zk.server import ZooKeeperServer
from tests.support.cluster import BrokerCluster
from tests.support.ports import free_port
from tests.support.process import ChildProcess, python_module
from tests.support.registry import RegistryProcess

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def counted(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/windows", timeout=5) as answer:
            windows = json.loads(answer.read())["windows"]
    except (urllib.error.URLError, OSError):
        return 0
    return sum(w["counts"].get("datacenter", 0) for w in windows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
        work = Path(tmp)
        with ZooKeeperServer(work / "zookeeper") as zookeeper, \
                BrokerCluster(work / "dc1", zookeeper.connect_string + "/dc1", 1, {"num.partitions": 1}) as dc1, \
                RegistryProcess(work / "registry.log", data_dir=work / "registry") as registry:
            records, size = load_events(dc1, registry.url, args.events, 2)
            print(f"stored {records:,} events ({size / 1e6:.1f} MB of Avro values)", flush=True)
            port = free_port()
            started = time.monotonic()
            audit = ChildProcess("audit", python_module(
                "audit", "run", "--datacenter", f"dc1={dc1.zk_connect}", "--state-dir",
                str(work / "audit"), "--registry", registry.url, "--http-port", str(port), "--grace-ms", "0",
                "--set", "reconcile.interval.ms=500",
                # the events' times lie years back (bench.etl_bench.load_events): keep their windows
                "--set", f"retain.ms={int(time.time() * 1000) - 1_600_000_000_000}"), work / "audit.log").spawn()
            try:
                deadline = started + 1800
                while counted(port) < records:
                    if not audit.running:
                        raise SystemExit(f"the audit exited with {audit.returncode}:\n{audit.log_tail()}")
                    if time.monotonic() > deadline:
                        raise SystemExit(f"the audit had not counted {records:,} events after 30 minutes")
                    time.sleep(0.5)
                elapsed = time.monotonic() - started
                cpu = cpu_seconds(audit.pid)
            finally:
                audit.stop(60)
            print(f"audit counted {records:,} events in {elapsed:.1f}s (start-up included): {cpu:.1f} CPU seconds, "
                  f"{cpu / records * 1e6:.1f} CPU seconds per million events ({records / elapsed:,.0f} events/s)")


if __name__ == "__main__":
    main()

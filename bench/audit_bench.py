"""The audit's cost: CPU seconds the audit service spends per million events it counts at a cluster tier.

A ZooKeeper, one broker (dc1) and a standalone registry on this machine; N emulator events stored first
(bench.etl_bench.load_events: Avro, lz4 batches, one topic per event type); then ``python -m audit run`` reads
dc1 from the start, counting every event under its topic, datacenter and window, its id into the window's sketch,
checkpointing counts and offsets every 5 s. Reported: wall time until every event was counted (a reconciled
window per event-time minute), and the audit process's CPU time (user + system, from /proc) per million events.

    .venv/bin/python -m bench.audit_bench [--events 1000000]

With ``--counting``, no processes: the CPU the audit's counting spends per record (EventCounter into
CheckpointedCounts, the sketch and the latency histogram, its checkpoint included), in process over --events
emulator events encoded as the emulators do (a topic's together, as one partition's), one record per call and in
batches of --batch, best of
--repeat (process_time).

    .venv/bin/python -m bench.audit_bench --counting [--events 200000] [--batch 500] [--repeat 3]

With ``--idle S``: the audit's cost with nothing to count -- the same processes, no events, the audit's CPU (from
/proc) over S seconds after a 20 s warm-up, as a share of one core.

    .venv/bin/python -m bench.audit_bench --idle 60
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from fastavro import parse_schema, schemaless_writer

from audit.metrics import AuditMetrics
from audit.readers import EventCounter
from audit.state import CheckpointedCounts
from bench.etl_bench import load_events
from pipeline.client.consumer import ConsumerRecord
from pipeline.zk.server import ZooKeeperServer
from producers.workload import Workload
from schemas.events import EVENT_TOPICS, load_schema
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


def encoded_records(events: int) -> list[ConsumerRecord]:
    """``events`` emulator events in the Confluent wire format (schema id 1), as a reader's records."""
    workload = Workload("dc1", 20)
    schemas = {topic: parse_schema(load_schema(name)) for topic, name in EVENT_TOPICS.items()}
    records: list[ConsumerRecord] = []
    now_ms = int(time.time() * 1000)
    while len(records) < events:
        for event in workload.next_events(now_ms, min(5000, events - len(records))):
            out = io.BytesIO()
            out.write(b"\x00\x00\x00\x00\x01")
            schemaless_writer(out, schemas[event.topic], event.value)
            records.append(ConsumerRecord(event.topic, 0, len(records), now_ms, event.key, out.getvalue(), ()))
        now_ms += 1000
    # A reader's batches are one partition's: a topic's records together, in order.
    return sorted(records, key=lambda record: record.topic)


def counting_cost(records: list[ConsumerRecord], batch: int, repeat: int) -> float:
    """CPU seconds per record of counting ``records`` in calls of ``batch`` (1: the record alone), a checkpoint
    at the end; best of ``repeat``."""
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="audit-counting-") as tmp:
            counts = CheckpointedCounts(Path(tmp) / "dc1-events", 10**12, lambda: 0)
            counter = EventCounter("datacenter", counts, 60_000, AuditMetrics().observe_latencies)
            started = time.process_time()
            if batch == 1:
                for record in records:
                    counter(record)
            else:
                for i in range(0, len(records), batch):
                    counter.count_all(records[i:i + batch])
            counts.save({("PageViewEvent", 0): len(records)})
            best = min(best, time.process_time() - started)
            counts.close()
    return best / len(records)


def idle_cost(audit: ChildProcess, seconds: float, profile: str | None) -> None:
    """Print the share of a core ``audit`` uses over ``seconds`` after a warm-up (py-spy's stacks to ``profile``)."""
    time.sleep(20)
    if not audit.running:
        raise SystemExit(f"the audit exited with {audit.returncode}:\n{audit.log_tail()}")
    spy = None
    if profile:
        spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(audit.pid), "-d",
                                str(int(seconds)), "-r", "50", "-f", "raw", "-o", profile],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before, started = cpu_seconds(audit.pid), time.monotonic()
    time.sleep(seconds)
    used, elapsed = cpu_seconds(audit.pid) - before, time.monotonic() - started
    print(f"idle audit (one cluster of one broker, no events): {used:.2f} CPU seconds in {elapsed:.0f} s = "
          f"{used / elapsed:.1%} of a core")
    if spy is not None:
        spy.wait(seconds + 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None, help="default 1,000,000 (200,000 with --counting)")
    parser.add_argument("--counting", action="store_true", help="the counting's CPU per record, in process")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle", type=float, default=0, metavar="S", help="the idle audit's CPU over S seconds")
    parser.add_argument("--profile", metavar="FILE", help="with --idle: py-spy's collapsed stacks of those seconds")
    args = parser.parse_args()
    if args.counting:
        records = encoded_records(args.events or 200_000)
        for batch in (1, args.batch):
            cost = counting_cost(records, batch, args.repeat)
            print(f"counting: {cost * 1e6:.2f} us CPU per record in calls of {batch} ({len(records):,} records)")
        return
    args.events = args.events or 1_000_000
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
        work = Path(tmp)
        with ZooKeeperServer(work / "zookeeper") as zookeeper, \
                BrokerCluster(work / "dc1", zookeeper.connect_string + "/dc1", 1, {"num.partitions": 1}) as dc1, \
                RegistryProcess(work / "registry.log", data_dir=work / "registry") as registry:
            records, size = (0, 0) if args.idle else load_events(dc1, registry.url, args.events, 2)
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
                if args.idle:
                    idle_cost(audit, args.idle, args.profile)
                    return
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

"""The audit's cost per round with many windows retained and few changed: one checkpoint save (bytes written and
milliseconds) and one reconciliation pass (milliseconds), after one window of many changed.
Bytes written are those this process handed to write() (/proc/self/io).

Real checkpointed counts (audit.state) in a temporary directory, filled with ``--windows`` windows at two tiers
(``producer`` from the AuditCount reader, ``datacenter`` from the events reader), each with ``--events`` ids in
its sketch, saved and reconciled once; then, ``--rounds`` times, one event is counted in one window and the
round is timed: both readers' saves (the connector's commits) and the service's reconciliation pass. The
clusters are left out: the service's readers are given the counts directly.

    .venv/bin/python -m bench.audit_round_bench [--windows 10000] [--events 20] [--rounds 20]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from audit.config import AuditConfig
from audit.service import AuditService
from audit.state import CheckpointedCounts

NOW = 1_700_000_000_000
WINDOW_MS = 60_000


def written() -> int:
    """Bytes this process has handed to write() so far."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))


def file_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    logging.getLogger("audit.service").setLevel(logging.ERROR)  # the late events each round are named duplicates
    with tempfile.TemporaryDirectory(prefix="audit-round-bench-") as tmp:
        state = Path(tmp)
        retain_ms = (args.windows + 10) * WINDOW_MS
        config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": tmp, "window.ms": WINDOW_MS,
                              "grace.ms": 0, "retain.ms": retain_ms})
        service = AuditService(config)
        events, audits = (CheckpointedCounts(state / name, retain_ms, lambda: NOW)
                          for name in ("dc1-events", "dc1-audit"))
        service._readers = [SimpleNamespace(counts=events), SimpleNamespace(counts=audits)]
        starts = [NOW - (args.windows + 1 - n) * WINDOW_MS for n in range(args.windows)]
        for start in starts:
            ids = [uuid.uuid4().bytes for _ in range(args.events)]
            for event_id in ids:
                events.count(("datacenter", "PageViewEvent", "dc1", start), 100, event_id)
                audits.count(("producer", "PageViewEvent", "dc1", start), 100, event_id)
        offset = args.windows * args.events
        began = time.perf_counter()
        events.save({("PageViewEvent", 0): offset})
        audits.save({("audit", 0): offset})
        first_save = time.perf_counter() - began
        began = time.perf_counter()
        reconciled = len(service.reconcile_closed(NOW))
        first_pass = time.perf_counter() - began
        print(f"{args.windows:,} windows x 2 tiers, {args.events} ids each: first save {first_save * 1000:.0f} ms, "
              f"state on disk {file_bytes(state) / 1e6:.1f} MB; first pass {first_pass * 1000:.0f} ms "
              f"({reconciled:,} windows reconciled)")
        saved_bytes, save_ms, pass_ms, passed = [], [], [], []
        for n in range(args.rounds):
            offset += 1
            events.count(("datacenter", "PageViewEvent", "dc1", starts[n * 7 % len(starts)]), 100,
                         uuid.uuid4().bytes)
            before = written()
            began = time.perf_counter()
            events.save({("PageViewEvent", 0): offset})
            audits.save({("audit", 0): args.windows * args.events})
            save_ms.append((time.perf_counter() - began) * 1000)
            saved_bytes.append(written() - before)
            began = time.perf_counter()
            passed.append(len(service.reconcile_closed(NOW)))
            pass_ms.append((time.perf_counter() - began) * 1000)
        print(f"per round, one window changed ({args.rounds} rounds, median): save "
              f"{statistics.median(saved_bytes) / 1e3:,.1f} kB written in "
              f"{statistics.median(save_ms):.2f} ms; reconciliation pass {statistics.median(pass_ms):.2f} ms "
              f"({statistics.median(passed):.0f} window reconciled)")
        events.close()
        audits.close()


if __name__ == "__main__":
    main()

"""Fuzz a standalone broker for hours with mutated requests of every advertised API and version.

The engine is the fuzz test's (tests/support/request_fuzzer.py): seeds generated from the message
declarations, mutated, sent over many short connections ended by resets, a normal client checked every few
hundred connections. A broker that dies is counted as a crash, its log tail kept, and started again on the
same log dir. Every --report-every seconds, and at the end, prints: frames sent, connections by outcome,
crashes, failed normal-client checks, the distinct tracebacks the broker logged, and its RSS (now and peak).

    python -m bench.broker_fuzz_bench [--hours 1] [--seed N] [--report-every 300] [--keep DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from tests.support import BrokerProcess
from tests.support.clients import create_topic
from tests.support.request_fuzzer import FuzzReport, distinct_tracebacks, fuzz

MiB = 1024 * 1024
# Seconds of fuzzing between two looks at the broker (alive? RSS?).
SLICE_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--report-every", type=float, default=300.0, help="seconds between progress reports")
    parser.add_argument("--keep", type=Path, default=None, help="keep the broker's log dir and log here")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    base = Path(tempfile.mkdtemp(prefix="broker-fuzz-"))
    broker = BrokerProcess(base / "logs", log_path=base / "broker.log", overrides={
        "socket.request.read.timeout.ms": 500, "group.initial.rebalance.delay.ms": 100, "num.partitions": 2})
    broker.start()
    create_topic(broker.bootstrap, "events", 2)
    report = FuzzReport()
    crashes: list[str] = []
    rss_start = broker.rss_bytes()
    rss_peak = rss_start
    started = time.monotonic()
    end = started + args.hours * 3600
    next_report = started + args.report_every
    slice_index = 0
    print(f"fuzzing broker {broker.bootstrap} for {args.hours} h, seed {seed}, log {broker.log_path}", flush=True)
    try:
        while time.monotonic() < end:
            fuzz(broker.host, broker.port, min(SLICE_S, end - time.monotonic()), seed + slice_index, report)
            slice_index += 1
            if not broker.is_running:
                crashes.append(f"exit code {broker.returncode} after {report.frames} frames:\n{broker.log_tail(30)}")
                print(f"CRASH {len(crashes)}: {crashes[-1]}", flush=True)
                broker.start()
            rss_peak = max(rss_peak, broker.rss_bytes())
            if time.monotonic() >= next_report or time.monotonic() >= end:
                next_report += args.report_every
                print_figures(broker, report, crashes, rss_start, rss_peak, time.monotonic() - started)
    finally:
        broker.stop()
        if args.keep is not None:
            shutil.copytree(base, args.keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)


def print_figures(broker: BrokerProcess, report: FuzzReport, crashes: list[str], rss_start: int, rss_peak: int,
                  elapsed: float) -> None:
    tracebacks = distinct_tracebacks(broker.log_text())
    log_mb = broker.log_path.stat().st_size / 1e6
    print(f"[{elapsed / 60:.0f} min] {report.summary()}; {report.frames / elapsed:.0f} frames/s; crashes "
          f"{len(crashes)}; failed normal-client checks {len(report.failed_checks)}; distinct tracebacks "
          f"{len(tracebacks)}; RSS {rss_start / MiB:.0f} MiB at start, {broker.rss_bytes() / MiB:.0f} now, "
          f"{rss_peak / MiB:.0f} peak; broker log {log_mb:.1f} MB", flush=True)
    for key, count in sorted(tracebacks.items(), key=lambda item: -item[1]):
        print(f"    {count} x {key}", flush=True)
    for failure in report.failed_checks[:5]:
        print(f"    normal client not served: {failure}", flush=True)


if __name__ == "__main__":
    main()

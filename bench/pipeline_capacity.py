"""The pipeline's capacity: the default deployment on free ports, the emulators' rate raised step by step, and per
step the CPU and memory of every process kind, whether each tier keeps up, and the latency to the offline cluster
and the warehouse.

It starts the topology (infra/topology.yml unless --topology) the way `make pipeline-up` does (`up` of
infra.deployment), from a copy whose every port is moved onto a block of free loopback ports and whose data lives
in a temporary directory, so it runs beside a deployment of your own; the ETL loads every minute (--etl-every) so
that every step sees runs of it. The rate changes by restarting only the emulators' programs (supervisord, through
`up` of the copy with the new rate: the emulators take their rate on their command line only). Once the ETL
committed its first load (Spark's JVM started), at each rate, after --warmup-seconds, it measures for
--step-seconds:

- CPU (cores, and microseconds per event sent) and RSS per process kind, from /proc for every process of
  supervisord's tree (the ETL with its Spark JVM and Python workers);
- the lag of the mirror, the ETL and the audit's readers (Prometheus, every scrape) -- bounded when its low in the
  step's second half is at most its low of the first half plus --slack-seconds of events, or when it stays within
  --slack-seconds of events throughout (the ETL: plus two periods of its schedule, a wait and a run as long);
- the ETL's runs in the step and the longest;
- the latency from event time to the mirror, the offline cluster and the warehouse (the audit's histograms);
- after the last step (and --drain-seconds at the first rate), the audit's windows overlapping each step: complete
  at each tier or not.

A tier keeps up with a rate when its lag stays bounded and its windows are complete. The table (markdown and
JSON) and the plot go to bench/results/DATE/ (--out). The deployment is taken down and its directory removed at
the end, whatever happens (Ctrl-C too).

    .venv/bin/python -m bench.pipeline_capacity [--rates 400,4000,10000,20000,30000] [--step-seconds 120]
    .venv/bin/python -m bench.pipeline_capacity --quick     # a smoke run: small topology, two low rates
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
from pathlib import Path
from typing import Any, Sequence

import yaml

from bench.capacity import probes, proc_cpu, report
from bench.capacity.keep_up import DEFAULT_SLACK_S, lag_bounded, lag_growth
from bench.capacity.topology_copy import find_base, port_free, port_runs, rewrite
from infra.deployment.lifecycle import down, up
from infra.deployment.supervisor import Supervisor
from infra.deployment.topology import DEFAULT_TOPOLOGY, REPO_ROOT, Topology, load

RESULTS = REPO_ROOT / "bench" / "results"
QUICK = {"rates": "200,600", "step_seconds": 60.0, "warmup_seconds": 20.0, "drain_seconds": 150.0, "brokers": 1,
         "security": "off"}
POLL_S = 5.0
# The ETL's first load starts Spark's JVM: on a busy machine that takes minutes (230 s at a load of 27).
FIRST_LOAD_TIMEOUT_S = 600.0


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--rates", default="400,4000,10000,20000,30000",
                        help="events per second in all (split evenly across the datacenters), one step each")
    parser.add_argument("--step-seconds", type=float, default=120.0, help="how long each rate is measured")
    parser.add_argument("--warmup-seconds", type=float, default=30.0, help="at each rate, before it is measured")
    parser.add_argument("--drain-seconds", type=float, default=180.0,
                        help="after the last step, at most this long for the audit to reconcile the steps' windows")
    parser.add_argument("--slack-seconds", type=float, default=DEFAULT_SLACK_S,
                        help="a lag whose low grows by less than this many seconds of events is bounded")
    parser.add_argument("--etl-every", default="1m", help="the ETL's schedule (the topology's etl.every)")
    parser.add_argument("--topology", type=Path, default=DEFAULT_TOPOLOGY)
    parser.add_argument("--brokers", type=int, help="brokers per cluster (replication lowered to fit); "
                        "default: as the topology says")
    parser.add_argument("--security", choices=("on", "off"), help="default: as the topology says")
    parser.add_argument("--out", type=Path, help="where the report goes (default bench/results/DATE)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items()))
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
    args.rates = [float(rate) for rate in str(args.rates).split(",")]
    if not args.rates or min(args.rates) <= 0:
        parser.error("--rates: positive events per second, comma-separated")
    return args


class _Run:
    """One deployment of the benchmark: its topology copy, started, re-rated, measured and taken down."""

    def __init__(self, args: argparse.Namespace, var_dir: Path) -> None:
        self.args = args
        self.var_dir = var_dir
        self.source = yaml.safe_load(args.topology.read_text())
        width = sum(width for _, width in port_runs(self._document(args.rates[0], 0)))
        self.base = find_base(width, port_free)
        self.topology = self._topology(args.rates[0])
        self.log = var_dir.parent / f"{var_dir.name}-up.log"
        self.seen: dict[int, int] = {}

    def _document(self, rate: float, base: int) -> dict[str, Any]:
        security = None if self.args.security is None else self.args.security == "on"
        return rewrite(self.source, base=base, var_dir=self.var_dir, rate=rate, etl_every=self.args.etl_every,
                       brokers=self.args.brokers, security=security)

    def _topology(self, rate: float) -> Topology:
        path = self.var_dir / "topology.yml"
        path.write_text(yaml.safe_dump(self._document(rate, self.base), sort_keys=False))
        return load(path)

    def up(self, rate: float, *, first: bool) -> None:
        """Up at ``rate``: everything the first time, then only the emulators (their command changed)."""
        self.topology = self._topology(rate)
        out = io.StringIO()
        try:
            up(self.topology, out, wait_for_events=first)
        finally:
            with self.log.open("a") as log:
                log.write(out.getvalue())

    def processes(self) -> tuple[dict[int, proc_cpu.ProcSample], dict[int, str]]:
        """Every process now, and the kind of each of the deployment's."""
        supervisor = Supervisor(self.topology)
        roots = {info.pid: proc_cpu.program_kind(info.name) for info in supervisor.infos() if info.pid}
        supervisord = supervisor.pid()
        if supervisord is not None:
            roots[supervisord] = proc_cpu.SUPERVISORD
        processes = proc_cpu.read_processes()
        kinds = proc_cpu.kinds_of(processes, roots)
        self.seen.update({pid: processes[pid].started for pid in kinds})
        return processes, kinds

    def wait_first_load(self) -> bool:
        """Wait until the ETL committed a first load (its lag exists), at most FIRST_LOAD_TIMEOUT_S; whether it
        did."""
        prometheus = probes.Prometheus(self.topology.prometheus_url)
        deadline = time.monotonic() + FIRST_LOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if prometheus.value(probes.LAG_QUERIES["etl"], time.time()) is not None:
                    return True
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(POLL_S)
        return False

    def measure(self, rate: float) -> dict[str, Any]:
        """One step at ``rate`` (already running): CPU, RSS, lag, the emulators' rate, latency."""
        before, _ = self.processes()
        start, began = time.time(), time.monotonic()
        time.sleep(self.args.step_seconds)
        after, kinds = self.processes()
        seconds, end = time.monotonic() - began, time.time()
        prometheus = probes.Prometheus(self.topology.prometheus_url)
        scrape = self.topology.prometheus.scrape_interval
        prometheus.wait_scraped_since(end, timeout_s=120.0)
        whole = int(round(end - start))
        sent = prometheus.value(f"sum(increase(emulator_events_sent_total[{whole}s]))", end)
        achieved = None if sent is None else sent / whole
        cpu = {kind: used / seconds for kind, used in proc_cpu.cpu_seconds_by_kind(before, after, kinds).items()}
        per_event = achieved or rate
        lag = {}
        for tier, query in probes.LAG_QUERIES.items():
            samples = prometheus.series(query, start, end, scrape)
            periods = probes.ALLOWANCE_PERIODS.get(tier, 0.0)
            allowance = self.args.slack_seconds + periods * self.topology.etl.every_seconds
            lag[tier] = {"samples": len(samples), "max": max((v for _, v in samples), default=None),
                         "last": samples[-1][1] if samples else None, "growth": lag_growth(samples),
                         "bounded": lag_bounded(samples, per_event, self.args.slack_seconds, allowance)}
        etl_runs = {name: prometheus.value(query.format(seconds=whole), end)
                    for name, query in probes.ETL_RUN_QUERIES.items()}
        rss = proc_cpu.rss_by_kind(after, kinds)
        return {"rate": rate, "achieved_rate": achieved, "start": start, "end": end, "seconds": round(seconds, 1),
                "cpu_cores": {k: round(v, 4) for k, v in cpu.items()}, "cpu_total": round(sum(cpu.values()), 4),
                "us_per_event": {k: round(v / per_event * 1e6, 1) for k, v in cpu.items()},
                "us_per_event_total": round(sum(cpu.values()) / per_event * 1e6, 1),
                "rss": rss, "rss_total": sum(rss.values()), "lag": lag, "etl_runs": etl_runs,
                "latency": prometheus.latency(end, whole)}

    def windows(self, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The audit's windows of the steps, once none is pending (or --drain-seconds passed)."""
        since = int(steps[0]["start"] * 1000) - self.topology.audit.window_ms
        deadline = time.monotonic() + self.args.drain_seconds
        while True:
            try:
                found = probes.audit_windows(self.topology, since)
            except (OSError, urllib.error.URLError, ValueError):
                found = []
            pending = any("pending" in states.values() or not states for step in steps
                          for states in probes.window_tier_states(found, int(step["start"] * 1000),
                                                                  int(step["end"] * 1000)))
            if (found and not pending) or time.monotonic() > deadline:
                return found
            time.sleep(POLL_S)

    def down(self) -> None:
        """Down (if supervisord runs), then SIGKILL any process of the deployment still alive, by pid."""
        try:
            if Supervisor(self.topology).pid() is not None:
                down(self.topology, io.StringIO())
        finally:
            for pid, started in self.seen.items():
                if _alive(pid, started):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def _alive(pid: int, started: int) -> bool:
    try:
        _, sample = proc_cpu.parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return False
    return sample.started == started


def _say(text: str) -> None:
    print(f"[{datetime.datetime.now():%H:%M:%S}] {text}", flush=True)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    # Ctrl-C and SIGTERM end the run through the finally below (SIGINT too when started with it ignored, in the
    # background of a shell)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    # short: supervisord's unix socket path lives below it
    var_dir = Path(tempfile.mkdtemp(prefix="cap-", dir="/tmp"))
    run: _Run | None = None
    interrupted = False
    steps: list[dict[str, Any]] = []
    began = time.monotonic()
    try:
        run = _Run(args, var_dir)
        _say(f"up: the deployment in {var_dir} on ports from {run.base} (log {run.log})")
        run.up(args.rates[0], first=True)
        run.processes()
        _say(f"up in {time.monotonic() - began:.0f}s; waiting for the ETL's first load")
        if not run.wait_first_load():
            _say(f"no ETL load committed within {FIRST_LOAD_TIMEOUT_S:.0f}s: its lag will be unknown")
        for index, rate in enumerate(args.rates):
            if index:
                run.up(rate, first=False)
            _say(f"{rate:,.0f} events/s: warm-up {args.warmup_seconds:.0f}s, then {args.step_seconds:.0f}s measured")
            time.sleep(args.warmup_seconds)
            step = run.measure(rate)
            steps.append(step)
            _say(f"  {step['cpu_total']:.2f} cores, {step['us_per_event_total']:,.0f} us/event, sent "
                 f"{step['achieved_rate'] or 0:,.0f}/s, lag " + ", ".join(
                     f"{t} max {v['max']}" for t, v in step["lag"].items()))
        if args.rates[-1] != args.rates[0]:
            run.up(args.rates[0], first=False)
        _say(f"drain at {args.rates[0]:,.0f} events/s: the audit's windows of the steps (at most "
             f"{args.drain_seconds:.0f}s)")
        windows = run.windows(steps)
        for step in steps:
            states = probes.window_tier_states(windows, int(step["start"] * 1000), int(step["end"] * 1000))
            step["windows"] = {tier: sum(1 for s in states if s.get(tier) == "complete") for tier in
                               ("producer", "datacenter", "mirror", "offline", "warehouse")}
            step["windows"]["all"] = len(states)
            step["keeps_up"] = report.keeps_up(step, states)
    except KeyboardInterrupt:
        _say("interrupted: taking the deployment down (the ETL first finishes a run in progress)")
        interrupted = True
        return 130
    finally:
        # a second Ctrl-C must not leave the deployment half stopped
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if run is not None:
            run.down()
            if interrupted:
                run.log.unlink(missing_ok=True)
        shutil.rmtree(var_dir, ignore_errors=True)
    document = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "topology": str(args.topology.relative_to(REPO_ROOT) if args.topology.is_relative_to(REPO_ROOT)
                                else args.topology),
                "settings": f"brokers {args.brokers or 'as given'}, security {args.security or 'as given'}, "
                            f"ETL every {args.etl_every}",
                "step_seconds": args.step_seconds, "warmup_seconds": args.warmup_seconds, "steps": steps,
                "highest_kept_up": report.highest_kept_up(steps), "wall_seconds": round(time.monotonic() - began)}
    out = args.out or RESULTS / datetime.date.today().isoformat()
    for path in report.write(document, out):
        _say(f"wrote {path}")
    print(report.markdown(document))
    if run is not None:
        run.log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

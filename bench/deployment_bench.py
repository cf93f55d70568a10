"""The whole deployment's figures: `up` wall time (processes cold, then again while running), the memory of every
process it runs, and the end-to-end latency from event time to each tier, over a run of --minutes.

It runs the default topology (infra/topology.yml: its ports, rates, windows and ETL schedule) with the data in a
temporary directory instead of var/, so a deployment of your own under var/ is not touched (its ports must be
free, though). Latency per tier comes from Prometheus (audit_tier_latency_seconds, as the dashboard shows it);
memory is the resident set of supervisord and every process below it (Spark's JVM and workers included),
sampled every 10 s.

    .venv/bin/python -m bench.deployment_bench [--minutes 12] [--topology infra/topology.yml]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from bench.etl_bench import tree_rss
from infra.deployment.lifecycle import down, up
from infra.deployment.supervisor import Supervisor
from infra.deployment.topology import DEFAULT_TOPOLOGY, Topology, load

SAMPLE_EVERY_S = 10.0
TIERS = ("mirror", "offline", "warehouse")


def quantiles(prometheus: str, minutes: int) -> dict[str, dict[str, float | None]]:
    """p50 and p99 latency (s) from event time to each tier over the last ``minutes``, all topics together."""
    found: dict[str, dict[str, float | None]] = {}
    for q in (0.5, 0.99):
        query = (f"histogram_quantile({q}, sum by (le, tier) "
                 f"(increase(audit_tier_latency_seconds_bucket[{minutes}m])))")
        url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            for series in json.loads(answer.read())["data"]["result"]:
                value = float(series["value"][1])
                found.setdefault(series["metric"]["tier"], {})[f"p{int(q * 100)}"] = \
                    None if value != value else round(value, 2)
    return found


def timed_up(topology: Topology) -> tuple[float, str]:
    out = io.StringIO()
    began = time.monotonic()
    up(topology, out)
    return time.monotonic() - began, out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=12, help="how long it runs before the latency is read")
    parser.add_argument("--topology", type=Path, default=DEFAULT_TOPOLOGY)
    args = parser.parse_args()
    var_dir = Path(tempfile.mkdtemp(prefix="pl-bench-"))
    document = yaml.safe_load(args.topology.read_text())
    document["var_dir"] = str(var_dir)
    path = var_dir / "topology.yml"
    path.write_text(yaml.safe_dump(document))
    topology = load(path)
    try:
        cold_s, _ = timed_up(topology)
        warm_s, _ = timed_up(topology)
        print(f"up: {cold_s:.1f}s with nothing running (until the first events reached the offline cluster), "
              f"{warm_s:.1f}s again while running", flush=True)
        supervisor_pid = Supervisor(topology).pid()
        assert supervisor_pid is not None
        peak = 0
        deadline = time.monotonic() + args.minutes * 60
        while time.monotonic() < deadline:
            rss = tree_rss(supervisor_pid)
            peak = max(peak, rss)
            time.sleep(SAMPLE_EVERY_S)
        last = tree_rss(supervisor_pid)
        per_program = {info.name: tree_rss(info.pid) for info in Supervisor(topology).infos() if info.pid}
        print(f"memory of the whole deployment: {last / 2**20:.0f} MiB now, {peak / 2**20:.0f} MiB at most "
              f"(sampled every {SAMPLE_EVERY_S:.0f}s)")
        for name, rss in sorted(per_program.items(), key=lambda item: -item[1]):
            print(f"  {name:<20} {rss / 2**20:7.0f} MiB")
        latency = quantiles(topology.prometheus_url, args.minutes)
        print(f"latency from event time over the last {args.minutes} min (s): "
              + ", ".join(f"{tier} p50 {latency.get(tier, {}).get('p50')} p99 {latency.get(tier, {}).get('p99')}"
                          for tier in TIERS))
        began = time.monotonic()
        down(topology, io.StringIO())
        print(f"down: {time.monotonic() - began:.1f}s")
    finally:
        if Supervisor(topology).pid() is not None:
            down(topology, io.StringIO())
        shutil.rmtree(var_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

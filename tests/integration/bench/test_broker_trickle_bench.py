"""bench.broker_trickle_bench, briefly: a replicated cluster under a trickle of produce requests and read_committed
consumers reports each broker's CPU and requests and the cluster's CPU per request and per event."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(180)
def test_the_trickle_bench_reports_cpu_per_request_and_per_event():
    run = subprocess.run([sys.executable, "-m", "bench.broker_trickle_bench", "--seconds", "4", "--settle", "4",
                          "--topics", "2", "--partitions", "2", "--consumers", "1"],
                         cwd=REPO, capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    brokers = re.findall(r"^  broker (\d): +[\d.]+% of a core, +([\d.]+) produce/s, +([\d.]+) fetch/s", run.stdout,
                         re.MULTILINE)
    assert sorted(b[0] for b in brokers) == ["1", "2", "3"], run.stdout
    assert sum(float(b[1]) for b in brokers) > 0 and sum(float(b[2]) for b in brokers) > 0, run.stdout
    cluster = re.search(r"^  cluster: .* ([\d]+) us CPU per request, +([\d]+) us CPU per event$", run.stdout, re.MULTILINE)
    assert cluster and int(cluster.group(1)) > 0 and int(cluster.group(2)) > 0, run.stdout

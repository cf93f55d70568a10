"""bench.mirror_eos with a tiny count: both modes copy everything and report a committed rate and their ratio."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(180)
def test_mirror_eos_bench_measures_both_modes():
    run = subprocess.run([sys.executable, "-m", "bench.mirror_eos", "--messages", "20000", "--interval-ms", "200"],
                         cwd=REPO, capture_output=True, text=True, timeout=170)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rates = dict(re.findall(r"^  (at-least-once|exactly-once): ([\d,]+) records/s", run.stdout, re.MULTILINE))
    assert set(rates) == {"at-least-once", "exactly-once"}, run.stdout
    assert all(int(rate.replace(",", "")) > 0 for rate in rates.values())
    assert re.search(r"exactly once / at least once: \d+\.\d\d", run.stdout), run.stdout

"""bench.transaction_bench with tiny counts (--smoke): every produce and fetch case runs and reports a rate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(180)
def test_transaction_bench_smoke_runs_every_case():
    run = subprocess.run([sys.executable, "-m", "bench.transaction_bench", "--smoke"], cwd=REPO, capture_output=True,
                         text=True, timeout=170)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {line.rsplit(None, 3)[0].strip(): line.split()[-2] for line in run.stdout.splitlines()[1:] if line.strip()}
    assert set(rows) == {"produce idempotent", "produce transactional, 10/transaction",
                         "produce transactional, 1000/transaction", "fetch plain, read_uncommitted",
                         "fetch plain, read_committed", "fetch mixed, read_uncommitted", "fetch mixed, read_committed"}
    assert all(float(rate.replace(",", "")) > 0 for rate in rows.values()), run.stdout

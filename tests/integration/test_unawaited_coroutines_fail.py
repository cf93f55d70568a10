"""A coroutine dropped without being awaited fails the test that dropped it, suite-wide (tests/conftest.py):
that is how a request read but never executed showed itself (issue 26)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

DROPPING_TEST = '''
import gc


async def commit():
    return "committed"


def test_drops_a_coroutine():
    commit()  # never awaited
    gc.collect()
'''


def test_a_test_that_drops_a_coroutine_fails(tmp_path):
    (tmp_path / "test_dropping.py").write_text(DROPPING_TEST)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                             "--rootdir", str(tmp_path), str(tmp_path / "test_dropping.py")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "was never awaited" in result.stdout

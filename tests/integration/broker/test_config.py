"""Broker configuration as the `python -m broker` process reports it: a bad setting stops the start with one line."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO_ROOT


def test_a_bad_override_is_a_one_line_start_up_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "broker", "--log-dir", str(tmp_path), "--port", "0",
                             "--override", "log.segment.bytes=3000000000"],
                            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m broker: error: broker property log.segment.bytes=3000000000 is above its maximum 2147483647"]

"""The layer order holds: `lint-imports` keeps every contract of pyproject.toml's [tool.importlinter] (pipeline ->
schemas -> the services, which never import one another -> infra -> tests -> bench; the broker's own layers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout

"""What the deployment writes is its owner's only: every service's start (pipeline.service.write_owner_only) and
the var directory of an older deployment, tightened by ``up``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from infra.deployment.lifecycle import restrict_to_owner
from pipeline.service import write_owner_only


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_service_creates_its_files_and_directories_for_its_owner_only(tmp_path: Path) -> None:
    before = os.umask(0o022)
    try:
        assert write_owner_only() == 0o022
        (tmp_path / "state").mkdir()
        (tmp_path / "state" / "offsets").write_text("0\n")
        os.makedirs(tmp_path / "a" / "b")
        assert mode(tmp_path / "state") == mode(tmp_path / "a" / "b") == 0o700
        assert mode(tmp_path / "state" / "offsets") == 0o600
    finally:
        os.umask(before)


def test_up_takes_group_and_other_permissions_away_from_an_older_var_directory(tmp_path: Path) -> None:
    var = tmp_path / "var"
    (var / "data" / "dc1").mkdir(parents=True)
    (var / "data" / "dc1" / "00000000000000000000.log").write_text("x")
    (var / "logs").mkdir()
    (var / "logs" / "mirror.log").write_text("y")
    script = var / "run.sh"
    script.write_text("#!/bin/sh\n")
    outside = tmp_path / "outside"
    outside.write_text("not the deployment's")
    (var / "link").symlink_to(outside)
    for path, permissions in ((var, 0o755), (var / "data", 0o775), (var / "data" / "dc1", 0o777),
                              (var / "data" / "dc1" / "00000000000000000000.log", 0o644), (var / "logs", 0o750),
                              (var / "logs" / "mirror.log", 0o666), (script, 0o755), (outside, 0o644)):
        path.chmod(permissions)
    restrict_to_owner(var)
    assert {str(p.relative_to(var)): mode(p) for p in [var, *var.rglob("*")] if not p.is_symlink()} == {
        ".": 0o700, "data": 0o700, "data/dc1": 0o700, "data/dc1/00000000000000000000.log": 0o600, "logs": 0o700,
        "logs/mirror.log": 0o600, "run.sh": 0o700}
    # what a link points to is not the deployment's
    assert mode(outside) == 0o644

"""A wheel built from the tree holds infra with the files it reads at run time, and registers its subcommands of
`python -m pipeline` (so that `python -m pipeline status` works from an installed wheel)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]

#: What the wheel is built from: the packages pyproject.toml lists, and the files its metadata names.
SOURCES = ("pyproject.toml", "README.md", "pipeline", "schemas", "broker", "producers", "mirror", "etl", "audit",
           "infra")


def test_a_wheel_of_the_tree_holds_infra_its_data_files_and_its_pipeline_subcommands(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                    "--wheel-dir", str(tmp_path / "wheels"), str(source)], check=True, timeout=240)
    (wheel,) = (tmp_path / "wheels").glob("kafka_pipeline-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points_file = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(archive.read(entry_points_file).decode())
    for needed in ("infra/__init__.py", "infra/deployment/cli.py", "infra/deployment/pipeline_commands.py",
                   "infra/prometheus/config.py", "infra/topology.yml", "infra/prometheus/rules/alerts.yml",
                   "infra/prometheus/rules/recording.yml", "audit/dashboard/index.html"):
        assert needed in names, needed
    assert dict(entry_points["kafka_pipeline.commands"]) == {"status": "infra.deployment.pipeline_commands",
                                                            "chaos": "infra.deployment.pipeline_commands"}

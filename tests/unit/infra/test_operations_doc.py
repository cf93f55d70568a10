"""docs/operations.md is what the code renders now, and renders the same way every time."""

from __future__ import annotations

import subprocess
import sys

from infra.deployment.topology import REPO_ROOT
from infra.docs.operations import OPERATIONS_DOC, render_operations


def test_operations_doc_is_current() -> None:
    written = OPERATIONS_DOC.read_text() if OPERATIONS_DOC.is_file() else ""
    assert written == render_operations(), "docs/operations.md is stale: run make docs"


def test_rendering_is_deterministic_across_processes() -> None:
    # string hashing differs between processes: sets and dicts must not leak their order into the page
    check = [sys.executable, "-m", "infra.docs", "--check"]
    for seed in ("1", "2"):
        done = subprocess.run(check, cwd=REPO_ROOT, env={"PYTHONHASHSEED": seed, "PATH": ""}, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr


def test_page_names_every_service_setting_and_metric() -> None:
    page = render_operations()
    for expected in ("`log.segment.bytes`", "`warehouse.dir`", "`source.clusters`", "`grace.ms`",
                     "`kafka_server_brokertopicmetrics_messages_in_total`", "`mirror_records_total`",
                     "`etl_runs_total`", "`audit_events_lost_total`", "`schema_registry_requests_total`",
                     "`emulator_events_sent_total`", "| 9092 | broker 1 of dc1 |", "`broker-offline-3`"):
        assert expected in page

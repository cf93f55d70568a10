"""The benchmark harness with tiny counts (python -m bench.run --smoke): every system, every test type, the JSON schema.

Starts our broker, RabbitMQ, ActiveMQ and NATS JetStream one after the other on free loopback ports (the
harness stops each by its pid) and checks results.json, report.md and the plots in a temp dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SYSTEMS = {"ours", "rabbitmq", "activemq", "nats-jetstream"}
ROW_KEYS = {"system", "test", "batch", "acks", "messages", "msgs_per_s", "mb_per_s", "disk_bytes_per_msg"}

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _session_members(session_id: int) -> set[int]:
    """Pids of the live processes in session ``session_id`` (the bench run and whatever it started)."""
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            if fields[0] != b"Z" and int(fields[3]) == session_id:
                members.add(int(entry))
    return members


@pytest.mark.timeout(240)
def test_smoke_run_measures_every_system_and_writes_the_report(tmp_path):
    out = tmp_path / "report"
    # In a session of its own, so that whatever it leaves running is found by session id (orphans are
    # re-parented, so "children of the test" would miss them; ZooKeeper of other tests is not in it).
    run = subprocess.Popen([sys.executable, "-m", "bench.run", "--smoke", "--out", str(out)], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = run.communicate(timeout=220)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 0, stdout[-3000:] + stderr[-3000:]

    document = json.loads((out / "results.json").read_text())
    assert {"date", "machine", "results"} <= set(document)
    assert document["errors"] == {}
    results = document["results"]
    for row in results:
        assert ROW_KEYS <= set(row), row
        assert row["system"] in SYSTEMS and row["test"] in ("produce", "consume")
        assert row["messages"] == 2000
        assert row["msgs_per_s"] > 0 and row["mb_per_s"] > 0
        # Every system stores at least the 200-byte payload of each message.
        assert row["disk_bytes_per_msg"] >= 200, row
    for system in SYSTEMS:
        tests = {row["test"] for row in results if row["system"] == system}
        assert tests == {"produce", "consume"}, (system, tests)
        assert document["latency"][system]["samples"] == 500
    ours = {(row["batch"], row["acks"]) for row in results if row["system"] == "ours" and row["test"] == "produce"}
    assert ours == {(b, a) for b in (1, 50, 200, 1000) for a in (0, 1)}
    assert set(document["broker_only"]["fetch"]) == {"sendfile", "read_and_send"}
    assert all(course for course in document["courses"].values())

    report = (out / "report.md").read_text()
    assert "Figure 4" in report and "Figure 5" in report and "22,000" in report
    for image in ("produce_course.png", "produce.png", "consume.png", "storage.png"):
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({image})" in report
    assert not _session_members(run.pid)

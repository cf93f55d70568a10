"""The audit's state stays bounded by retain.ms while it runs, whatever the time running: results.jsonl is rewritten
with the retained windows once it doubled, the checkpoints drop the windows past retention (also while a cluster
gets nothing new), and all of it is its owner's only (0700/0600, whatever the umask). The HTTP server listens where
it is told. (Real files over a simulated clock; no cluster.)"""

from __future__ import annotations

import os
import stat
import uuid
from types import SimpleNamespace

import audit.results
import audit.state
from audit.config import AuditConfig
from audit.http_api import AuditHttpServer
from audit.service import AuditService
from audit.state import CheckpointedCounts
from tests.support.audit import listening_addresses

WINDOW = 1000
RETAIN = 60_000
START = 1_700_000_000_000


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_results_are_rewritten_while_running_so_their_size_follows_the_windows_retained(tmp_path, monkeypatch):
    monkeypatch.setattr(audit.results, "MIN_COMPACT_BYTES", 16 << 10)
    clock = Clock(START)
    config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path), "window.ms": WINDOW,
                          "grace.ms": 0, "retain.ms": RETAIN})
    service = AuditService(config)
    readers = [SimpleNamespace(counts=CheckpointedCounts(tmp_path / name, RETAIN, clock))
               for name in ("dc1-events", "dc1-audit")]
    service._readers = readers
    events, audits = (r.counts for r in readers)
    sizes = []
    try:
        for n in range(20 * RETAIN // WINDOW):  # twenty times the windows retained
            start = START + n * WINDOW
            ids = [uuid.uuid4().bytes for _ in range(3)]
            for event_id in ids:
                audits.count(("producer", "PageViewEvent", "dc1", start), 100, event_id)
                events.count(("datacenter", "PageViewEvent", "dc1", start), 100, event_id)
            clock.now = start + WINDOW
            assert len(service.reconcile_closed(clock.now)) == 1
            sizes.append(service.results_log.size())
        retained = len(service.results)
        assert retained <= RETAIN // WINDOW + 1
        # Without the rewrites the file would hold every window reconciled, 1200 lines.
        lines = service.results_log.path.read_text().splitlines()
        assert service.results_log.compacted_bytes is not None and len(lines) < 4 * retained
        line = max(len(text) + 1 for text in lines)
        assert max(sizes) <= max(16 << 10, 2 * service.results_log.compacted_bytes) + line
        assert set(service.results_log.read(clock.now - RETAIN)) == set(service.results)
    finally:
        for reader in readers:
            reader.counts.close()


def test_checkpoints_stay_bounded_by_the_windows_retained(tmp_path, monkeypatch):
    monkeypatch.setattr(audit.state, "MIN_COMPACT_BYTES", 32 << 10)
    clock = Clock(START)
    counts = CheckpointedCounts(tmp_path / "dc1-events", RETAIN, clock)
    offset = 0
    largest = 0
    try:
        for n in range(10 * RETAIN // WINDOW):
            start = START + n * WINDOW
            for _ in range(3):
                counts.count(("datacenter", "PageViewEvent", "dc1", start), 100, uuid.uuid4().bytes)
                offset += 1
            clock.now = start + WINDOW
            counts.save({("PageViewEvent", 0): offset})
            largest = max(largest, counts.checkpoint_path.stat().st_size if counts.checkpoint_path.exists() else 0,
                          counts.checkpoint_path.stat().st_size + counts.journal_path.stat().st_size
                          if counts.checkpoint_path.exists() else counts.journal_path.stat().st_size)
        retained = len(counts.snapshot())
        assert retained <= RETAIN // WINDOW + 1
        one_window = 6000  # a window's count and sketch, as written
        assert largest < 3 * retained * one_window + (32 << 10), largest
    finally:
        counts.close()


def test_windows_past_retention_are_dropped_while_a_cluster_gets_nothing_new(tmp_path):
    clock = Clock(START)
    counts = CheckpointedCounts(tmp_path / "dc1-events", RETAIN, clock)
    counts.count(("datacenter", "PageViewEvent", "dc1", START), 100, uuid.uuid4().bytes)
    counts.save({("PageViewEvent", 0): 1})
    clock.now = START + 2 * RETAIN
    counts.expire()
    assert counts.snapshot() == {}
    counts.close()
    again = CheckpointedCounts(tmp_path / "dc1-events", RETAIN, clock)
    try:
        assert again.snapshot() == {} and again.load() == {("PageViewEvent", 0): 1}
    finally:
        again.close()


def test_the_state_is_its_owner_s_only_whatever_the_umask(tmp_path, umask_022):
    state = tmp_path / "audit"
    counts = CheckpointedCounts(state / "dc1-events", RETAIN, Clock(START))
    try:
        counts.count(("datacenter", "PageViewEvent", "dc1", START), 100, uuid.uuid4().bytes)
        counts.save({("PageViewEvent", 0): 1})
        counts._write_checkpoint(audit.state._encode(counts._everything(None)))
    finally:
        counts.close()
    log = audit.results.ResultLog(state / "results.jsonl")
    log.append([{"topic": "T", "datacenter": "dc1", "windowStart": 0, "windowEnd": 1}])
    assert mode(state) == 0o700
    files = sorted(p.name for p in state.iterdir())
    assert files == ["dc1-events.checkpoint", "dc1-events.journal", "dc1-events.lock", "results.jsonl"]
    assert {p.name: mode(p) for p in state.iterdir()} == dict.fromkeys(files, 0o600)
    log.rewrite(log.read().values())
    assert mode(state / "results.jsonl") == 0o600


def test_the_http_server_listens_on_the_address_it_is_given(tmp_path):
    config = AuditConfig({"datacenters": "dc1=127.0.0.1:1", "state.dir": str(tmp_path)})
    assert config["http.host"] == "0.0.0.0"
    server = AuditHttpServer(AuditService(config), "127.0.0.1", 0).start()
    try:
        assert listening_addresses(server.port) == ["127.0.0.1"]
    finally:
        server.stop()

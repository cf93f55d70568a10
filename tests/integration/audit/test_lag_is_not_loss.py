"""Lag is not loss (real ZooKeeper, two clusters, schema registry, emulators, mirror and audit processes): the
mirror is paused (SIGSTOP) for several windows past their grace while the emulators keep producing, then let go.
Meanwhile the windows are pending at the mirror and offline tiers with their lag -- in the JSON API and in
audit_pending_windows -- and no event is ever named lost; once the mirror caught up, every window is complete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from schemas.events import AUDIT_TOPIC, EVENT_TOPICS
from tests.support.audit import WINDOW_MS, AuditProcess, audit_args, wait_committed
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.mirror import MirrorProcess, create_topic, end_offsets, mirror_args
from tests.support.polling import wait_until
from tests.support.registry import RegistryProcess
from tests.support.zookeeper import unique_chroot

GRACE_MS = 2000
PAUSE_S = 6.0


class Watcher:
    """Polls the audit's windows in the background and keeps every state each window was seen in, every event named
    lost, and the pending tiers' lag and the pending gauges seen."""

    def __init__(self, audit: AuditProcess) -> None:
        self.audit = audit
        self.states: dict[tuple[str, int], list[str]] = {}
        self.lost: list[dict[str, Any]] = []
        self.pending_lag: list[dict[str, Any]] = []
        self.pending_gauges: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Watcher":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.poll()

    def poll(self) -> list[dict[str, Any]]:
        windows = self.audit.get("/api/windows")["windows"]
        for w in windows:
            seen = self.states.setdefault((w["topic"], w["windowStart"]), [])
            if not seen or seen[-1] != w["state"]:
                seen.append(w["state"])
            if w["lostEvents"]:
                self.lost.append(w)
            if "mirror" in w["pending"]:
                self.pending_lag.append(w["pending"]["mirror"])
        metrics = self.audit.get("/metrics")
        self.pending_gauges += [line for line in metrics.splitlines()
                                if line.startswith('audit_pending_windows{tier="mirror"}') and not line.endswith(" 0.0")]
        return windows


def test_a_paused_mirror_leaves_its_windows_pending_never_lost_and_they_complete_once_it_caught_up(
        zookeeper_server: Any, broker_cluster_factory: Callable[..., BrokerCluster], registry: RegistryProcess,
        tmp_path: Path) -> None:
    base = zookeeper_server.connect_string
    dc1, offline = (broker_cluster_factory(base + unique_chroot(name), size=1,
                                           overrides={"zookeeper.session.timeout.ms": 4000, "num.partitions": 1})
                    for name in ("dc1", "offline"))
    for topic in EVENT_TOPICS:
        create_topic(dc1, topic, 2)
    create_topic(dc1, AUDIT_TOPIC, 1)
    create_topic(offline, AUDIT_TOPIC, 1)
    audit = AuditProcess(tmp_path, audit_args(dc1, offline, registry, tmp_path / "audit", "--grace-ms", str(GRACE_MS)))
    # The mirror's ZooKeeper session outlives the pause: paused, not dead (no rebalance, no copy sent twice).
    args = [a for a in mirror_args({"dc1": dc1}, offline, ",".join(EVENT_TOPICS)) if a != "--no-audit"]
    mirror = MirrorProcess(tmp_path / "mirror.log", [*args, "--registry", registry.url, "--set",
                                                     f"audit.window.ms={WINDOW_MS}", "--set",
                                                     "consumer.zookeeper.session.timeout.ms=30000"])
    emulator = None
    try:
        audit.wait_ready()
        mirror.start()
        emulator = subprocess.Popen(
            [sys.executable, "-m", "producers", "--datacenter", "dc1", "--zookeeper", dc1.zk_connect, "--registry",
             registry.url, "--servers", "2", "--members", "500", "--rate", "150", "--duration", "12",
             "--audit-window-ms", str(WINDOW_MS)], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with Watcher(audit) as watcher:
            wait_until(lambda: any(s[-1] == "complete" for s in watcher.states.values()), 60, interval=0.3,
                       message="a first window complete")
            os.kill(mirror.process.pid, signal.SIGSTOP)
            try:
                wait_until(lambda: watcher.pending_lag, 30, interval=0.2, message="a window pending at the mirror")
                time.sleep(PAUSE_S)  # the mirror stays paused past several windows' grace
            finally:
                os.kill(mirror.process.pid, signal.SIGCONT)
            assert emulator.wait(60) == 0, emulator.stderr.read().decode()[-2000:]
            wait_committed(dc1, mirror)
            stored = sum(sum(end_offsets(dc1, topic, 2).values()) for topic in EVENT_TOPICS)

            def all_complete() -> list[dict[str, Any]]:
                windows = watcher.poll()
                counted = sum(w["counts"].get("offline", 0) for w in windows)
                return windows if counted == stored and all(w["state"] == "complete" for w in windows) else []
            windows = wait_until(all_complete, 90, interval=0.5, message=lambda: "every window complete: " + str(
                [(w["topic"], w["windowStart"], w["state"], w["pending"], w["tierStates"]) for w in watcher.poll()
                 if w["state"] != "complete"][:5]))
        assert watcher.lost == [], watcher.lost[:3]
        assert "\naudit_events_lost_total{" not in audit.get("/metrics")  # nothing ever counted lost
        went_pending = [k for k, states in watcher.states.items() if "pending" in states]
        assert went_pending and all(watcher.states[k][-1] == "complete" for k in went_pending)
        assert any(lag["lagRecords"] for lag in watcher.pending_lag), watcher.pending_lag[:3]
        assert watcher.pending_gauges
        assert all(w["counts"]["producer"] == w["counts"]["offline"] for w in windows)
        assert audit.stop() == 0, audit.log_path.read_text()[-3000:]
        assert mirror.stop() == 0, mirror.log_tail()
    finally:
        if mirror.process is not None and mirror.process.poll() is None:
            os.kill(mirror.process.pid, signal.SIGCONT)
        mirror.kill()
        audit.kill()
        if emulator is not None and emulator.poll() is None:
            emulator.kill()
            emulator.wait()

"""`infra/demo.py up|down` (behind make pipeline-up/down) end to end, in a temporary var dir on free ports.

`up` must start ZooKeeper, three brokers and the schema registry, pass its own checks (topic over the 3
brokers, produce, a consumer group reading everything, lag 0, the emulators' audit equal to the events
stored) and leave the processes running; a second `up` reuses them;
`down` must stop every process it started (the Java ZooKeeper under its launcher included) and be
idempotent; it also stops a standalone broker left by the earlier single-broker demo.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port
from tests.support.polling import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "infra" / "demo.py"
BROKERS = 3


def consecutive_free_ports(count: int) -> int:
    """The first of ``count`` consecutive loopback ports nothing listens on right now."""
    for _ in range(50):
        first = free_port()
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (e.g. the java process under the ZooKeeper launcher)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        for child in children:
            found |= {child} | descendants(child)
    return found


@pytest.fixture
def demo_env(tmp_path: Path):
    """Environment for the demo: its own var dir and free ports; kills whatever it left behind after the test."""
    var = tmp_path / "var"
    env = {**os.environ, "DEMO_VAR_DIR": str(var), "DEMO_ZOOKEEPER_PORT": str(free_port()),
           "DEMO_BROKER_PORT": str(consecutive_free_ports(BROKERS)), "DEMO_REGISTRY_PORT": str(free_port())}
    started: set[int] = set()
    yield env, var, started
    # After a failed assertion: whatever the pid files name (and below it) may still run.
    if var.is_dir():
        for pid in pid_files(var).values():
            if alive(pid):
                started |= {pid} | descendants(pid)
    if any(alive(pid) for pid in started):
        subprocess.run([sys.executable, str(DEMO), "down"], env=env, capture_output=True, timeout=60)
    for pid in started:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def run_demo(env: dict, action: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DEMO), action], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pid_files(var: Path) -> dict[str, int]:
    return {path.stem: int(path.read_text()) for path in sorted(var.glob("*.pid"))}


def test_up_checks_the_cluster_reuses_it_and_down_stops_everything(demo_env):
    env, var, started = demo_env
    first = run_demo(env, "up")
    assert first.returncode == 0, first.stdout + first.stderr
    pids = pid_files(var)
    assert set(pids) == {"zookeeper", "broker-1", "broker-2", "broker-3", "schema-registry"}
    started |= set(pids.values())
    java = descendants(pids["zookeeper"])
    assert java, "the ZooKeeper launcher should run the Java server as its child"
    started |= java
    assert all(alive(pid) for pid in started)
    assert "Brokers: 3" in first.stdout and "OK in" in first.stdout
    assert "producer audit counts (server, topic, 5 s window) equal the events stored" in first.stdout
    for broker_id in range(1, BROKERS + 1):
        assert (var / "dc1" / f"broker-{broker_id}").is_dir()
        assert (var / f"broker-{broker_id}.log").exists()

    again = run_demo(env, "up")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("reusing it") == BROKERS + 2
    assert pid_files(var) == pids
    # The group reads only this run's messages: its committed offsets cover the first run's.
    assert "group demo-readers read 5000 messages" in again.stdout

    down = run_demo(env, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert [pid for pid in started if alive(pid)] == []
    assert pid_files(var) == {}
    assert down.stdout.index("stopped schema registry") < down.stdout.index("stopped broker") \
        < down.stdout.index("stopped ZooKeeper")

    down_again = run_demo(env, "down")
    assert down_again.returncode == 0, down_again.stdout + down_again.stderr
    assert down_again.stdout.strip() == "no demo process running"


def test_down_stops_the_earlier_standalone_broker(demo_env):
    env, var, started = demo_env
    var.mkdir()
    port = int(env["DEMO_BROKER_PORT"])
    with open(var / "broker.log", "ab") as log:
        broker = subprocess.Popen([sys.executable, "-m", "broker", "--log-dir", str(var / "broker-logs"),
                                   "--port", str(port)], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    started.add(broker.pid)
    try:
        (var / "broker.pid").write_text(f"{broker.pid}\n")
        wait_until(lambda: listening(port), 30, message="the standalone broker listening")
        down = run_demo(env, "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert broker.wait(5) == 0
        assert f"stopped standalone broker (earlier demo) pid {broker.pid}" in down.stdout
        assert not (var / "broker.pid").exists()
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()


def test_up_fails_clearly_when_a_broker_cannot_start(demo_env):
    env, var, started = demo_env
    second_port = int(env["DEMO_BROKER_PORT"]) + 1
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", second_port))
        squatter.listen()
        up = run_demo(env, "up")
        pids = pid_files(var)
        for pid in pids.values():
            started |= {pid} | descendants(pid)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "broker 2 exited with" in up.stderr and "broker-2.log" in up.stderr
    down = run_demo(env, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert [pid for pid in started if alive(pid)] == []

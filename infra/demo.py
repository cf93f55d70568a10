"""The demo behind `make pipeline-up` / `make pipeline-down`.

Until the pipeline exists, "the pipeline" is one standalone broker: `up` starts `python -m broker` in the
background (log dir, log file and pid file under ./var/), waits until it answers, creates a topic, produces
a few thousand messages with kcat, reads them back with kcat and checks the count. Running `up` again while
the broker runs reuses it. `down` sends SIGTERM to the pid in the pid file and waits for the exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VAR = REPO_ROOT / "var"
LOG_DIR = VAR / "broker-logs"
LOG_FILE = VAR / "broker.log"
PID_FILE = VAR / "broker.pid"
PORT = int(os.environ.get("DEMO_BROKER_PORT", "9092"))
HOST = "127.0.0.1"
TOPIC = "demo-events"
PARTITIONS = 4
MESSAGES = 5000


def read_pid() -> int | None:
    """The pid in the pid file if that process is alive, else None."""
    try:
        pid = int(PID_FILE.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return None
    # A recycled pid belongs to some other program: only a `-m broker` process is ours.
    return pid if b"broker" in cmdline else None


def broker_answers(timeout: float) -> bool:
    """Whether a kafka-python admin client can bootstrap from the broker within ``timeout`` seconds."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            KafkaAdminClient(bootstrap_servers=f"{HOST}:{PORT}", client_id="demo", request_timeout_ms=3000).close()
            return True
        except KafkaError:
            time.sleep(0.2)
    return False


def start_broker() -> int:
    """Start the broker detached from this process (own session), stderr to var/broker.log; return its pid."""
    VAR.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "broker", "--log-dir", str(LOG_DIR), "--host", HOST, "--port", str(PORT),
               "--override", f"num.partitions={PARTITIONS}"]
    with open(LOG_FILE, "ab") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    PID_FILE.write_text(f"{process.pid}\n")
    print(f"started broker pid {process.pid} on {HOST}:{PORT} (log dir {LOG_DIR.relative_to(REPO_ROOT)}, "
          f"log {LOG_FILE.relative_to(REPO_ROOT)})")
    return process.pid


def ensure_topic() -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{PORT}", client_id="demo")
    try:
        if TOPIC in admin.list_topics():
            print(f"topic {TOPIC} exists")
            return
        admin.create_topics({TOPIC: {"num_partitions": PARTITIONS, "replication_factor": 1}})
        print(f"created topic {TOPIC} with {PARTITIONS} partitions")
    finally:
        admin.close()


def kcat(*args: str, input_bytes: bytes | None = None) -> bytes:
    result = subprocess.run(["kcat", "-b", f"{HOST}:{PORT}", *args], input=input_bytes, capture_output=True, timeout=120)
    if result.returncode != 0:
        sys.exit(f"kcat {' '.join(args)} failed: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


def end_offsets() -> int:
    """Sum of the topic's latest offsets, as kcat -Q reports them for time -1."""
    query = [arg for p in range(PARTITIONS) for arg in ("-t", f"{TOPIC}:{p}:-1")]
    total = 0
    for line in kcat("-Q", *query).decode().splitlines():
        # "demo-events [0] offset 1250"
        if " offset " in line:
            total += int(line.rsplit(" offset ", 1)[1])
    return total


def produce_and_verify() -> None:
    """Produce MESSAGES keyed messages with kcat and read the topic back with kcat; exit non-zero on a mismatch."""
    before = end_offsets()
    run_id = time.strftime("%Y%m%dT%H%M%S")
    lines = "".join(f"key-{i % 100}\t{run_id} message {i}\n" for i in range(MESSAGES)).encode()
    started = time.monotonic()
    kcat("-P", "-t", TOPIC, "-K", "\t", input_bytes=lines)
    produced = time.monotonic() - started
    expected_total = before + MESSAGES
    started = time.monotonic()
    consumed = kcat("-C", "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p %o %s\n").decode().splitlines()
    read = time.monotonic() - started
    this_run = [line for line in consumed if f"{run_id} message " in line]
    print(f"produced {MESSAGES} messages with kcat in {produced:.2f}s; read back {len(consumed)} "
          f"(this run: {len(this_run)}) in {read:.2f}s")
    if len(consumed) != expected_total or len(this_run) != MESSAGES:
        sys.exit(f"count mismatch: topic should hold {expected_total}, read {len(consumed)}; this run {len(this_run)} of {MESSAGES}")
    print(f"OK: topic {TOPIC} holds {expected_total} messages, all read back")


def up() -> None:
    pid = read_pid()
    if pid is not None:
        print(f"broker already running (pid {pid}, {HOST}:{PORT}); reusing it")
    else:
        if shutil.which("kcat") is None:
            sys.exit("kcat is not installed; run `make setup`")
        pid = start_broker()
    if not broker_answers(timeout=30):
        sys.exit(f"broker pid {pid} does not answer on {HOST}:{PORT}; see {LOG_FILE}")
    ensure_topic()
    produce_and_verify()
    print(f"broker keeps running: kcat -b {HOST}:{PORT} -L   |   stop it with: make pipeline-down")


def down() -> None:
    pid = read_pid()
    if pid is None:
        print("no demo broker running")
        PID_FILE.unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        sys.exit(f"broker pid {pid} still running 30s after SIGTERM; see {LOG_FILE}")
    PID_FILE.unlink(missing_ok=True)
    print(f"stopped broker pid {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Start or stop the demo (today: one standalone broker under ./var/).")
    parser.add_argument("action", choices=["up", "down"])
    args = parser.parse_args()
    up() if args.action == "up" else down()


if __name__ == "__main__":
    main()

"""The demo behind `make pipeline-up` / `make pipeline-down`.

Until the pipeline exists, "the pipeline" is one standalone broker: `up` starts `python -m broker` in the
background (log dir, log file and pid file under ./var/), waits until it answers, and then drives it with
our own command line, `python -m pipeline`: creates the topic (`topics create --if-not-exists`), produces
a few thousand keyed lines (`produce`), reads the whole topic back (`consume --from-beginning
--max-messages N`) and checks the count and this run's messages. Running `up` again while the broker runs
reuses it. `down` sends SIGTERM to the pid in the pid file and waits for the exit.
"""

from __future__ import annotations

import argparse
import os
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
BOOTSTRAP = f"{HOST}:{PORT}"
TOPIC = "demo-events"
PARTITIONS = 4
MESSAGES = 5000
KEYS = 100


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
    """Whether the broker answers a metadata request (our AdminClient) within ``timeout`` seconds."""
    sys.path.insert(0, str(REPO_ROOT))
    from pipeline.client.admin import AdminClient
    from pipeline.client.errors import KafkaConnectionError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with AdminClient(BOOTSTRAP, client_id="demo", timeout_s=3.0) as admin:
                admin.list_topics()
            return True
        except KafkaConnectionError:
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


def pipeline_cli(*args: str, input_bytes: bytes | None = None) -> subprocess.CompletedProcess:
    """Run `python -m pipeline ARGS --bootstrap-server BOOTSTRAP`; exit with its error line if it fails."""
    command = [sys.executable, "-m", "pipeline", *args, "--bootstrap-server", BOOTSTRAP]
    result = subprocess.run(command, cwd=REPO_ROOT, input=input_bytes, capture_output=True, timeout=120)
    if result.returncode != 0:
        sys.exit(f"`python -m pipeline {' '.join(args)}` failed (exit {result.returncode}): "
                 f"{result.stderr.decode(errors='replace').strip()}")
    return result


def ensure_topic() -> None:
    result = pipeline_cli("topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--if-not-exists")
    print(f"$ python -m pipeline topics create {TOPIC} --partitions {PARTITIONS} --if-not-exists\n  "
          + result.stdout.decode().strip())


def end_offsets() -> int:
    """Sum of the topic's latest offsets (`python -m pipeline offsets` prints topic:partition:offset)."""
    lines = pipeline_cli("offsets", TOPIC, "--time", "latest").stdout.decode().split()
    return sum(int(line.rsplit(":", 1)[1]) for line in lines)


def produce_and_verify() -> None:
    """Produce MESSAGES keyed lines and read the whole topic back with our CLI; exit non-zero on a mismatch."""
    before = end_offsets()
    run_id = time.strftime("%Y%m%dT%H%M%S")
    lines = "".join(f"key-{i % KEYS}\t{run_id} message {i}\n" for i in range(MESSAGES)).encode()
    produced = pipeline_cli("produce", TOPIC, "--key-separator", "\t", "--acks", "1", input_bytes=lines)
    print(f"$ python -m pipeline produce {TOPIC} --key-separator '\\t' --acks 1   < {MESSAGES} lines\n  "
          + produced.stderr.decode().strip())
    expected_total = before + MESSAGES
    if end_offsets() != expected_total:
        sys.exit(f"the topic should hold {expected_total} messages after producing, its end offsets sum to "
                 f"{end_offsets()}")
    consumed = pipeline_cli("consume", TOPIC, "--from-beginning", "--max-messages", str(expected_total),
                            "--timeout-ms", "10000", "--format", "key-value")
    print(f"$ python -m pipeline consume {TOPIC} --from-beginning --max-messages {expected_total} "
          f"--format key-value\n  " + consumed.stderr.decode().strip())
    read = consumed.stdout.decode().splitlines()
    this_run = {}
    for line in read:
        key, _, value = line.partition("\t")
        if value.startswith(f"{run_id} message "):
            this_run[int(value.rsplit(" ", 1)[1])] = key
    if len(read) != expected_total or len(this_run) != MESSAGES:
        sys.exit(f"count mismatch: topic should hold {expected_total}, read {len(read)}; "
                 f"this run {len(this_run)} of {MESSAGES}")
    wrong_keys = [i for i, key in this_run.items() if key != f"key-{i % KEYS}"]
    if wrong_keys:
        sys.exit(f"{len(wrong_keys)} messages came back with the wrong key, e.g. message {wrong_keys[0]}")
    print(f"OK: topic {TOPIC} holds {expected_total} messages, all read back; this run's {MESSAGES} with their keys")


def up() -> None:
    pid = read_pid()
    if pid is not None:
        print(f"broker already running (pid {pid}, {HOST}:{PORT}); reusing it")
    else:
        pid = start_broker()
    if not broker_answers(timeout=30):
        sys.exit(f"broker pid {pid} does not answer on {HOST}:{PORT}; see {LOG_FILE}")
    ensure_topic()
    produce_and_verify()
    print(f"broker keeps running on {BOOTSTRAP}; try:\n"
          f"  .venv/bin/python -m pipeline topics describe {TOPIC} --bootstrap-server {BOOTSTRAP}\n"
          f"  .venv/bin/python -m pipeline consume {TOPIC} --from-beginning --max-messages 5 "
          f"--bootstrap-server {BOOTSTRAP}\n"
          f"stop it with: make pipeline-down")


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

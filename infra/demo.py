"""The demo behind `make pipeline-up` / `make pipeline-down`: ZooKeeper, the dc1 cluster of three brokers, the
schema registry and the frontend emulators.

`up` starts (or reuses, when they already run) a standalone ZooKeeper (`python -m pipeline.zk.server`) and
three brokers in cluster mode (`python -m broker`, ids 1-3) under the chroot /dc1, the first datacenter
cluster of the architecture, each detached from this process, with its pid file and log under ./var/.
It waits until ZooKeeper serves, every broker answers and the cluster has three brokers and a controller,
then drives the cluster with our own command line, `python -m pipeline --zookeeper ...`, printing each
command: creates the topic, describes it (leaders spread over the brokers), produces a few thousand
keyed lines, reads them with a ZooKeeper consumer group (the paper's ConsumerConnector), describes the
group (lag 0 everywhere after the read) and shows the cluster. Then pipeline stage 1: the schema registry
(`python -m schemas.registry`, state in ZooKeeper under /schema-registry) and a run of the frontend
emulators (`python -m producers`) publishing Avro events into dc1, checked against their own audit: per
server, topic and window, the AuditCount records equal the events stored. Any mismatch exits non-zero
with the reason.

`down` stops the registry and the brokers (SIGTERM, waiting for each), then ZooKeeper; it also stops a
standalone broker left by the earlier single-broker demo (var/broker.pid). Both commands are idempotent.

Environment: DEMO_VAR_DIR (default ./var), DEMO_ZOOKEEPER_PORT (2181), DEMO_BROKER_PORT (9092, the first
of three consecutive broker ports), DEMO_REGISTRY_PORT (8081).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
# `up` drives the cluster with the project's clients; `down` needs only the standard library, so that
# `make clean` works with a bare python3 on a checkout without .venv. Hence the imports inside functions.
sys.path.insert(0, str(REPO_ROOT))

VAR = Path(os.environ.get("DEMO_VAR_DIR") or REPO_ROOT / "var").resolve()
HOST = "127.0.0.1"
ZOOKEEPER_PORT = int(os.environ.get("DEMO_ZOOKEEPER_PORT", "2181"))
FIRST_BROKER_PORT = int(os.environ.get("DEMO_BROKER_PORT", "9092"))
CHROOT = "/dc1"
ZOOKEEPER = f"{HOST}:{ZOOKEEPER_PORT}{CHROOT}"
BROKER_IDS = (1, 2, 3)
TOPIC = "demo-events"
PARTITIONS = 6
MESSAGES = 5000
KEYS = 100
GROUP = "demo-readers"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 120.0
REGISTRY_PORT = int(os.environ.get("DEMO_REGISTRY_PORT", "8081"))
REGISTRY_URL = f"http://{HOST}:{REGISTRY_PORT}"
REGISTRY_ZOOKEEPER = f"{HOST}:{ZOOKEEPER_PORT}/schema-registry"
EMULATOR_SERVERS = 4
EMULATOR_RATE = 2000
EMULATOR_SECONDS = 10
AUDIT_WINDOW_MS = 5000


@dataclass(frozen=True)
class Service:
    """One background process of the demo: how to start it and where its pid file and log are."""

    name: str
    module: str
    arguments: tuple[str, ...]
    pid_file: Path
    log_file: Path
    address: str
    data: Path

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module, *self.arguments]


def zookeeper_service() -> Service:
    data = VAR / "zookeeper"
    return Service("ZooKeeper", "pipeline.zk.server",
                   ("--data-dir", str(data), "--host", HOST, "--port", str(ZOOKEEPER_PORT)),
                   VAR / "zookeeper.pid", VAR / "zookeeper.log", f"{HOST}:{ZOOKEEPER_PORT}", data)


def broker_service(broker_id: int) -> Service:
    port = FIRST_BROKER_PORT + broker_id - 1
    log_dir = VAR / "dc1" / f"broker-{broker_id}"
    return Service(f"broker {broker_id}", "broker",
                   ("--log-dir", str(log_dir), "--host", HOST, "--port", str(port),
                    "--override", f"zookeeper.connect={ZOOKEEPER}", "--override", f"broker.id={broker_id}",
                    "--override", f"num.partitions={PARTITIONS}"),
                   VAR / f"broker-{broker_id}.pid", VAR / f"broker-{broker_id}.log", f"{HOST}:{port}", log_dir)


def registry_service() -> Service:
    return Service("schema registry", "schemas.registry",
                   ("--zookeeper", REGISTRY_ZOOKEEPER, "--host", HOST, "--port", str(REGISTRY_PORT)),
                   VAR / "schema-registry.pid", VAR / "schema-registry.log", REGISTRY_URL,
                   Path(REGISTRY_ZOOKEEPER))


def legacy_broker_service() -> Service:
    """The standalone broker of the earlier single-broker demo, only ever stopped."""
    return Service("standalone broker (earlier demo)", "broker", (), VAR / "broker.pid", VAR / "broker.log",
                   f"{HOST}:{FIRST_BROKER_PORT}", VAR / "broker-logs")


def shown(path: Path) -> str:
    """A path relative to the working directory when it lies below it (var/...), else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def read_pid(service: Service) -> int | None:
    """The pid in the service's pid file if that process is alive and runs the service's module, else None."""
    try:
        pid = int(service.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # A recycled pid belongs to some other program (maybe another broker): ours runs `python -m <module>`
    # on the service's own data directory.
    module_index = argv.index("-m") + 1 if "-m" in argv else None
    ours = module_index is not None and argv[module_index:module_index + 1] == [service.module]
    return pid if ours and str(service.data) in argv else None


def start(service: Service) -> subprocess.Popen:
    """Start the service in its own session (it outlives this process), output to its log; write its pid file."""
    VAR.mkdir(parents=True, exist_ok=True)
    with open(service.log_file, "ab") as log:
        process = subprocess.Popen(service.command(), cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    service.pid_file.write_text(f"{process.pid}\n")
    print(f"started {service.name} pid {process.pid} on {service.address} (data {shown(service.data)}, "
          f"log {shown(service.log_file)})")
    return process


def start_or_reuse(service: Service) -> subprocess.Popen | int:
    """The running service's pid, or the Popen of a freshly started one."""
    pid = read_pid(service)
    if pid is not None:
        print(f"{service.name} already running (pid {pid}, {service.address}); reusing it")
        return pid
    return start(service)


def log_tail(service: Service, lines: int = 8) -> str:
    try:
        text = service.log_file.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text)


def check_alive(service: Service, process: subprocess.Popen | int) -> None:
    """Exit with the log tail when a process this run started has already died."""
    if isinstance(process, subprocess.Popen) and process.poll() is not None:
        sys.exit(f"{service.name} exited with {process.returncode} during start-up; "
                 f"end of {shown(service.log_file)}:\n{log_tail(service)}")


def wait_for(what: str, condition: Callable[[], object], processes: dict[Service, subprocess.Popen | int], timeout: float) -> None:
    """Poll ``condition`` until true; exit clearly at the deadline or when a started process dies."""
    deadline = time.monotonic() + timeout
    while not condition():
        for service, process in processes.items():
            check_alive(service, process)
        if time.monotonic() >= deadline:
            logs = ", ".join(shown(s.log_file) for s in processes)
            sys.exit(f"timed out after {timeout:.0f}s waiting for {what}; see {logs}")
        time.sleep(0.1)


def zookeeper_serves() -> bool:
    from pipeline.zk.server import four_letter_word

    return "Mode:" in four_letter_word(HOST, ZOOKEEPER_PORT, "srvr")


def broker_answers(service: Service) -> bool:
    """Whether the broker answers a metadata request (our AdminClient) right now."""
    from pipeline.client.admin import AdminClient
    from pipeline.client.errors import KafkaClientError

    try:
        with AdminClient(service.address, client_id="demo", timeout_s=2.0) as admin:
            admin.list_topics()
        return True
    except KafkaClientError:
        return False


def registry_answers() -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(REGISTRY_URL + "/subjects", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def cluster_complete() -> bool:
    """Whether /dc1 has every demo broker registered and a controller (what `cluster` shows)."""
    from pipeline.zk.client import ZooKeeperUnavailable, connect
    from pipeline.zk.registry import ClusterRegistry

    try:
        zk = connect(ZOOKEEPER, timeout_s=5.0)
    except ZooKeeperUnavailable:
        return False
    try:
        registry = ClusterRegistry(zk)
        return set(registry.brokers()) == set(BROKER_IDS) and registry.controller() is not None
    finally:
        zk.stop()
        zk.close()


def pipeline_cli(*args: str, input_bytes: bytes | None = None, stdin_note: str = "",
                 show_stdout: bool = True) -> subprocess.CompletedProcess:
    """Run `python -m pipeline ARGS --zookeeper ZOOKEEPER`, printing the command and its output (indented);
    exit with its error line if it fails."""
    words = ["python", "-m", "pipeline", *args, "--zookeeper", ZOOKEEPER]
    display = " ".join("$'\\t'" if word == "\t" else shlex.quote(word) for word in words) + stdin_note
    print(f"$ {display}", flush=True)
    command = [sys.executable, "-m", "pipeline", *args, "--zookeeper", ZOOKEEPER]
    result = subprocess.run(command, cwd=REPO_ROOT, input=input_bytes, capture_output=True, timeout=CLI_TIMEOUT_S)
    if result.returncode != 0:
        sys.exit(f"`{display}` failed (exit {result.returncode}): {result.stderr.decode(errors='replace').strip()}")
    shown_output = (result.stdout if show_stdout else b"") + result.stderr
    for line in shown_output.decode(errors="replace").splitlines():
        print(f"  {line}".rstrip())
    return result


def bootstrap_servers() -> str:
    return ",".join(broker_service(broker_id).address for broker_id in BROKER_IDS)


def end_offsets(which: str) -> dict[int, int]:
    """Partition -> its "earliest" or "latest" offset, asked of each leader (ListOffsets)."""
    from pipeline.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AdminClient

    timestamp = EARLIEST_TIMESTAMP if which == "earliest" else LATEST_TIMESTAMP
    with AdminClient(bootstrap_servers(), client_id="demo", timeout_s=10.0) as admin:
        offsets = admin.list_offsets(TOPIC, timestamp=timestamp)
    missing = sorted(p for p, offset in offsets.items() if offset is None)
    if missing:
        sys.exit(f"no {which} offset for partitions {missing} of {TOPIC}")
    return offsets


def leaders() -> dict[int, int]:
    """Partition -> leader (-1 for none) of the topic, from Metadata; empty while the topic is not known yet."""
    from pipeline.client.admin import AdminClient
    from pipeline.client.errors import KafkaClientError
    from pipeline.protocol.errors import KafkaProtocolError

    try:
        with AdminClient(bootstrap_servers(), client_id="demo", timeout_s=10.0) as admin:
            (description,) = admin.describe_topics([TOPIC])
    except (KafkaProtocolError, KafkaClientError):
        return {}
    return {p.partition: p.leader for p in description.partitions}


def committed_offsets() -> dict[int, int]:
    """The group's committed offsets of the topic, from /dc1/consumers/demo-readers/offsets."""
    from pipeline.zk.client import connect
    from pipeline.zk.registry import ClusterRegistry

    zk = connect(ZOOKEEPER)
    try:
        committed = ClusterRegistry(zk).committed_offsets(GROUP)
    finally:
        zk.stop()
        zk.close()
    return {partition: offset for (topic, partition), offset in committed.items() if topic == TOPIC}


def create_and_describe_topic() -> None:
    pipeline_cli("topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--if-not-exists")
    # The controller elects the leaders just after the create: describe once all partitions have one.
    wait_for(f"a leader for each partition of {TOPIC}",
             lambda: (found := leaders()) and len(found) == PARTITIONS and -1 not in found.values(), {},
             START_TIMEOUT_S)
    out = pipeline_cli("topics", "describe", TOPIC).stdout.decode()
    described = {}
    for line in out.splitlines():
        fields = dict(field.split(": ", 1) for field in line.strip().split("\t") if ": " in field)
        if "Partition" in fields:
            described[int(fields["Partition"])] = fields.get("Leader")
    if set(described.values()) != {str(broker_id) for broker_id in BROKER_IDS} or len(described) != PARTITIONS:
        sys.exit(f"the {PARTITIONS} partitions of {TOPIC} should be led by brokers {list(BROKER_IDS)} together, "
                 f"`topics describe` shows leaders {described}")


def produce(run_id: str) -> dict[int, int]:
    """Produce MESSAGES keyed lines through brokers found in ZooKeeper; check the log end offsets grew by that
    and return them."""
    before = sum(end_offsets("latest").values())
    lines = "".join(f"key-{i % KEYS}\t{run_id} message {i}\n" for i in range(MESSAGES)).encode()
    pipeline_cli("produce", TOPIC, "--key-separator", "\t", "--acks", "1", input_bytes=lines,
                 stdin_note=f"   < {MESSAGES} lines")
    latest = end_offsets("latest")
    if sum(latest.values()) != before + MESSAGES:
        sys.exit(f"the topic should hold {before + MESSAGES} messages after producing, its end offsets sum to "
                 f"{sum(latest.values())}")
    print(f"  OK: the log end offsets of {TOPIC} sum to {sum(latest.values())} (+{MESSAGES})")
    return latest


def consume_with_group(run_id: str, latest: dict[int, int]) -> None:
    """Read what the group has not read yet (this run's messages, and anything an earlier run left behind)
    with a ZooKeeper consumer group; check the count, this run's messages and their keys."""
    earliest = end_offsets("earliest")
    committed = committed_offsets()
    # A partition without a committed offset is read from its earliest offset (--from-beginning).
    unread = sum(latest[p] - committed.get(p, earliest[p]) for p in latest)
    result = pipeline_cli("consume", TOPIC, "--group", GROUP, "--from-beginning", "--max-messages", str(unread),
                          "--timeout-ms", "10000", "--format", "key-value", show_stdout=False)
    read = result.stdout.decode().splitlines()
    this_run = {}
    for line in read:
        key, _, value = line.partition("\t")
        if value.startswith(f"{run_id} message "):
            this_run[int(value.rsplit(" ", 1)[1])] = key
    if len(read) != unread or len(this_run) != MESSAGES:
        sys.exit(f"count mismatch: group {GROUP} should read {unread} messages, read {len(read)}; "
                 f"this run's {len(this_run)} of {MESSAGES}")
    wrong_keys = [i for i, key in this_run.items() if key != f"key-{i % KEYS}"]
    if wrong_keys:
        sys.exit(f"{len(wrong_keys)} messages came back with the wrong key, e.g. message {wrong_keys[0]}")
    print(f"  OK: group {GROUP} read {len(read)} messages, this run's {MESSAGES} with their keys")


def check_group_lag() -> None:
    """`consumer-groups describe`: after the read every partition must show lag 0."""
    out = pipeline_cli("consumer-groups", "describe", GROUP).stdout.decode()
    lags = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0] == TOPIC:
            lags[int(fields[1])] = fields[4]
    if sorted(lags) != list(range(PARTITIONS)) or set(lags.values()) != {"0"}:
        sys.exit(f"group {GROUP} should have lag 0 on all {PARTITIONS} partitions of {TOPIC}, has {lags}")


def start_cluster() -> dict[Service, subprocess.Popen | int]:
    """Start or reuse ZooKeeper, then the brokers; return once the cluster is complete."""
    legacy = legacy_broker_service()
    if read_pid(legacy) is not None:
        print(f"the earlier demo's {legacy.name} still runs on {legacy.address}; stopping it first")
        stop(legacy)
    zookeeper = zookeeper_service()
    processes = {zookeeper: start_or_reuse(zookeeper)}
    wait_for(f"ZooKeeper to serve on {zookeeper.address}", zookeeper_serves, processes, START_TIMEOUT_S)
    brokers = [broker_service(broker_id) for broker_id in BROKER_IDS]
    for broker in brokers:
        processes[broker] = start_or_reuse(broker)
    for broker in brokers:
        wait_for(f"{broker.name} to answer on {broker.address}", lambda b=broker: broker_answers(b), processes,
                 START_TIMEOUT_S)
    wait_for(f"brokers {list(BROKER_IDS)} and a controller in ZooKeeper {ZOOKEEPER}", cluster_complete, processes,
             START_TIMEOUT_S)
    registry = registry_service()
    processes[registry] = start_or_reuse(registry)
    wait_for(f"the schema registry to answer on {REGISTRY_URL}", registry_answers, processes, START_TIMEOUT_S)
    return processes


def topic_end_offsets(topics: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> latest offset, for the topics that exist."""
    from pipeline.client.admin import LATEST_TIMESTAMP, AdminClient

    offsets = {}
    with AdminClient(bootstrap_servers(), client_id="demo", timeout_s=10.0) as admin:
        existing = set(admin.list_topics())
        for topic in topics:
            if topic in existing:
                for partition, offset in admin.list_offsets(topic, timestamp=LATEST_TIMESTAMP).items():
                    offsets[(topic, partition)] = offset or 0
    return offsets


def read_from(topic: str, start: dict[tuple[str, int], int]) -> list:
    """Every record of `topic` after the offsets in `start` (from 0 for partitions not in it)."""
    from pipeline.client import Consumer
    from pipeline.client.admin import AdminClient

    with AdminClient(bootstrap_servers(), client_id="demo", timeout_s=10.0) as admin:
        (description,) = admin.describe_topics([topic])
    partitions = {(topic, p.partition): start.get((topic, p.partition), 0) for p in description.partitions}
    consumer = Consumer({"metadata.broker.list": bootstrap_servers(), "consumer.timeout.ms": 3000},
                        partitions=partitions)
    try:
        return list(consumer)
    finally:
        consumer.close()


def run_emulators() -> None:
    """Run the frontend emulators into dc1 for a few seconds; check their audit counts against what was stored."""
    from schemas.events import AUDIT_TOPIC, EVENT_TOPICS
    from schemas.registry_client import SchemaRegistryClient
    from schemas.serde import AvroDecoder

    topics = [*EVENT_TOPICS, AUDIT_TOPIC]
    before = topic_end_offsets(topics)
    words = ["python", "-m", "producers", "--datacenter", "dc1", "--zookeeper", ZOOKEEPER, "--registry", REGISTRY_URL,
             "--servers", str(EMULATOR_SERVERS), "--rate", str(EMULATOR_RATE), "--duration", str(EMULATOR_SECONDS),
             "--audit-window-ms", str(AUDIT_WINDOW_MS)]
    print(f"$ {' '.join(words)}", flush=True)
    result = subprocess.run([sys.executable, *words[1:]], cwd=REPO_ROOT, capture_output=True,
                            timeout=EMULATOR_SECONDS + CLI_TIMEOUT_S)
    for line in result.stderr.decode(errors="replace").splitlines():
        print(f"  {line.split(': ', 1)[-1] if ' producers.' in line else line}".rstrip())
    if result.returncode != 0:
        sys.exit(f"the emulators failed (exit {result.returncode})")
    decoder = AvroDecoder(SchemaRegistryClient(REGISTRY_URL))
    stored: dict[tuple[str, str, int], int] = {}
    for topic in EVENT_TOPICS:
        for record in read_from(topic, before):
            header = decoder.decode(record.value, topic)["header"]
            time_ms = int(header["eventTime"].timestamp() * 1000)
            key = (header["server"], topic, time_ms - time_ms % AUDIT_WINDOW_MS)
            stored[key] = stored.get(key, 0) + 1
    audited: dict[tuple[str, str, int], int] = {}
    for record in read_from(AUDIT_TOPIC, before):
        count = decoder.decode(record.value, AUDIT_TOPIC)
        key = (count["host"], count["topic"], int(count["windowStart"].timestamp() * 1000))
        audited[key] = audited.get(key, 0) + count["count"]
    if not stored or audited != stored:
        wrong = sorted(k for k in set(stored) | set(audited) if stored.get(k) != audited.get(k))
        sys.exit(f"the audit does not match the events stored: {len(wrong)} of {len(stored)} (server, topic, window) "
                 f"counts differ, e.g. {wrong[:3]}")
    print(f"  OK: {sum(stored.values())} events in {len(EVENT_TOPICS)} topics, every one decoded with its registered "
          f"schema; the {len(audited)} producer audit counts (server, topic, {AUDIT_WINDOW_MS // 1000} s window) "
          f"equal the events stored")


def up() -> None:
    started = time.monotonic()
    processes = start_cluster()
    print(f"cluster dc1 up: ZooKeeper {HOST}:{ZOOKEEPER_PORT}, chroot {CHROOT}, brokers "
          f"{', '.join(s.address for s in processes if s.module == 'broker')}")
    run_id = time.strftime("%Y%m%dT%H%M%S")
    create_and_describe_topic()
    latest = produce(run_id)
    consume_with_group(run_id, latest)
    check_group_lag()
    out = pipeline_cli("cluster").stdout.decode()
    if f"Brokers: {len(BROKER_IDS)}" not in out or "Controller: broker" not in out:
        sys.exit(f"`cluster` should show {len(BROKER_IDS)} brokers and a controller")
    run_emulators()
    print(f"\nOK in {time.monotonic() - started:.1f}s. Running now:")
    for service in processes:
        print(f"  {service.name:<10} {service.address:<16} pid {read_pid(service)}  data {shown(service.data)}, "
              f"log {shown(service.log_file)}")
    print(f"try:\n"
          f"  .venv/bin/python -m pipeline --zookeeper {ZOOKEEPER} cluster\n"
          f"  .venv/bin/python -m pipeline --zookeeper {ZOOKEEPER} topics describe {TOPIC}\n"
          f"  .venv/bin/python -m pipeline --zookeeper {ZOOKEEPER} consume {TOPIC} --from-beginning --max-messages 5\n"
          f"  .venv/bin/python -m pipeline --zookeeper {ZOOKEEPER} consumer-groups describe {GROUP}\n"
          f"  curl -s {REGISTRY_URL}/subjects\n"
          f"  .venv/bin/python -m producers --zookeeper {ZOOKEEPER} --registry {REGISTRY_URL} --rate 500\n"
          f"stop it with: make pipeline-down")


def signal_stop(service: Service) -> int | None:
    """SIGTERM the service if it runs; its pid, or None (its stale pid file removed) when it does not."""
    pid = read_pid(service)
    if pid is None:
        service.pid_file.unlink(missing_ok=True)
        return None
    os.kill(pid, signal.SIGTERM)
    return pid


def wait_stopped(service: Service, pid: int) -> None:
    """Wait until ``pid`` has exited; exit non-zero if it outlives the deadline."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while Path(f"/proc/{pid}").exists() and read_pid(service) == pid:
        if time.monotonic() >= deadline:
            sys.exit(f"{service.name} pid {pid} still running {STOP_TIMEOUT_S:.0f}s after SIGTERM; "
                     f"see {shown(service.log_file)}")
        time.sleep(0.05)
    service.pid_file.unlink(missing_ok=True)
    print(f"stopped {service.name} pid {pid}")


def stop(service: Service) -> bool:
    """SIGTERM the service and wait for it; whether it was running."""
    pid = signal_stop(service)
    if pid is not None:
        wait_stopped(service, pid)
    return pid is not None


def down() -> None:
    # All brokers get SIGTERM at once and shut down side by side; ZooKeeper only after the last one is
    # gone, since each deregisters from it on the way out.
    registry_stopped = stop(registry_service())
    brokers = [broker_service(broker_id) for broker_id in BROKER_IDS] + [legacy_broker_service()]
    stopping = [(broker, pid) for broker in brokers if (pid := signal_stop(broker)) is not None]
    for broker, pid in stopping:
        wait_stopped(broker, pid)
    zookeeper_stopped = stop(zookeeper_service())
    if not stopping and not zookeeper_stopped and not registry_stopped:
        print("no demo process running")


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Start or stop the demo: ZooKeeper, a 3-broker cluster (chroot /dc1) and the schema registry "
                    "under ./var/. `up` also creates a topic, produces, reads with a consumer group and checks the "
                    "counts, then runs the frontend emulators and checks their audit counts.")
    parser.add_argument("action", choices=["up", "down"])
    args = parser.parse_args()
    up() if args.action == "up" else down()


if __name__ == "__main__":
    main()

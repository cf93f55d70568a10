"""The transactional consume-transform-produce run: workers (txn_worker processes, one per input partition) copy
an input topic into an output topic in transactions that also commit their input offsets, while a feeder
writes the input, a read_committed reader follows the output, and faults hit the cluster in turn:

- ``leader``: the nemesis bounces the leader of an output partition (SIGKILL or SIGTERM, in turn);
- ``coordinator``: the broker coordinating a worker's transactional id is SIGKILLed, then restarted;
- ``worker``: a worker is SIGKILLed mid-run and restarted with the same transactional id;
- ``zombie``: a worker is paused (SIGSTOP), a new incarnation with its transactional id takes over, then the old
  one is let go on (SIGCONT): a zombie, which must be fenced (it ends with txn_worker's EXIT_FATAL) and write
  nothing that read_committed readers see.

Between faults the run waits until the group's committed offsets moved on. At the end the feeder stops, the
workers drain the input, and the checker (txn_checker) compares the input logs, the final read_committed output,
the live reads, the aborted transactions the workers logged and the committed offsets.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker.coordinator.coordinator_placement import coordinator_for
from pipeline.client.admin import AdminClient
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from tests.support.cluster import BrokerCluster
from tests.support.polling import wait_until
from tests.support.process import ChildProcess

from .clients import ConfluentWriter, Reader
from .history import History
from .nemesis import Nemesis
from .txn_checker import TxnCheckResult, check_exactly_once
from .txn_worker import transactional_id

FAULTS = ("leader", "coordinator", "worker", "zombie")


@dataclass
class TxnRunResult:
    """The checker's verdict and what happened: faults done, worker restarts, input written."""

    result: TxnCheckResult
    faults: list[str] = field(default_factory=list)
    worker_starts: int = 0
    aborted: int = 0
    committed_transactions: int = 0
    #: Output records a read_uncommitted reader sees (those of aborted transactions included).
    uncommitted_outputs: int = 0
    #: The exit code of each zombie worker once let go on (txn_worker.EXIT_FATAL when it was fenced).
    zombie_exits: list[int | None] = field(default_factory=list)
    elapsed_s: float = 0.0


class _Workers:
    """One txn_worker process per input partition; a worker that exited (fenced, crashed) is started again."""

    def __init__(self, base_dir: Path, bootstrap: str, input_topic: str, output_topic: str, group: str,
                 partitions: int) -> None:
        self.base_dir = base_dir
        self.log_paths = [base_dir / f"worker-{p}.outcomes" for p in range(partitions)]
        self.starts = 0
        self.children: list[ChildProcess] = []
        self.zombies: list[ChildProcess] = []
        for partition in range(partitions):
            child = ChildProcess(f"worker {partition}", [sys.executable, "-m", "tests.support.jepsen.txn_worker",
                                                         bootstrap, input_topic, output_topic, group, str(partition),
                                                         "0", str(self.log_paths[partition])],
                                 base_dir / f"worker-{partition}.log", announce=True)
            self.children.append(child)

    def start(self, partition: int) -> None:
        child = self.children[partition]
        self.starts += 1
        child.command[-2] = str(self.starts)  # the incarnation, in the output records' tags
        child.spawn()

    def keep_running(self) -> None:
        for partition, child in enumerate(self.children):
            if not child.running:
                self.start(partition)

    def replace_paused(self, partition: int) -> ChildProcess:
        """SIGSTOP the partition's worker and start a new incarnation in its place; the paused one is returned
        (to be continued: a zombie)."""
        old = self.children[partition]
        old.send_signal(signal.SIGSTOP)
        self.children[partition] = ChildProcess(f"worker {partition}", list(old.command), old.log_path, announce=True)
        self.zombies.append(old)
        self.start(partition)
        return old

    def kill(self, partition: int) -> None:
        self.children[partition].send_signal(signal.SIGKILL)
        self.children[partition].wait(10)

    def stop(self) -> None:
        for child in self.children + self.zombies:
            if child.running:
                child.send_signal(signal.SIGKILL)
                child.wait(10)

    def outcomes(self) -> tuple[set[str], int]:
        """The tags of the transactions the workers aborted, and how many they committed."""
        aborted, committed = set(), 0
        for path in self.log_paths:
            if path.exists():
                for line in path.read_text().splitlines():
                    kind, _, tag = line.partition(" ")
                    if kind == "abort":
                        aborted.add(tag)
                    elif kind == "commit":
                        committed += 1
        return aborted, committed


def read_log(bootstrap: str, topic: str, partition: int, isolation_level: int) -> list[tuple[int, str]]:
    """A partition's whole log as a reader of ``isolation_level`` sees it, from its leader."""
    with AdminClient(bootstrap) as admin:
        admin.cluster.refresh([topic])
        host, port = admin.cluster.brokers()[admin.cluster.leader(topic, partition)]
    records: list[tuple[int, str]] = []
    with SimpleConsumer(host, port, isolation_level=isolation_level) as consumer:
        end = consumer.get_offsets_before(topic, partition, -1, 1)[0]
        offset = 0
        while offset < end:
            result = consumer.fetch(FetchRequest(topic, partition, offset, 1 << 20))
            records += [(r.offset, r.value.decode()) for r in result]
            offset = result.next_offset
    return records


def _committed(admin: AdminClient, group: str, topic: str, partitions: int) -> dict[int, int]:
    offsets = admin.fetch_offsets(group, [(topic, p) for p in range(partitions)], require_stable=True)
    return {p: offsets[(topic, p)].offset if (topic, p) in offsets else 0 for p in range(partitions)}


def run_transactional(cluster: BrokerCluster, base_dir: Path, *, input_topic: str, output_topic: str, group: str,
                      partitions: int, faults: list[str], rate: float = 200.0,
                      progress_per_fault: int = 100, drain_timeout_s: float = 180.0) -> TxnRunResult:
    """Run the workload with ``faults`` (names from FAULTS) one after the other; return the checked outcome."""
    started = time.monotonic()
    bootstrap = cluster.bootstrap
    history = History()
    feeder = ConfluentWriter(history, bootstrap, input_topic, "feeder")
    probe = ConfluentWriter(History(), bootstrap, output_topic, "probe")
    nemesis = Nemesis(cluster, output_topic, probe)
    workers = _Workers(base_dir, bootstrap, input_topic, output_topic, group, partitions)
    admin = AdminClient(bootstrap, timeout_s=30.0)
    stop_feeding = threading.Event()

    def feed() -> None:
        sent = 0
        while not stop_feeding.is_set():
            feeder.send(sent % partitions, f"in-{sent}")
            sent += 1
            stop_feeding.wait(1.0 / rate)

    feeding = threading.Thread(target=feed, name="jepsen-feeder", daemon=True)
    done: list[str] = []
    zombie_exits: list[int | None] = []
    reader = None
    try:
        for partition in range(partitions):
            workers.start(partition)
        feeding.start()
        reader = Reader(History(), bootstrap, output_topic, partitions, "committed-reader",
                        {"isolation.level": "read_committed"}).start()

        def progressed(since: int) -> bool:
            workers.keep_running()
            return sum(_committed(admin, group, input_topic, partitions).values()) >= since + progress_per_fault

        mark = 0
        for number, fault in enumerate(faults):
            wait_until(lambda: progressed(mark), timeout=120, interval=0.5,
                       message=f"the workers' progress before fault {number} ({fault})")
            mark = sum(_committed(admin, group, input_topic, partitions).values())
            # Each round of faults starts on the next partition, so every partition meets every fault; leader
            # bounces alternate between SIGKILL and SIGTERM from one round to the next.
            cycle = number // len(FAULTS)
            target = (number + cycle) % partitions
            if fault == "leader":
                bounce = nemesis.bounce(target, hard=cycle % 2 == 0)
                done.append(f"leader of {output_topic}-{target} (broker {bounce.broker}, "
                            f"{'SIGKILL' if bounce.hard else 'SIGTERM'}, failover {bounce.failover_s * 1000:.0f} ms)")
            elif fault == "coordinator":
                victim = coordinator_for(transactional_id(group, target), cluster.registered())
                assert victim is not None
                cluster.brokers[victim].kill()
                time.sleep(3.0)
                cluster.brokers[victim].start()
                cluster.wait_registered(set(cluster.brokers))
                for p in range(partitions):
                    Nemesis(cluster, input_topic, probe).wait_in_sync(p)
                    nemesis.wait_in_sync(p)
                done.append(f"coordinator of {transactional_id(group, target)} (broker {victim}, SIGKILL)")
            elif fault == "zombie":
                zombie = workers.replace_paused(target)
                mark = sum(_committed(admin, group, input_topic, partitions).values())
                wait_until(lambda: progressed(mark), timeout=120, interval=0.5,
                           message=f"the new incarnation of worker {target} committing")
                zombie.send_signal(signal.SIGCONT)
                try:
                    code = zombie.wait(60)
                except subprocess.TimeoutExpired:
                    code = None
                done.append(f"zombie worker {target} (SIGSTOP, replaced, SIGCONT: exit code {code})")
                zombie_exits.append(code)
            elif fault == "worker":
                workers.kill(target)
                workers.start(target)
                done.append(f"worker {target} (SIGKILL)")
            else:
                raise ValueError(f"unknown fault {fault!r}")
        stop_feeding.set()
        feeding.join(10)
        if feeder.flush(120):
            raise RuntimeError("the feeder's writes were not all answered")
        with AdminClient(bootstrap) as ends_admin:
            ends = ends_admin.list_offsets(input_topic, range(partitions))

        def drained() -> bool:
            workers.keep_running()
            committed = _committed(admin, group, input_topic, partitions)
            return all(committed[p] >= (ends[p] or 0) for p in range(partitions))

        wait_until(drained, timeout=drain_timeout_s, interval=0.5,
                   message=lambda: f"the workers reaching the input's end {ends}: "
                                   f"{_committed(admin, group, input_topic, partitions)}")
    finally:
        stop_feeding.set()
        workers.stop()
        if reader is not None:
            reader.stop()
        feeder.close()
        probe.close()
    # The last transactions' markers may still be on their way to the output.
    for partition in range(partitions):
        wait_until(lambda: _stable(bootstrap, output_topic, partition), timeout=60, interval=0.2,
                   message=f"{output_topic}-{partition} without an open transaction")
    input_offsets = {p: [offset for offset, _ in read_log(bootstrap, input_topic, p, 0)] for p in range(partitions)}
    outputs = {p: [value for _, value in read_log(bootstrap, output_topic, p, 1)] for p in range(partitions)}
    committed = _committed(admin, group, input_topic, partitions)
    admin.close()
    aborted, committed_transactions = workers.outcomes()
    uncommitted = sum(1 for p in range(partitions) for _, value in read_log(bootstrap, output_topic, p, 0)
                      if not value.startswith("probe-"))
    live = [(read.partition, read.value) for read in reader.history.reads] if reader is not None else []
    result = check_exactly_once(input_offsets, outputs, live, aborted, committed)
    return TxnRunResult(result, done, workers.starts, len(aborted), committed_transactions, uncommitted,
                        zombie_exits, time.monotonic() - started)


def _stable(bootstrap: str, topic: str, partition: int) -> bool:
    """Whether no transaction is open in the partition (its LSO is its high watermark)."""
    with AdminClient(bootstrap) as admin:
        committed = admin.list_offsets(topic, [partition], isolation_level=1)[partition]
        latest = admin.list_offsets(topic, [partition])[partition]
    return committed == latest

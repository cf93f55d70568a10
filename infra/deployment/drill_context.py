"""What every fault drill works with: the deployment and its clock (:class:`Context`), its processes (signals to a
program's process group, waits for supervisord to restart it and for its health check), the partitions of its
clusters as ZooKeeper holds them, and the Prometheus metrics its processes serve."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, TextIO, TypeVar

from kazoo.exceptions import KazooException
from prometheus_client.parser import text_string_to_metric_families

from infra.deployment.lifecycle import DeploymentError, shown
from infra.deployment.programs import Program, programs
from infra.deployment.secured import admin_command_config
from infra.deployment.supervisor import Supervisor
from infra.deployment.topology import ClusterSpec, Topology
from pipeline.zk import layout
from pipeline.zk.client import ZooKeeperUnavailable, connect
from pipeline.zk.registry import ClusterRegistry

__all__ = ["Context", "DrillError", "PartitionState", "choose_broker", "chosen_broker", "elect_preferred_leader",
           "file_size", "group_members", "kill_and_wait", "metrics_at", "not_in_sync", "parse_metrics",
           "partition_leaders", "partition_states", "running_pid", "signal_group", "wait_all_healthy", "wait_in_sync",
           "wait_restarted"]

T = TypeVar("T")


class DrillError(DeploymentError):
    """A drill could not be run, or the deployment did not recover from it within its deadline."""


class Context:
    """The deployment a drill acts on, its output and a clock from the drill's start."""

    def __init__(self, topology: Topology, out: TextIO, timeout_s: float) -> None:
        self.topology = topology
        self.out = out
        self.timeout_s = timeout_s
        self.supervisor = Supervisor(topology)
        self.programs = {program.name: program for program in programs(topology)}
        self.began = time.monotonic()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def event(self, text: str) -> None:
        self.say(f"  +{time.monotonic() - self.began:6.1f}s  {text}")

    def program(self, name: str) -> Program:
        if name not in self.programs:
            raise DrillError(f"the topology runs no {name} here ({shown(self.topology.path)})")
        return self.programs[name]

    def of_kind(self, kind: str) -> list[Program]:
        return [program for program in self.programs.values() if program.kind == kind]

    def wait(self, what: str | Callable[[], str], condition: Callable[[], T], timeout_s: float | None = None) -> T:
        """Poll ``condition`` until it holds (its value) or the deadline passes (DrillError naming ``what``)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            result = condition()
            if result:
                return result
            if time.monotonic() > deadline:
                raise DrillError(f"timed out after {timeout_s:.0f}s waiting for {what() if callable(what) else what}")
            time.sleep(0.2)


# -- processes ----------------------------------------------------------------------------------------------------


def group_members(pgid: int, proc: Path = Path("/proc")) -> dict[int, str]:
    """The live processes of process group ``pgid``: pid -> command name."""
    found = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if rest[0] != "Z" and int(rest[2]) == pgid:
            found[int(entry.name)] = name
    return found


def _described(members: Mapping[int, str]) -> str:
    return ", ".join(f"{name} ({pid})" for pid, name in sorted(members.items()))


def running_pid(context: Context, program: Program) -> int:
    """The pid of ``program``, which must be running and lead its own process group."""
    info = context.supervisor.info(program.name)
    if not info.running:
        raise DrillError(f"{program.name} is not running ({info.state}); start the deployment first "
                         f"(python -m pipeline up --topology {shown(context.topology.path)})")
    if os.getpgid(info.pid) != info.pid:
        raise DrillError(f"{program.name} (pid {info.pid}) does not lead a process group of its own")
    return info.pid


def signal_group(context: Context, program: Program, signum: int) -> int:
    """Send ``signum`` to ``program``'s whole process group; its pid."""
    pid = running_pid(context, program)
    members = group_members(pid)
    os.killpg(pid, signum)
    context.event(f"{signal.Signals(signum).name} to {program.name}'s process group {pid}: {_described(members)}")
    return pid


def kill_and_wait(context: Context, program: Program) -> int:
    """SIGKILL ``program``'s process group, wait until it is gone, restarted by supervisord and healthy; new pid."""
    pid = signal_group(context, program, signal.SIGKILL)
    context.wait(f"process group {pid} of {program.name} to be gone", lambda: not group_members(pid))
    context.event(f"process group {pid} gone")
    return wait_restarted(context, program, pid)


def wait_restarted(context: Context, program: Program, old_pid: int) -> int:
    def restarted() -> int:
        info = context.supervisor.info(program.name)
        return info.pid if info.running and info.pid != old_pid else 0

    pid = context.wait(f"supervisord to restart {program.name}", restarted)
    context.event(f"supervisord restarted {program.name} (pid {pid}, RUNNING)")
    started = context.supervisor.info(program.name).started
    context.wait(f"{program.name} to pass its health check ({program.health.description})",
                 lambda: program.health(started))
    context.event(f"{program.name} healthy: {program.health.description}")
    return pid


def wait_all_healthy(context: Context) -> None:
    waiting = dict(context.programs)

    def healthy() -> bool:
        running = {info.name: info.started for info in context.supervisor.infos() if info.running}
        for name, program in list(waiting.items()):
            if name in running and program.health(running[name]):
                del waiting[name]
        return not waiting

    context.wait(lambda: f"every program to be healthy (still waiting for {', '.join(waiting)})", healthy)
    context.event(f"every program running and healthy ({len(context.programs)})")


# -- partitions in ZooKeeper --------------------------------------------------------------------------------------


def choose_broker(leaders: Iterable[int], broker_ids: Iterable[int]) -> int:
    """The broker leading most partitions (the lowest id of a tie); the first broker when none leads any."""
    ids = sorted(broker_ids)
    counts = Counter(leader for leader in leaders if leader in ids)
    if not counts:
        return ids[0]
    return min(counts, key=lambda broker_id: (-counts[broker_id], broker_id))


@dataclass(frozen=True)
class PartitionState:
    """A partition of a cluster as ZooKeeper holds it: its replicas, its leader (-1: none) and its ISR."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]


def partition_states(topology: Topology, cluster: ClusterSpec) -> list[PartitionState]:
    """Every partition of ``cluster``, as its assignments and partition states in ZooKeeper say."""
    try:
        client = connect(topology.cluster_zookeeper(cluster), timeout_s=10.0)
    except (ZooKeeperUnavailable, KazooException) as exc:
        raise DrillError(f"cannot read the partitions of {cluster.name}: {exc}") from None
    try:
        registry = ClusterRegistry(client)
        found = []
        for topic in registry.topics():
            for partition, replicas in sorted(registry.assignment(topic).items()):
                state = registry.partition_state(topic, partition) or {}
                found.append(PartitionState(topic, partition, tuple(replicas), int(state.get("leader", -1)),
                                            tuple(state.get("isr", ()))))
        return found
    except KazooException as exc:
        raise DrillError(f"cannot read the partitions of {cluster.name}: {exc}") from None
    finally:
        client.stop()
        client.close()


def chosen_broker(topology: Topology, cluster_name: str, broker_id: int | None) -> tuple[ClusterSpec, int, str]:
    """(cluster, broker id, why that one) of a drill on one broker: ``broker_id`` when given, else the broker of
    ``cluster_name`` leading most partitions."""
    try:
        cluster = topology.cluster(cluster_name)
    except KeyError as exc:
        raise DrillError(str(exc.args[0])) from None
    if cluster.external:
        raise DrillError(f"cluster {cluster.name} is external: its brokers do not run here")
    if broker_id is not None:
        if broker_id not in cluster.broker_ids():
            raise DrillError(f"cluster {cluster.name} has brokers {cluster.broker_ids()}, not {broker_id}")
        return cluster, broker_id, "chosen"
    leaders = partition_leaders(topology, cluster)
    broker_id = choose_broker(leaders, cluster.broker_ids())
    return cluster, broker_id, (f"leads {leaders.count(broker_id)} of {len(leaders)} partitions" if leaders
                                else "no partition has a leader yet: the first broker")


def partition_leaders(topology: Topology, cluster: ClusterSpec) -> list[int]:
    """The leader of every partition of ``cluster`` that has one."""
    return [state.leader for state in partition_states(topology, cluster) if state.leader >= 0]


def not_in_sync(states: Iterable[PartitionState], broker_id: int | None = None) -> list[PartitionState]:
    """The partitions without a leader or whose ISR lacks a replica (``broker_id``: lacks that broker)."""
    return [state for state in states if state.leader < 0 or (
        broker_id in state.replicas and broker_id not in state.isr if broker_id is not None
        else set(state.replicas) - set(state.isr))]


def wait_in_sync(context: Context, cluster: ClusterSpec, broker_id: int) -> None:
    """Wait until ``broker_id`` is back in the ISR of every partition of ``cluster`` it holds."""
    behind: list[PartitionState] = []

    def caught_up() -> bool:
        behind[:] = not_in_sync(partition_states(context.topology, cluster), broker_id)
        return not behind

    context.wait(lambda: f"broker {broker_id} of {cluster.name} to be back in the ISR of "
                         f"{', '.join(f'{s.topic}-{s.partition}' for s in behind[:5])}", caught_up)
    context.event(f"broker {broker_id} in the ISR of every partition it holds")


def elect_preferred_leader(context: Context, cluster: ClusterSpec, broker_id: int) -> None:
    """Make ``broker_id`` the leader again of the partitions of ``cluster`` whose preferred (first) replica it is,
    as ``pipeline leader-election`` does, and wait until it leads them."""
    topology = context.topology
    preferred = [(s.topic, s.partition) for s in partition_states(topology, cluster)
                 if s.replicas and s.replicas[0] == broker_id]
    if not preferred:
        return
    client = connect(topology.cluster_zookeeper(cluster), timeout_s=10.0,
                     security=admin_command_config(topology).zookeeper)
    try:
        context.wait("an earlier preferred replica election to end",
                     lambda: client.exists(layout.ADMIN_PREFERRED_REPLICA_ELECTION) is None)
        client.create(layout.ADMIN_PREFERRED_REPLICA_ELECTION, layout.partition_list(preferred), makepath=True)
    except KazooException as exc:
        raise DrillError(f"cannot ask the controller of {cluster.name} for a preferred replica election: {exc}") \
            from None
    finally:
        client.stop()
        client.close()

    def leads() -> bool:
        return all(s.leader == broker_id for s in partition_states(topology, cluster)
                   if (s.topic, s.partition) in preferred)

    context.wait(f"broker {broker_id} of {cluster.name} to lead its {len(preferred)} preferred partitions again", leads)
    context.event(f"broker {broker_id} leads its {len(preferred)} preferred partitions again")


def file_size(path: Path) -> int:
    """Bytes of ``path`` (0 when it is not there)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


# -- metrics ------------------------------------------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition as ``name{labels}`` -> value, summed over the labels for plain ``name`` too."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def metrics_at(url: str) -> dict[str, float]:
    """The metrics served at ``url`` now, as :func:`parse_metrics` gives them ({} when it does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as answer:
            return parse_metrics(answer.read().decode())
    except (OSError, ValueError):
        return {}

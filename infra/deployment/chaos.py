"""Fault drills against the running deployment: ``python -m pipeline chaos kill-broker|kill-mirror|kill-etl|
pause-zookeeper``.

Each drill says what it will do and what to expect, does it to the processes supervisord runs (every program runs
in a process group of its own, so a SIGKILL or SIGSTOP reaches its children too: the ETL's Spark JVM, ZooKeeper's
Java), waits with a deadline until supervisord has restarted what died and every health check passes again,
prints the timeline, and says where to see the outcome. With ``--wait-audit`` it then waits until the audit has
reconciled the windows of event time that cover the drill and prints, per tier, completeness and the events
missing and duplicated (:mod:`infra.deployment.drill_audit`); the exit status is non-zero when an event was lost.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, TextIO, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from prometheus_client.parser import text_string_to_metric_families

from broker.config import KafkaConfig
from etl.report import FAILED
from infra.deployment.drill_audit import AuditApi, wait_for_audit
from infra.deployment.lifecycle import DeploymentError, shown
from infra.deployment.programs import Program, log_file, programs
from infra.deployment.supervisor import Supervisor
from infra.deployment.topology import REPO_ROOT, ClusterSpec, Topology, load
from pipeline.zk import layout
from pipeline.zk.client import ZooKeeperUnavailable, connect
from pipeline.zk.registry import ClusterRegistry

__all__ = ["DRILLS", "Drill", "DrillError", "add_parser", "choose_broker", "expiring_pause_s", "group_members",
           "parse_metrics"]

RESTART_TIMEOUT_S = 120.0
# How much longer than the brokers' ZooKeeper session the default pause lasts, so that their sessions expire.
PAUSE_MARGIN_S = 5.0
SESSION_TIMEOUT = "zookeeper.session.timeout.ms"
T = TypeVar("T")
_RECOVERY = re.compile(r"stopped after it began publishing|died before publishing")


class DrillError(DeploymentError):
    """A drill could not be run, or the deployment did not recover from it within its deadline."""


@dataclass(frozen=True)
class Drill:
    """One fault drill: its name, its help, its own arguments, and what it does."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[["Context", argparse.Namespace], None]


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


# -- brokers in ZooKeeper -----------------------------------------------------------------------------------------


def choose_broker(leaders: Iterable[int], broker_ids: Iterable[int]) -> int:
    """The broker leading most partitions (the lowest id of a tie); the first broker when none leads any."""
    ids = sorted(broker_ids)
    counts = Counter(leader for leader in leaders if leader in ids)
    if not counts:
        return ids[0]
    return min(counts, key=lambda broker_id: (-counts[broker_id], broker_id))


def _zookeeper_client(topology: Topology) -> KazooClient:
    client = KazooClient(hosts=topology.zookeeper_connect, timeout=5.0, connection_retry={"max_tries": 0})
    client.start(timeout=5.0)
    return client


def partition_leaders(topology: Topology, cluster: ClusterSpec) -> list[int]:
    """The leader of every partition of ``cluster`` as its partition states in ZooKeeper say."""
    try:
        client = connect(topology.cluster_zookeeper(cluster), timeout_s=10.0)
    except (ZooKeeperUnavailable, KazooException) as exc:
        raise DrillError(f"cannot read the partition leaders of {cluster.name}: {exc}") from None
    try:
        registry = ClusterRegistry(client)
        leaders = []
        for topic in registry.topics():
            for partition in registry.assignment(topic):
                state = registry.partition_state(topic, partition)
                if state is not None and state.get("leader", -1) >= 0:
                    leaders.append(int(state["leader"]))
        return leaders
    except KazooException as exc:
        raise DrillError(f"cannot read the partition leaders of {cluster.name}: {exc}") from None
    finally:
        client.stop()
        client.close()


def registrations(topology: Topology) -> dict[tuple[str, int], int | None]:
    """(cluster, broker id) -> the session owning its /brokers/ids node (None: not registered), every local broker;
    {} when ZooKeeper does not answer."""
    try:
        client = _zookeeper_client(topology)
    except (KazooTimeoutError, KazooException):
        return {}
    try:
        found = {}
        for cluster in topology.clusters:
            for broker_id in cluster.broker_ids():
                stat = client.exists(f"{cluster.chroot}{layout.broker_path(broker_id)}")
                found[(cluster.name, broker_id)] = None if stat is None else stat.ephemeralOwner
        return found
    except (KazooTimeoutError, KazooException):
        return {}
    finally:
        client.stop()
        client.close()


def expiring_pause_s(topology: Topology) -> float:
    """A ZooKeeper pause long enough for the brokers' sessions to expire: the longest session a broker gets (its
    zookeeper.session.timeout.ms, bounded by the server to 2..20 ticks) and a margin."""
    tick = topology.zookeeper.tick_ms
    longest = 0
    for cluster in topology.clusters:
        if cluster.external:
            continue
        settings = {SESSION_TIMEOUT: cluster.settings[SESSION_TIMEOUT]} if SESSION_TIMEOUT in cluster.settings else {}
        requested = KafkaConfig(settings)[SESSION_TIMEOUT]
        longest = max(longest, min(max(requested, 2 * tick), 20 * tick))
    return longest / 1000 + PAUSE_MARGIN_S


# -- the ETL's metrics --------------------------------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition as ``name{labels}`` -> value, summed over the labels for plain ``name`` too."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def etl_metrics(topology: Topology) -> dict[str, float]:
    """The ETL scheduler's metrics now ({} when it does not answer)."""
    url = f"http://{topology.host}:{topology.etl.metrics_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=2.0) as answer:
            return parse_metrics(answer.read().decode())
    except (OSError, ValueError):
        return {}


def runs_by_outcome(metrics: Mapping[str, float]) -> dict[str, int]:
    """The scheduler's runs since it started, by outcome (only outcomes with runs)."""
    found = {}
    for key, value in metrics.items():
        match = re.fullmatch(r'etl_runs_total\{group="[^"]*",outcome="([^"]+)"\}', key)
        if match and value:
            found[match.group(1)] = int(value)
    return found


def run_begun(metrics: Mapping[str, float]) -> bool:
    """Whether the scheduler behind ``metrics`` has begun a run since it started (in progress or ended)."""
    return bool(metrics.get("etl_run_in_progress") or runs_by_outcome(metrics))


def recovery_lines(path: Path, offset: int) -> list[str]:
    """The lines of the ETL's log after ``offset`` in which its recovery completed or discarded a run."""
    try:
        with open(path, errors="replace") as log:
            log.seek(offset)
            return [line.rstrip() for line in log if _RECOVERY.search(line)]
    except OSError:
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# -- the drills ---------------------------------------------------------------------------------------------------


def _kill_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", metavar="DC", help="the cluster of the broker: a datacenter (dc1) or offline")
    parser.add_argument("--broker", type=int, metavar="N",
                        help="the broker id (default: the broker of DC leading most partitions, whose loss "
                             "interrupts the most producing and mirroring)")


def kill_broker(context: Context, args: argparse.Namespace) -> None:
    topology = context.topology
    try:
        cluster = topology.cluster(args.cluster)
    except KeyError as exc:
        raise DrillError(str(exc.args[0])) from None
    if cluster.external:
        raise DrillError(f"cluster {cluster.name} is external: its brokers do not run here")
    if args.broker is None:
        leaders = partition_leaders(topology, cluster)
        broker_id = choose_broker(leaders, cluster.broker_ids())
        reason = (f"leads {leaders.count(broker_id)} of {len(leaders)} partitions" if leaders
                  else "no partition has a leader yet: the first broker")
    else:
        broker_id, reason = args.broker, "chosen"
        if broker_id not in cluster.broker_ids():
            raise DrillError(f"cluster {cluster.name} has brokers {cluster.broker_ids()}, not {broker_id}")
    program = context.program(f"broker-{cluster.name}-{broker_id}")
    role = ("the emulators produce to it" if cluster in topology.datacenters
            else "the mirror produces to it and the ETL reads from it")
    context.say(f"kill-broker: SIGKILL {program.name} (broker {broker_id} of {cluster.name}, {reason}); {role}.\n"
                "Expect: requests to its partitions fail until supervisord has restarted it and it registered again "
                "(its old ZooKeeper session must expire first); it recovers its log from disk, so what it "
                "acknowledged stays. Clients retry: the audit should show completeness 1.000 at every tier, with "
                "any event sent twice (an acknowledgement lost in the kill) named as duplicated.")
    # healthy = registered by the restarted process (its old session's node does not count)
    kill_and_wait(context, program)


def kill_mirror(context: Context, args: argparse.Namespace) -> None:
    program = context.program("mirror")
    context.say("kill-mirror: SIGKILL the mirror (its process group).\n"
                "Expect: supervisord restarts it; it rejoins its consumer groups and re-reads every datacenter "
                "from the offsets it last committed, so what it had copied since then reaches the offline cluster "
                "twice. Nothing is lost: the audit names those events as duplicated at tier offline (and the "
                "warehouse after the next ETL run), and the mirror tier may count fewer events than were copied "
                "(its counts of the killed process were not published).")
    kill_and_wait(context, program)


def _kill_etl_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--during-run", action="store_true",
                        help="wait until an ETL run is in progress (etl_run_in_progress is 1), then kill")


def kill_etl(context: Context, args: argparse.Namespace) -> None:
    topology = context.topology
    program = context.program("etl")
    when = "while a run is in progress" if args.during_run else "now"
    context.say(f"kill-etl: SIGKILL the ETL scheduler and its Spark JVM (its process group) {when}.\n"
                "Expect: supervisord restarts it; its first run recovers the warehouse: a run killed after it "
                "began publishing is completed from its journal, one killed before is discarded, and it loads "
                "again from the offsets the warehouse holds. No row is lost and none is written twice.")
    if args.during_run:
        waited = topology.etl.every_seconds + context.timeout_s
        context.wait("an ETL run to be in progress", lambda: etl_metrics(topology).get("etl_run_in_progress"),
                     timeout_s=waited)
        context.event("an ETL run is in progress")
    log = log_file(topology, program)
    offset = _size(log)
    kill_and_wait(context, program)
    # Two deadlines: the run must begin (the lock of the killed process's session expires first), then end
    # (starting Spark's JVM and loading everything that arrived meanwhile can take as long again).
    context.wait("the restarted ETL to begin its first run", lambda: run_begun(etl_metrics(topology)))
    context.event("the restarted ETL began its first run")
    outcomes = context.wait("the restarted ETL to finish its first run",
                            lambda: runs_by_outcome(etl_metrics(topology)))
    context.event(f"the restarted ETL's first run finished: "
                  f"{', '.join(f'{n} {outcome}' for outcome, n in sorted(outcomes.items()))}")
    recovered = recovery_lines(log, offset)
    for line in recovered:
        context.event(f"recovery: {line.split(': ', 1)[-1]}")
    if not recovered:
        context.event("recovery: no run was left half-done (killed before it staged anything)")
    if FAILED in outcomes:
        raise DrillError(f"the restarted ETL's first run failed; see {shown(log)}")


def _pause_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, metavar="S",
                        help="how long ZooKeeper stays stopped (default: long enough for the brokers' sessions to "
                             "expire: their zookeeper.session.timeout.ms as the server bounds it, plus "
                             f"{PAUSE_MARGIN_S:.0f}s)")


def pause_zookeeper(context: Context, args: argparse.Namespace) -> None:
    topology = context.topology
    nodes = context.of_kind("zookeeper")
    if not nodes:
        raise DrillError("ZooKeeper is external: nothing to pause here")
    seconds = expiring_pause_s(topology) if args.seconds is None else args.seconds
    context.say(f"pause-zookeeper: SIGSTOP every local ZooKeeper node ({', '.join(p.name for p in nodes)}) for "
                f"{seconds:.0f}s, then SIGCONT.\n"
                f"Expect: brokers, the mirror, the audit and the ETL lose their ZooKeeper connection; a pause "
                f"longer than a session (the default, {expiring_pause_s(topology):.0f}s) expires their sessions, "
                "so every broker registers again and the consumers rebalance. Producing and fetching from brokers "
                "that keep running goes on meanwhile. Nothing is lost; a consumer group that rebalances may "
                "re-read from its last committed offsets (duplicates at tier offline, named by the audit).")
    before = registrations(topology)
    paused = []
    try:
        for program in nodes:
            paused.append(signal_group(context, program, signal.SIGSTOP))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    finally:
        for pid in paused:
            os.killpg(pid, signal.SIGCONT)
        if paused:
            context.event(f"SIGCONT to {len(paused)} ZooKeeper process group(s)")
    context.wait("every broker to be registered again",
                 lambda: (now := registrations(topology)) and all(owner is not None for owner in now.values()))
    after = registrations(topology)
    renewed = sorted(f"{name}-{broker_id}" for (name, broker_id), owner in after.items()
                     if owner != before.get((name, broker_id)))
    context.event(f"every broker registered; under a new session: {', '.join(renewed) or 'none'}")
    wait_all_healthy(context)


DRILLS = (
    Drill("kill-broker", "SIGKILL a broker of a cluster; wait until supervisord restarted it and it registered",
          _kill_broker_arguments, kill_broker),
    Drill("kill-mirror", "SIGKILL the mirror; wait until supervisord restarted it", lambda parser: None, kill_mirror),
    Drill("kill-etl", "SIGKILL the ETL scheduler and its Spark JVM; wait until it restarted and ran once",
          _kill_etl_arguments, kill_etl),
    Drill("pause-zookeeper", "SIGSTOP every local ZooKeeper node for a while, then SIGCONT; wait until all is well",
          _pause_arguments, pause_zookeeper),
)


def how_to_look(topology: Topology) -> str:
    option = "" if topology.path == (REPO_ROOT / "infra" / "topology.yml") else f" --topology {topology.path}"
    return "\n".join(["See it:", f"  dashboard  {topology.dashboard_url}",
                      f"  python -m audit report --state-dir {shown(topology.audit_state_dir)}",
                      f"  python -m pipeline status{option}",
                      f"  logs in {shown(topology.logs_dir)}/"])


def run_drill(drill: Drill, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run ``drill`` on the deployment of ``args.topology``; 0 when it recovered (and nothing was lost)."""
    topology = load(args.topology)
    context = Context(topology, out, args.timeout)
    if not context.supervisor.running():
        raise DrillError(f"the deployment of {shown(topology.path)} is not running (no supervisord answers)")
    start_ms = int(time.time() * 1000)
    drill.run(context, args)
    end_ms = int(time.time() * 1000)
    context.say(f"{drill.name}: recovered in {time.monotonic() - context.began:.1f}s")
    lost = None
    if args.wait_audit:
        audit = topology.audit
        deadline_s = args.audit_timeout if args.audit_timeout is not None else default_audit_timeout_s(topology)
        try:
            verdict = wait_for_audit(AuditApi(f"http://{topology.host}:{audit.http_port}"), start_ms, end_ms,
                                     window_ms=audit.window_ms, grace_ms=audit.grace_ms, deadline_s=deadline_s,
                                     out=out)
        except OSError as exc:
            raise DrillError(f"no verdict from the audit: {exc}") from None
        context.say(f"the audit over the {verdict.windows} window(s) of the drill, against what the producers "
                    "acknowledged:")
        for tier in verdict.tiers:
            context.say("  " + tier.describe())
        lost = verdict.lost
    context.say(how_to_look(topology))
    if lost is not None:
        print(f"{drill.name}: events lost: {lost}", file=sys.stderr)
        return 1
    return 0


def default_audit_timeout_s(topology: Topology) -> float:
    """Long enough for the windows to pass their grace and the ETL to load them once."""
    return (topology.audit.window_ms + topology.audit.grace_ms) / 1000 + topology.etl.every_seconds + 60.0


def add_parser(subparsers: argparse._SubParsersAction, add_topology_option: Callable[..., None]) -> None:
    """Register ``chaos DRILL`` on ``subparsers``."""
    text = "fault drills against the running deployment, each with what to expect and the audit's verdict"
    parser = subparsers.add_parser("chaos", help=text, description=text[0].upper() + text[1:] + ".")
    add_topology_option(parser)
    drills = parser.add_subparsers(dest="drill", metavar="DRILL", required=True)
    for drill in DRILLS:
        sub = drills.add_parser(drill.name, help=drill.help, description=drill.help[0].upper() + drill.help[1:] + ".")
        add_topology_option(sub, inherited=True)
        drill.arguments(sub)
        sub.add_argument("--timeout", type=float, default=RESTART_TIMEOUT_S, metavar="S",
                         help=f"deadline of each wait for the deployment to recover (default {RESTART_TIMEOUT_S:.0f})")
        sub.add_argument("--wait-audit", action="store_true",
                         help="then wait until the audit reconciled the windows covering the drill and print, per "
                              "tier, completeness and the events missing and duplicated; exit 1 when one was lost")
        sub.add_argument("--audit-timeout", type=float, metavar="S",
                         help="deadline of --wait-audit (default: window + grace + the ETL's interval + 60s)")
        sub.set_defaults(handler=lambda args, drill=drill: run_drill(drill, args))

"""Fault drills against the running deployment: ``python -m pipeline chaos kill-broker|kill-mirror|kill-etl|
pause-zookeeper|kill-registry|kill-audit|poison-record|fill-disk``.

Each drill says what it will do and what to expect, does it to the processes supervisord runs (every program runs
in a process group of its own, so a SIGKILL or SIGSTOP reaches its children too: the ETL's Spark JVM, ZooKeeper's
Java) or to what the clusters store, waits with a deadline until supervisord has restarted what died and what
it checks has recovered, prints the timeline, and says where to see the outcome. With ``--wait-audit`` it then
waits until the audit has reconciled the windows of event time that cover the drill and prints its verdict per
tier (:mod:`infra.deployment.drill_audit`); the exit status is non-zero when an event is unaccounted for. The
drills on stored data are in :mod:`infra.deployment.data_drills`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TextIO

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from broker.config import KafkaConfig
from infra.deployment.data_drills import fill_disk, fill_disk_arguments, poison_record, poison_record_arguments
from infra.deployment.drill_audit import AuditApi, wait_for_audit
from infra.deployment.drill_context import (Context, DrillError, PartitionState, choose_broker, chosen_broker,
                                            file_size, group_members, kill_and_wait, metrics_at, parse_metrics,
                                            partition_states, signal_group, wait_all_healthy, wait_in_sync,
                                            wait_restarted)
from infra.deployment.lifecycle import shown
from infra.deployment.programs import HttpAccess, Program, http_get, log_file
from infra.deployment.topology import REPO_ROOT, ClusterSpec, Topology, load
from pipeline.etl_runs import FAILED
from pipeline.zk import layout

__all__ = ["DRILLS", "Drill", "DrillError", "add_parser", "choose_broker", "expiring_pause_s", "group_members",
           "parse_metrics", "run_drill"]

RESTART_TIMEOUT_S = 120.0
# How much longer than the brokers' ZooKeeper session the default pause lasts, so that their sessions expire.
PAUSE_MARGIN_S = 5.0
SESSION_TIMEOUT = "zookeeper.session.timeout.ms"
_RECOVERY = re.compile(r"stopped after it began publishing|died before publishing")


@dataclass(frozen=True)
class Drill:
    """One fault drill: its name, its help, its own arguments, and what it does."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Context, argparse.Namespace], None]


# -- brokers in ZooKeeper -----------------------------------------------------------------------------------------


def _zookeeper_client(topology: Topology) -> KazooClient:
    client = KazooClient(hosts=topology.zookeeper_connect, timeout=5.0, connection_retry={"max_tries": 0})
    client.start(timeout=5.0)
    return client


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


def etl_metrics(topology: Topology) -> dict[str, float]:
    """The ETL scheduler's metrics now ({} when it does not answer)."""
    return metrics_at(f"http://{topology.host}:{topology.etl.metrics_port}/metrics")


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


# -- the drills ---------------------------------------------------------------------------------------------------


def _kill_broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", metavar="DC", help="the cluster of the broker: a datacenter (dc1) or offline")
    parser.add_argument("--broker", type=int, metavar="N",
                        help="the broker id (default: the broker of DC leading most partitions, whose loss "
                             "interrupts the most producing and mirroring)")


def failover_expectation(cluster: ClusterSpec) -> str:
    """What losing one broker of ``cluster`` does to its partitions, from the replication its topics have."""
    name, replicas, in_sync = cluster.name, cluster.replication_factor, cluster.min_insync_replicas
    if replicas - 1 >= in_sync:
        return (f"Expect a failover: every topic of {name} has {replicas} replicas and takes acks=all writes with "
                f"{in_sync} in sync, so one broker less refuses nothing and loses nothing. Once its ZooKeeper "
                "session expires, the controller makes another in-sync replica the leader of each partition it "
                "led: no partition goes offline (unless the killed broker was the controller and its restart "
                "registers before a new controller looked: then it simply leads them again, as in Kafka). Until "
                "then its partitions have no live leader. The producers (acks=all, idempotent) retry within their "
                "delivery.timeout.ms, so no event fails and none is stored twice. supervisord restarts it; it "
                "recovers its log from disk, catches up and rejoins the ISR of its partitions. The audit should "
                "show completeness 1.000 at every tier with nothing named.")
    if replicas > 1:
        return (f"Expect its partitions to refuse writes for a while: the topics of {name} have {replicas} replicas "
                f"and take acks=all writes only with {in_sync} in sync, which one broker less does not leave. "
                "Leadership moves once its ZooKeeper session expires, and what was acknowledged stays; writes are "
                "refused (NOT_ENOUGH_REPLICAS) until supervisord has restarted it and it caught up. The producers "
                "retry within their delivery.timeout.ms: a restart shorter than that loses nothing; an event that "
                "fails for good is named lost at the producer tier by the audit.")
    return (f"Expect the partitions it leads to go offline: the topics of {name} have one replica "
            "(replication_factor 1), so no other broker can lead them until supervisord has restarted it and it "
            "registered again. It recovers its log from disk, so what it acknowledged stays. The producers retry "
            "within their delivery.timeout.ms: a restart shorter than that loses nothing; an event that fails for "
            "good is named lost at the producer tier by the audit.")


def emulator_failures(topology: Topology, cluster: ClusterSpec) -> float | None:
    """Events the emulators writing to ``cluster`` failed to store for good since they started (None: no
    emulators write to it, or they do not answer)."""
    if cluster.emulators is None:
        return None
    metrics = metrics_at(f"http://{topology.host}:{cluster.emulators.metrics_port}/metrics")
    # the counter of a topic appears with its first failure
    return metrics.get("emulator_events_failed_total", 0.0) if metrics else None


def watch_failover(context: Context, cluster: ClusterSpec, program: Program, broker_id: int, killed_at: float) -> None:
    """Wait until no partition of ``cluster`` names ``broker_id`` (killed at ``killed_at``, epoch seconds) its
    leader, or its restarted process has registered first, and say which: where the leadership went and whether a
    partition was left without a leader meanwhile, or that the broker came back before the controller moved its
    partitions (a restart within its ZooKeeper session looks to the controller like no change at all, as to
    Kafka's controller when it was the controller itself)."""
    led = {(s.topic, s.partition) for s in partition_states(context.topology, cluster) if s.leader == broker_id}
    leaderless: set[tuple[str, int]] = set()
    latest: list[PartitionState] = []

    def settled() -> str:
        latest[:] = partition_states(context.topology, cluster)
        leaderless.update((s.topic, s.partition) for s in latest if s.leader < 0)
        if all(s.leader != broker_id for s in latest):
            return "moved"
        return "back" if program.health(killed_at) else ""

    outcome = context.wait(f"the controller of {cluster.name} to move the leadership of the {len(led)} partitions "
                           f"broker {broker_id} led, or broker {broker_id} to register again", settled)
    offline = (f"{len(leaderless)} partition(s) had no leader (no in-sync replica left)" if leaderless
               else "no partition was without a leader")
    if outcome == "back":
        context.event(f"broker {broker_id} registered again {time.time() - killed_at:.1f}s after the kill, before the "
                      f"controller moved the leadership of the {len(led)} partitions it led: it leads them again (its "
                      "partitions had no live leader meanwhile); " + offline)
        return
    leaders = sorted({s.leader for s in latest if (s.topic, s.partition) in led and s.leader >= 0})
    context.event(f"leadership of the {len(led)} partitions broker {broker_id} led moved to broker(s) "
                  f"{', '.join(map(str, leaders)) or 'none'}; {offline}")


def kill_broker(context: Context, args: argparse.Namespace) -> None:
    topology = context.topology
    cluster, broker_id, reason = chosen_broker(topology, args.cluster, args.broker)
    program = context.program(f"broker-{cluster.name}-{broker_id}")
    role = ("the emulators produce to it" if cluster in topology.datacenters
            else "the mirror produces to it and the ETL reads from it")
    context.say(f"kill-broker: SIGKILL {program.name} (broker {broker_id} of {cluster.name}, {reason}); {role}.\n"
                + failover_expectation(cluster))
    failed_before = emulator_failures(topology, cluster)
    killed_at = time.time()
    pid = signal_group(context, program, signal.SIGKILL)
    context.wait(f"process group {pid} of {program.name} to be gone", lambda: not group_members(pid))
    context.event(f"process group {pid} gone")
    watch_failover(context, cluster, program, broker_id, killed_at)
    # healthy = registered by the restarted process (its old session's node does not count)
    wait_restarted(context, program, pid)
    wait_in_sync(context, cluster, broker_id)
    failed_after = emulator_failures(topology, cluster)
    if failed_before is not None and failed_after is not None and failed_after >= failed_before:
        context.event(f"the emulators of {cluster.name} failed to store {failed_after - failed_before:.0f} event(s) "
                      "for good during the drill")


def registered_ids(url: str, access: HttpAccess | None = None) -> dict[tuple[str, int], int]:
    """(subject, version) -> schema id of everything the registry at ``url`` holds."""
    def get(path: str) -> Any:
        return json.loads(http_get(url + path, access, 5.0))

    found = {}
    for subject in get("/subjects"):
        quoted = urllib.parse.quote(subject, safe="")
        for version in get(f"/subjects/{quoted}/versions"):
            found[(subject, version)] = int(get(f"/subjects/{quoted}/versions/{version}")["id"])
    return found


def kill_registry(context: Context, args: argparse.Namespace) -> None:
    program = context.program("registry")
    url = context.topology.registry_url
    context.say("kill-registry: SIGKILL the schema registry.\n"
                "Expect: supervisord restarts it; its schemas are in ZooKeeper, so it serves the same subjects "
                "under the same ids. Every client asks for an id once and keeps it (the emulators, the mirror, the "
                "audit and the ETL), so none of them waits on it and no event fails: the audit should show "
                "completeness 1.000 at every tier with nothing named. A client that meets an id new to it while "
                "the registry is away retries it.")
    try:
        before = registered_ids(url, HttpAccess.of(context.topology))
    except (OSError, ValueError, KeyError) as exc:
        raise DrillError(f"the registry at {url} does not answer: {exc}") from None
    context.event(f"the registry holds {len(before)} schema version(s) of {len({s for s, _ in before})} subject(s)")
    kill_and_wait(context, program)
    after = registered_ids(url, HttpAccess.of(context.topology))
    changed = sorted(f"{subject} version {version}" for (subject, version), schema_id in before.items()
                     if after.get((subject, version)) != schema_id)
    if changed:
        raise DrillError(f"the restarted registry serves other ids (or none) for {', '.join(changed)}")
    context.event(f"the restarted registry serves the same {len(before)} schema version(s) under the same ids")


def kill_audit(context: Context, args: argparse.Namespace) -> None:
    topology = context.topology
    program = context.program("audit")
    context.say(f"kill-audit: SIGKILL the audit service.\n"
                f"Expect: supervisord restarts it; it takes its counts and the offsets they stand at from its "
                f"checkpoint ({shown(topology.audit_state_dir)}) and reads on from there, so nothing is counted "
                "twice and nothing is missed; the windows that closed while it was away are reconciled once it is "
                "back. Its dashboard, API and /metrics are away for the seconds of the restart. The audit should "
                "show completeness 1.000 at every tier with nothing named.")
    pid = kill_and_wait(context, program)
    restarted_ms = int(context.supervisor.info(program.name).started * 1000)
    api = AuditApi(topology.dashboard_url, HttpAccess.of(topology))

    def reconciled() -> list[dict[str, Any]]:
        try:
            return [w for w in api.windows(restarted_ms - 10 * topology.audit.window_ms)
                    if w.get("reconciledAt", 0) >= restarted_ms]
        except (OSError, ValueError, KeyError):
            return []

    windows = context.wait(f"the restarted audit (pid {pid}) to reconcile a window", reconciled,
                           timeout_s=context.timeout_s + (topology.audit.window_ms + topology.audit.grace_ms) / 1000)
    context.event(f"the restarted audit reconciled {len(windows)} window(s) since it started")


def kill_mirror(context: Context, args: argparse.Namespace) -> None:
    program = context.program("mirror")
    if context.topology.mirror.exactly_once:
        context.say("kill-mirror: SIGKILL the mirror (its process group).\n"
                    "Expect: supervisord restarts it under the same transactional ids, which fences the killed "
                    "process: the transactions it left open are aborted, and it reads every datacenter on from the "
                    "offsets committed in the offline cluster with the records and their audit counts. Read "
                    "committed, as the ETL and the audit read, every event is in the offline cluster once: nothing "
                    "lost, nothing named duplicated at tier mirror, offline or warehouse.")
    else:
        context.say("kill-mirror: SIGKILL the mirror (its process group).\n"
                    "Expect: supervisord restarts it; it rejoins its consumer groups and re-reads every datacenter "
                    "from the offsets it last committed, so what it had copied since then reaches the offline "
                    "cluster twice. Nothing is lost: the audit names those events as duplicated at tier offline "
                    "(and the warehouse after the next ETL run), and the mirror tier may count fewer events than "
                    "were copied (its counts of the killed process were not published).")
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
    offset = file_size(log)
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
    Drill("kill-broker", "SIGKILL a broker of a cluster; wait until its partitions failed over, supervisord restarted "
                         "it and it is back in their ISR", _kill_broker_arguments, kill_broker),
    Drill("kill-mirror", "SIGKILL the mirror; wait until supervisord restarted it", lambda parser: None, kill_mirror),
    Drill("kill-etl", "SIGKILL the ETL scheduler and its Spark JVM; wait until it restarted and ran once",
          _kill_etl_arguments, kill_etl),
    Drill("pause-zookeeper", "SIGSTOP every local ZooKeeper node for a while, then SIGCONT; wait until all is well",
          _pause_arguments, pause_zookeeper),
    Drill("kill-registry", "SIGKILL the schema registry; wait until it restarted and serves the same ids",
          lambda parser: None, kill_registry),
    Drill("kill-audit", "SIGKILL the audit service; wait until it restarted and reconciled again", lambda parser: None,
          kill_audit),
    Drill("poison-record", "write records no tier can load as events into a datacenter's topic; wait until the "
                           "mirror copied them", poison_record_arguments, poison_record),
    Drill("fill-disk", "put a broker's log directory on a small filesystem, fill it, free it; wait until the broker "
                       "caught up", fill_disk_arguments, fill_disk),
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
            verdict = wait_for_audit(AuditApi(topology.dashboard_url, HttpAccess.of(topology)), start_ms, end_ms,
                                     window_ms=audit.window_ms, grace_ms=audit.grace_ms, deadline_s=deadline_s,
                                     out=out)
        except OSError as exc:
            raise DrillError(f"no verdict from the audit: {exc}") from None
        context.say(f"the audit's verdict over the {verdict.windows} window(s) of the drill:")
        for line in verdict.describe():
            context.say("  " + line)
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
                         help="then wait until the audit reconciled the windows covering the drill and print its "
                              "verdict per tier; exit 1 when an event is unaccounted for")
        sub.add_argument("--audit-timeout", type=float, metavar="S",
                         help="deadline of --wait-audit (default: window + grace + the ETL's interval + 60s)")
        sub.set_defaults(handler=lambda args, drill=drill: run_drill(drill, args))

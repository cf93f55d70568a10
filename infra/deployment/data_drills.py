"""The drills on what the pipeline stores: ``chaos poison-record DC TOPIC`` (records no tier can load as events)
and ``chaos fill-disk DC`` (a broker's log directory on a filesystem that fills up)."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from infra.deployment.drill_context import (Context, DrillError, chosen_broker, elect_preferred_leader, file_size,
                                            not_in_sync, partition_states, wait_in_sync, wait_restarted)
from infra.deployment.lifecycle import shown
from infra.deployment.poison import PoisonError, check_unknown, latest_value, mirrored, poison_records, write
from infra.deployment.programs import Program, broker_log_dir, log_file
from infra.deployment.secured import admin_command_config, admin_registry_settings
from infra.deployment.small_disk import SmallDisk, SmallDiskError, cannot_mount, directory_bytes
from infra.deployment.topology import ClusterSpec
from schemas.events import EVENT_TOPICS
from schemas.registry_client import SchemaRegistryClient

__all__ = ["fill_disk", "fill_disk_arguments", "poison_record", "poison_record_arguments"]

MIB = 1 << 20
# The most log a drill moves onto a memory filesystem.
MOST_MOVED = 1 << 30
NO_SPACE = "No space left on device"
# The broker's log lines for a produce request's append it refused, and for a follower's append that failed.
LEADER_APPEND_FAILED = re.compile(rf"broker\.replica_manager: append to \S+ failed: .*{NO_SPACE}")
FOLLOWER_APPEND_FAILED = re.compile(rf"broker\.replica_fetcher: .* failed: .*{NO_SPACE}")
MIRROR_GROUP = "group.id"


def poison_record_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", metavar="DC", help="the datacenter whose cluster gets the records")
    parser.add_argument("topic", metavar="TOPIC", help=f"an event topic: {', '.join(sorted(EVENT_TOPICS))}")


def poison_record(context: Context, args: argparse.Namespace) -> None:
    topology = context.topology
    names = [dc.name for dc in topology.datacenters]
    if args.cluster not in names:
        raise DrillError(f"poison-record writes into a datacenter's cluster, and {args.cluster!r} is none of "
                         f"{', '.join(names)}")
    if args.topic not in EVENT_TOPICS:
        raise DrillError(f"{args.topic!r} is not an event topic ({', '.join(sorted(EVENT_TOPICS))})")
    cluster = topology.cluster(args.cluster)
    zookeeper = topology.cluster_zookeeper(cluster)
    command = admin_command_config(topology)
    try:
        with SchemaRegistryClient(topology.registry_url, settings=admin_registry_settings(topology))\
                as registry:
            check_unknown(registry)
            records = poison_records(latest_value(zookeeper, args.topic, command.client), registry,
                                     int(time.time() * 1000))
    except (PoisonError, OSError) as exc:
        raise DrillError(f"cannot make the poison records: {exc}") from None
    context.say(f"poison-record: write {len(records)} records into {args.topic} of {cluster.name} that no tier can "
                f"load as events: {'; '.join(record.kind for record in records)}.\n"
                "Expect: the cluster stores them like any record and the mirror copies them to the offline cluster "
                "(it does not decode values). The ETL's next run sets each aside in its quarantine, with its lineage "
                f"and the reason ({', '.join(record.reason for record in records)}), and loads every other record: "
                "the warehouse keeps loading. The audit names the one with an event id unexpected at tier datacenter "
                "(no emulator created it) and quarantined at tier warehouse, and counts the others (they have no "
                "event id); no event the emulators created is lost.")
    try:
        placed = write(zookeeper, args.topic, records, security_settings=command.values)
    except PoisonError as exc:
        raise DrillError(str(exc)) from None
    for record in placed:
        event_id = f", event id {record.record.event_id}" if record.record.event_id else ""
        context.event(f"{record.record.kind}: {args.topic}-{record.partition} offset {record.offset} of "
                      f"{cluster.name}{event_id}")
    group = topology.mirror.settings.get(MIRROR_GROUP, "mirror")
    context.wait(f"the mirror (group {group}) to commit its offsets of {cluster.name} past them",
                 lambda: mirrored(zookeeper, group, args.topic, placed))
    context.event("the mirror copied them to the offline cluster (its offsets are committed past them)")
    context.say(f"See them in the quarantine after the ETL's next run (every {topology.etl.every}):\n"
                f"  python -m etl quarantine list --warehouse {shown(topology.warehouse)}")


def fill_disk_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", metavar="DC", help="the cluster of the broker: a datacenter (dc1) or offline")
    parser.add_argument("--broker", type=int, metavar="N",
                        help="the broker id (default: the broker of DC leading most partitions)")
    parser.add_argument("--seconds", type=float, default=30.0, metavar="S",
                        help="how long its disk stays full (default 30, well within the producers' "
                             "delivery.timeout.ms)")
    parser.add_argument("--headroom-mb", type=int, default=64, metavar="MB",
                        help="room on the small filesystem beyond the log it holds (default 64)")


def _expectation(cluster: ClusterSpec, broker_id: int, seconds: float) -> str:
    return (f"Expect: while its disk is full, broker {broker_id} refuses the writes to the partitions it leads "
            "(KAFKA_STORAGE_ERROR; it keeps leading them, where Kafka would take the log directory offline and "
            "move their leadership) and the producers retry them within their delivery.timeout.ms; it cannot "
            "copy what it follows, so it leaves their ISR after replica.lag.time.max.ms, and they go on with the "
            f"other replicas ({cluster.replication_factor} each, {cluster.min_insync_replicas} needed in sync). "
            "Once the space is freed it appends again and catches up. A fill shorter than the producers' delivery "
            f"timeout ({seconds:.0f}s here) loses nothing: the audit should show completeness 1.000 at every tier "
            "with nothing named; a longer one fails the events of its partitions, which the audit names lost at "
            "the producer tier.")


def _start(context: Context, program: Program) -> None:
    old = context.supervisor.info(program.name).pid
    context.supervisor.start(program.name)
    wait_restarted(context, program, old)


def _count_lines(path: Path, offset: int, pattern: re.Pattern[str]) -> int:
    """Lines of the log at ``path`` after ``offset`` that ``pattern`` finds."""
    try:
        with open(path, errors="replace") as log:
            log.seek(offset)
            return sum(bool(pattern.search(line)) for line in log)
    except OSError:
        return 0


def fill_disk(context: Context, args: argparse.Namespace) -> None:
    topology = context.topology
    reason = cannot_mount()
    if reason is not None:
        raise DrillError(f"fill-disk puts the broker's log directory on a small filesystem of its own (a tmpfs) "
                         f"and cannot mount one here: {reason}")
    cluster, broker_id, why = chosen_broker(topology, args.cluster, args.broker)
    program = context.program(f"broker-{cluster.name}-{broker_id}")
    log_dir = broker_log_dir(topology, cluster, broker_id)
    held = directory_bytes(log_dir)
    if held > MOST_MOVED:
        raise DrillError(f"{shown(log_dir)} holds {held / MIB:.0f} MiB, more than this drill moves onto a memory "
                         f"filesystem ({MOST_MOVED / MIB:.0f} MiB): drill a fresher deployment")
    context.say(f"fill-disk: put the log directory of {program.name} (broker {broker_id} of {cluster.name}, {why}) "
                f"on a filesystem of its own {args.headroom_mb} MiB larger than its log (a restart, and a preferred "
                f"replica election so that it leads its partitions again), then fill that filesystem for "
                f"{args.seconds:.0f}s and free it again.\n" + _expectation(cluster, broker_id, args.seconds))
    disk = SmallDisk(log_dir, args.headroom_mb * MIB)
    log = log_file(topology, program)
    try:
        context.supervisor.stop(program.name)
        context.event(f"stopped {program.name} (SIGTERM: its leadership moved away first)")
        size = disk.mount()
        context.event(f"moved its log directory ({held / MIB:.1f} MiB) onto a {size / MIB:.0f} MiB tmpfs at "
                      f"{shown(log_dir)}")
        _start(context, program)
        wait_in_sync(context, cluster, broker_id)
        elect_preferred_leader(context, cluster, broker_id)
        offset = file_size(log)
        filled = disk.fill()
        context.event(f"filled its filesystem: {filled / MIB:.1f} MiB of ballast, {disk.free_bytes()} bytes free")
        deadline = time.monotonic() + args.seconds
        left_isr = 0
        while time.monotonic() < deadline:
            left_isr = max(left_isr, len(not_in_sync(partition_states(topology, cluster), broker_id)))
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        state = context.supervisor.info(program.name).state
        refused = _count_lines(log, offset, LEADER_APPEND_FAILED)
        failed = _count_lines(log, offset, FOLLOWER_APPEND_FAILED)
        context.event(f"after {args.seconds:.0f}s full ({NO_SPACE}): {refused} produce append(s) refused as leader, "
                      f"{failed} follower append(s) failed, out of the ISR of {left_isr} partition(s), "
                      f"{program.name} {state}")
        disk.free()
        context.event("removed the ballast: its filesystem has room again")
        if not context.supervisor.info(program.name).running:
            _start(context, program)
        wait_in_sync(context, cluster, broker_id)
    except SmallDiskError as exc:
        raise DrillError(str(exc)) from None
    finally:
        _restore(context, program, disk)
    wait_in_sync(context, cluster, broker_id)
    elect_preferred_leader(context, cluster, broker_id)


def _restore(context: Context, program: Program, disk: SmallDisk) -> None:
    """Put the log directory back on the disk, the broker stopped meanwhile, and start it again."""
    if not disk.mounted():
        if not context.supervisor.info(program.name).running:
            _start(context, program)
        return
    context.supervisor.stop(program.name)
    disk.unmount()
    context.event(f"stopped {program.name} and moved its log directory back onto the disk")
    _start(context, program)

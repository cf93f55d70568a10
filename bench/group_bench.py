"""Consumer groups on the broker's coordinator: how long a 3-member group takes to stabilise after a member
leaves or is killed, and how many OffsetCommit requests per second one coordinator answers.

Stabilisation: confluent-kafka members (tests/support/stock_group_member.py, one process each, range assignor,
session.timeout.ms --session-timeout-ms, heartbeats every sixth of it) subscribe to a --partitions topic on a
standalone broker (group.initial.rebalance.delay.ms 0). Each repetition starts from a stable group of three
(every partition owned once); one member leaves (SIGTERM: the client closes and sends LeaveGroup) or is
SIGKILLed (the coordinator ends it when its session times out), and the clock runs from the signal until the
two survivors report, from their rebalance callbacks, owning every partition between them. A new member then
joins for the next repetition. Median and max of --repetitions of each.

OffsetCommit throughput: one member joins a group with raw JoinGroup/SyncGroup (tests/support/group_wire.py);
--connections connections to the coordinator each keep --pipeline OffsetCommit v2 requests in flight (one
partition per connection, rising offsets) for --seconds; requests answered per second, every answer checked.
Against a standalone broker (offsets kept in its log dir) and against the coordinator of a 3-broker cluster on
a real ZooKeeper (offsets kept in ZooKeeper). The committers are Python threads on the same machine and share
its cores with the broker, so the coordinator's own CPU time per request is printed beside the rate.

    python -m bench.group_bench [--repetitions 5] [--session-timeout-ms 3000] [--partitions 12]
        [--connections 4] [--pipeline 16] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from pipeline.client.admin import AdminClient
from pipeline.zk.server import ZooKeeperServer
from tests.support import BrokerProcess, group_wire, wire
from tests.support.cluster import BrokerCluster
from tests.support.stock_group_member import GroupMember
from tests.support.stock_groups import GROUP_SETTINGS, coordinator_of, wait_shared

COMMIT_TOPIC = "commit-bench"


def stabilisation_times(broker: BrokerProcess, work_dir: Path, departure: str, repetitions: int, partitions: int,
                        session_timeout_ms: int) -> list[float]:
    """Seconds from a member's SIGTERM ("leave") or SIGKILL ("kill") until the two others own every partition."""
    topic, group = f"stabilise-{departure}", f"stabilise-{departure}"
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics(topic, partitions=partitions)
    started: list[GroupMember] = []

    def member() -> GroupMember:
        joined = GroupMember(work_dir / f"{departure}-{len(started)}.log", "confluent", broker.bootstrap, group, topic,
                             session_timeout_ms=session_timeout_ms).start()
        started.append(joined)
        return joined

    times = []
    try:
        members = [member() for _ in range(3)]
        for _ in range(repetitions):
            wait_shared(members, partitions, timeout=60)
            gone, members = members[0], members[1:]
            began = time.monotonic()
            if departure == "kill":
                gone.process.kill()
            else:
                gone.process.terminate()
            wait_shared(members, partitions, timeout=60)
            times.append(time.monotonic() - began)
            gone.process.wait(30)
            members.append(member())
    finally:
        for joined in started:
            joined.stop()
    return times


def _commit_loop(host: str, port: int, group: str, generation: int, member_id: str, partition: int, pipeline: int,
                 seconds: float, answered: list[int], failures: list[str]) -> None:
    """Keep ``pipeline`` OffsetCommit requests in flight on one connection for ``seconds``; count the answers."""
    template = bytearray(group_wire.offset_commit_request(group, generation, member_id, COMMIT_TOPIC, {partition: 0}))
    offset_at = len(template) - 8 - 2  # the last partition's offset, before its empty metadata string
    count = 0
    with wire.KafkaConnection(host, port, timeout=30) as conn:
        def send(offset: int) -> int:
            struct.pack_into(">q", template, offset_at, offset)
            return conn.send(group_wire.API_OFFSET_COMMIT, 2, bytes(template))
        in_flight = [send(offset) for offset in range(pipeline)]
        offset = pipeline
        deadline = time.monotonic() + seconds
        while in_flight:
            errors = group_wire.parse_offset_commit(conn.receive(in_flight.pop(0)))
            if errors != {partition: group_wire.NONE}:
                failures.append(f"partition {partition}: {errors}")
                return
            count += 1
            if time.monotonic() < deadline:
                in_flight.append(send(offset))
                offset += 1
    answered.append(count)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commits_per_second(bootstrap: str, connections: int, pipeline: int, seconds: float,
                       pid_of: Callable[[int], int]) -> tuple[float, float]:
    """OffsetCommit requests answered per second by the coordinator of one group (see the module docstring), and
    the share of one core the coordinator's process used meanwhile (``pid_of`` maps its node id to its pid)."""
    group = "commit-bench"
    coordinator = coordinator_of(bootstrap, group)
    pid = pid_of(coordinator.node_id)
    with wire.KafkaConnection(coordinator.host, coordinator.port) as conn:
        joined = group_wire.join_group(conn, group, "", [COMMIT_TOPIC], session_timeout_ms=60000)
        assert joined.error_code == group_wire.NONE, joined
        sync = group_wire.send_sync_group(conn, group, joined.generation_id, joined.member_id, {
            joined.member_id: group_wire.assignment({COMMIT_TOPIC: list(range(connections))})})
        assert group_wire.receive_sync_group(conn, sync)[0] == group_wire.NONE
        answered: list[int] = []
        failures: list[str] = []
        threads = [threading.Thread(target=_commit_loop, args=(coordinator.host, coordinator.port, group,
                                                               joined.generation_id, joined.member_id, partition,
                                                               pipeline, seconds, answered, failures))
                   for partition in range(connections)]
        began, cpu_began = time.monotonic(), cpu_seconds(pid)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed, cpu = time.monotonic() - began, cpu_seconds(pid) - cpu_began
        group_wire.leave_group(conn, group, joined.member_id)
    if failures:
        raise SystemExit(f"OffsetCommit refused: {failures[:3]}")
    return sum(answered) / elapsed, cpu / elapsed


def summary(times: list[float]) -> str:
    return (f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
            f"({', '.join(f'{t * 1000:.0f}' for t in times)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--pipeline", type=int, default=16, help="OffsetCommit requests in flight per connection")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each commit run lasts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="group-bench-") as tmp:
        base = Path(tmp)
        with BrokerProcess(base / "standalone" / "logs", overrides=GROUP_SETTINGS,
                           log_path=base / "standalone" / "broker.log") as broker:
            print(f"3-member confluent-kafka group, {args.partitions} partitions, session.timeout.ms "
                  f"{args.session_timeout_ms}, standalone broker:")
            for departure, what in (("leave", "a member leaves (LeaveGroup)"), ("kill", "a member is killed")):
                times = stabilisation_times(broker, base, departure, args.repetitions, args.partitions,
                                            args.session_timeout_ms)
                print(f"  stable again after {what}: {summary(times)}")
            with AdminClient(broker.bootstrap) as admin:
                admin.create_topics(COMMIT_TOPIC, partitions=args.connections)
            rate, cpu = commits_per_second(broker.bootstrap, args.connections, args.pipeline, args.seconds,
                                           lambda _node: broker.pid)
            print(f"OffsetCommit, {args.connections} connections x {args.pipeline} in flight:")
            print(f"  standalone broker (log dir):  {rate:>8,.0f} requests/s, coordinator at {cpu:.0%} of a core "
                  f"({cpu / rate * 1e6:.0f} us of its CPU per request)")
        with ZooKeeperServer(base / "zookeeper") as server:
            cluster = BrokerCluster(base / "cluster", f"{server.connect_string}/group-bench", 3, GROUP_SETTINGS)
            with cluster:
                with AdminClient(cluster.bootstrap) as admin:
                    admin.create_topics(COMMIT_TOPIC, partitions=args.connections)
                cluster.wait_for_metadata(COMMIT_TOPIC, args.connections)
                rate, cpu = commits_per_second(cluster.bootstrap, args.connections, args.pipeline, args.seconds,
                                               lambda node: cluster.brokers[node].pid)
                print(f"  3-broker cluster (ZooKeeper): {rate:>8,.0f} requests/s, coordinator at {cpu:.0%} of a core "
                      f"({cpu / rate * 1e6:.0f} us of its CPU per request)")


if __name__ == "__main__":
    main()

"""A stock Kafka client's consumer-group member in its own process, for tests that SIGKILL or restart members.

    python -m tests.support.stock_group_member --client confluent|kafka-python|aiokafka \
        --bootstrap H:P --group G --topic T --log FILE [--session-timeout-ms 3000] \
        [--assignor range|roundrobin|cooperative-sticky] [--instance-id ID]

The member subscribes to one topic with the client's own group protocol (the broker coordinates), processes
every message, and commits synchronously what it processed after each poll. It appends to FILE one line per
event, each written straight to the file (os.write, so a SIGKILL loses nothing written):

    ASSIGN p,p,...   the partitions a rebalance callback handed over (all of them under an eager protocol,
                     only the new ones under cooperative-sticky)
    REVOKE p,p,...   the partitions a callback took away (or reported lost)
    OWN p,p,...      the member's whole assignment after that callback (`-` when empty)
    P p offset value a message processed
    C p offset       an offset committed (the next one to read)
    E text           a commit the coordinator refused (kept pending, retried after the next poll)

SIGTERM closes the consumer cleanly (a LeaveGroup, unless the member is static); SIGKILL is a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tests.support.process import ChildProcess, python_env

CLIENTS = ("confluent", "kafka-python", "aiokafka")


def _partitions_text(partitions: Iterable[int]) -> str:
    return ",".join(str(p) for p in sorted(partitions)) or "-"


def _parse_partitions(text: str) -> frozenset[int]:
    return frozenset() if text == "-" else frozenset(int(p) for p in text.split(","))


class EventLog:
    """The member's side of the log file: one os.write per line, and the assignment it reports."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.owned: set[int] = set()
        self.pending: dict[int, int] = {}  # processed but not yet committed: partition -> next offset

    def write(self, line: str) -> None:
        os.write(self.fd, f"{line}\n".encode())

    def assigned(self, partitions: Iterable[int]) -> None:
        partitions = set(partitions)
        self.owned |= partitions
        self.write(f"ASSIGN {_partitions_text(partitions)}")
        self.write(f"OWN {_partitions_text(self.owned)}")

    def revoked(self, partitions: Iterable[int]) -> None:
        partitions = set(partitions)
        self.owned -= partitions
        for partition in partitions:
            self.pending.pop(partition, None)
        self.write(f"REVOKE {_partitions_text(partitions)}")
        self.write(f"OWN {_partitions_text(self.owned)}")

    def processed(self, partition: int, offset: int, value: bytes | None) -> None:
        self.write(f"P {partition} {offset} {(value or b'').decode()}")
        self.pending[partition] = offset + 1

    def committed(self, offsets: dict[int, int]) -> None:
        for partition, offset in sorted(offsets.items()):
            self.write(f"C {partition} {offset}")
            if self.pending.get(partition) == offset:
                del self.pending[partition]

    def refused(self, error: object) -> None:
        self.write(f"E {str(error).replace(chr(10), ' ')}")

    def close(self) -> None:
        os.close(self.fd)


def run_confluent(args: argparse.Namespace, log: EventLog, stopping: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    settings = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "session.timeout.ms": args.session_timeout_ms,
                "heartbeat.interval.ms": args.session_timeout_ms // 6, "partition.assignment.strategy": args.assignor,
                "topic.metadata.refresh.interval.ms": 1000, "log_level": 3}
    if args.instance_id:
        settings["group.instance.id"] = args.instance_id
    consumer = Consumer(settings)

    def commit() -> None:
        if not log.pending:
            return
        offsets = [TopicPartition(args.topic, p, o) for p, o in log.pending.items()]
        try:
            results = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            log.refused(error)
            return
        log.committed({tp.partition: tp.offset for tp in results if tp.error is None})

    def on_revoke(_consumer: object, partitions: list) -> None:
        commit()
        log.revoked(tp.partition for tp in partitions)

    consumer.subscribe([args.topic], on_assign=lambda _c, ps: log.assigned(tp.partition for tp in ps),
                       on_revoke=on_revoke, on_lost=lambda _c, ps: log.revoked(tp.partition for tp in ps))
    try:
        while not stopping.is_set():
            for message in consumer.consume(num_messages=500, timeout=0.2):
                if message.error() is None:
                    log.processed(message.partition(), message.offset(), message.value())
                elif message.error().code() != KafkaError._PARTITION_EOF:
                    log.refused(message.error())
            commit()
    finally:
        consumer.close()


def run_kafka_python(args: argparse.Namespace, log: EventLog, stopping: threading.Event) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[args.assignor]
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=args.session_timeout_ms,
                             heartbeat_interval_ms=args.session_timeout_ms // 6, group_instance_id=args.instance_id,
                             partition_assignment_strategy=[assignor], metadata_max_age_ms=1000)

    def commit() -> None:
        if not log.pending:
            return
        offsets = dict(log.pending)
        try:
            consumer.commit({TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
        except KafkaError as error:
            log.refused(error)
            return
        log.committed(offsets)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: list) -> None:
            commit()
            log.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: list) -> None:
            log.assigned(tp.partition for tp in assigned)

    consumer.subscribe([args.topic], listener=Listener())
    try:
        while not stopping.is_set():
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    log.processed(record.partition, record.offset, record.value)
            commit()
    finally:
        consumer.close()


def run_aiokafka(args: argparse.Namespace, log: EventLog, stopping: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[args.assignor]

    async def consume() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, enable_auto_commit=False,
                                    auto_offset_reset="earliest", session_timeout_ms=args.session_timeout_ms,
                                    heartbeat_interval_ms=args.session_timeout_ms // 6,
                                    group_instance_id=args.instance_id, partition_assignment_strategy=(assignor,),
                                    metadata_max_age_ms=1000)

        async def commit() -> None:
            if not log.pending:
                return
            offsets = dict(log.pending)
            try:
                await consumer.commit({TopicPartition(args.topic, p): o for p, o in offsets.items()})
            except KafkaError as error:
                log.refused(error)
                return
            log.committed(offsets)

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: list) -> None:
                await commit()
                log.revoked(tp.partition for tp in revoked)

            async def on_partitions_assigned(self, assigned: list) -> None:
                log.assigned(tp.partition for tp in assigned)

        await consumer.start()
        consumer.subscribe([args.topic], listener=Listener())
        try:
            while not stopping.is_set():
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    for record in records:
                        log.processed(record.partition, record.offset, record.value)
                await commit()
        finally:
            await consumer.stop()

    asyncio.run(consume())


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS, required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--assignor", default="range", choices=("range", "roundrobin", "cooperative-sticky"))
    parser.add_argument("--instance-id", default=None, help="group.instance.id (static membership)")
    args = parser.parse_args()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    log = EventLog(args.log)
    try:
        RUNNERS[args.client](args, log, stopping)
    finally:
        log.close()
    return 0


# -- the test's side ------------------------------------------------------------------------------


@dataclass
class MemberLog:
    """What a member's log file says so far."""

    events: list[tuple[str, frozenset[int]]] = field(default_factory=list)  # (ASSIGN|REVOKE, partitions)
    owned: frozenset[int] | None = None  # None until the first assignment
    processed: list[tuple[int, int, str]] = field(default_factory=list)  # (partition, offset, value)
    committed: dict[int, int] = field(default_factory=dict)  # the last commit per partition
    refusals: list[str] = field(default_factory=list)


def read_member_log(path: Path) -> MemberLog:
    """Parse a member's log file (see the module docstring for the lines)."""
    result = MemberLog()
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return result
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind in ("ASSIGN", "REVOKE"):
            result.events.append((kind, _parse_partitions(rest)))
        elif kind == "OWN":
            result.owned = _parse_partitions(rest)
        elif kind == "P":
            partition, offset, value = rest.split(" ", 2)
            result.processed.append((int(partition), int(offset), value))
        elif kind == "C":
            partition, offset = rest.split()
            result.committed[int(partition)] = int(offset)
        elif kind == "E":
            result.refusals.append(rest)
    return result


class GroupMember:
    """One member process (``python -m tests.support.stock_group_member``) with its log file."""

    def __init__(self, log_path: Path, client: str, bootstrap: str, group: str, topic: str, *,
                 session_timeout_ms: int = 3000, assignor: str = "range", instance_id: str | None = None) -> None:
        self.log_path = Path(log_path)
        self.command = [sys.executable, "-m", "tests.support.stock_group_member", "--client", client,
                        "--bootstrap", bootstrap, "--group", group, "--topic", topic, "--log", str(self.log_path),
                        "--session-timeout-ms", str(session_timeout_ms), "--assignor", assignor]
        if instance_id is not None:
            self.command += ["--instance-id", instance_id]
        self.child: ChildProcess | None = None
        self.stderr_path = self.log_path.with_suffix(".stderr")

    def start(self) -> GroupMember:
        self.child = ChildProcess(f"group member {self.log_path.name}", self.command, self.stderr_path,
                                  env=python_env(), error=AssertionError).spawn()
        return self

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return None if self.child is None else self.child.process

    def read(self) -> MemberLog:
        return read_member_log(self.log_path)

    @property
    def is_running(self) -> bool:
        return self.child is not None and self.child.running

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (the client closes and leaves the group) and wait; SIGKILL if it outlives ``timeout``."""
        return None if self.child is None else self.child.stop(timeout)

    def kill(self) -> int | None:
        """SIGKILL (a crash: no LeaveGroup, no last commit) and reap."""
        return None if self.child is None else self.child.kill()

    def stderr_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


if __name__ == "__main__":
    raise SystemExit(main())

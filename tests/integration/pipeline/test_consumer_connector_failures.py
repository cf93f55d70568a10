"""ConsumerConnector under failures: a killed consumer process, new topics, broker loss, ZooKeeper trouble."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from pipeline.client.consumer_stream import ConsumerTimeout, KafkaStream
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.topic_filter import Whitelist
from pipeline.zk import layout
from pipeline.zk.server import ZooKeeperEnsemble
from tests.support.broker import REPO_ROOT
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import OwnershipObserver, connector, create_topic, produce, start_cluster
from tests.support.group_consumer import parse_log
from tests.support.polling import wait_until
from tests.support.zookeeper import expire_session, unique_chroot


class Reader:
    """Drains a stream on a thread into a list until stopped (timeouts just go round again)."""

    def __init__(self, stream: KafkaStream) -> None:
        self.records: list = []
        self._stream = stream
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.records.append(next(self._stream))
            except ConsumerTimeout:
                continue
            except StopIteration:
                return

    def values(self) -> list[bytes]:
        return [r.value for r in list(self.records)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


@pytest.mark.slow
def test_killed_consumer_process_loses_nothing_and_duplicates_only_after_its_last_commit(
        cluster: BrokerCluster, zk_connect: str, tmp_path: Path) -> None:
    total = 100_000
    create_topic(cluster, "stream", 12)
    observer = OwnershipObserver(zk_connect, "workers", "stream")
    logs = [tmp_path / f"consumer{i}.log" for i in range(3)]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    processes = [subprocess.Popen([sys.executable, "-m", "tests.support.group_consumer", "--zookeeper", zk_connect,
                                   "--group", "workers", "--topic", "stream", "--log", str(log),
                                   "--commit-every", "300", "--rate", "8000"],
                                  cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL)
                 for log in logs]
    try:
        wait_until(lambda: all(log.exists() and "READY" in log.read_text() for log in logs), 60,
                   message="three consumer processes ready")
        wait_until(lambda: len(observer.current()) == 12 and len({o.rsplit("-", 1)[0] for o in
                                                                  observer.current().values()}) == 3, 30,
                   message=lambda: f"12 partitions owned by 3 consumers, have {observer.current()}")
        with Producer({"zookeeper.connect": zk_connect, "producer.type": "async", "request.required.acks": 1,
                       "batch.size": 1000, "queue.time": 20}) as producer:
            for start in range(0, total, 100):
                producer.send(ProducerData("stream", None, [f"m{i}".encode() for i in range(start, start + 100)]))
            producer.flush()
            assert producer.failed_messages == 0

        def processed_lines(path: Path) -> int:
            return path.read_text().count("\nP ")

        wait_until(lambda: processed_lines(logs[0]) >= 5000, 60, message="the victim processing 5000 messages")
        assert sum(processed_lines(log) for log in logs) < total, "the kill must land in the middle of the stream"
        processes[0].send_signal(signal.SIGKILL)
        processes[0].wait()

        def seen() -> set[str]:
            return {value for log in logs for _, _, value in parse_log(log)[0]}

        wait_until(lambda: len(seen()) >= total, 120, interval=0.5,
                   message=lambda: f"the survivors covering all {total} messages (seen {len(seen())})")
        for process in processes[1:]:
            process.send_signal(signal.SIGTERM)
        for process in processes[1:]:
            assert process.wait(30) == 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        observer.close()
    victim_processed, victim_committed = parse_log(logs[0])
    assert victim_committed, "the victim committed before it died"
    everything = [entry for log in logs for entry in parse_log(log)[0]]
    assert {value for _, _, value in everything} == {f"m{i}" for i in range(total)}
    counts = Counter(value for _, _, value in everything)
    victim_values = {value: (partition, offset) for partition, offset, value in victim_processed}
    # A record counts as consumed once the application asks for the next one: the record a survivor was
    # processing when the rebalance after the kill moved its partition to the other survivor was not committed,
    # so the new owner gets it again -- the last record of that partition in the first owner's log, at most one
    # per survivor (one stream each).
    last_of_partition = [{partition: value for partition, _, value in parse_log(log)[0]} for log in logs[1:]]
    in_flight_at_rebalance = [set(last.values()) for last in last_of_partition]
    duplicates = [value for value, n in counts.items() if n > 1]
    handed_over = Counter()
    for value in duplicates:
        if value not in victim_values:
            holders = [i for i, values in enumerate(in_flight_at_rebalance) if value in values]
            assert holders, f"{value} was processed twice, not by the dead consumer nor in flight at a rebalance"
            handed_over[holders[0]] += 1
            continue
        partition, offset = victim_values[value]
        assert offset >= victim_committed.get(partition, 0), (
            f"{value} at {partition}/{offset} was redelivered although committed up to "
            f"{victim_committed.get(partition)}")
    assert all(n <= 1 for n in handed_over.values()), handed_over
    assert all(counts[v] == 2 for v in duplicates), "a redelivered message reaches one survivor only"


def test_whitelist_stream_picks_up_a_topic_created_later(cluster: BrokerCluster, zk_connect: str) -> None:
    create_topic(cluster, "logs.web", 2)
    create_topic(cluster, "metrics", 1)
    produce(zk_connect, "logs.web", ((None, f"web-{i}".encode()) for i in range(20)))
    produce(zk_connect, "metrics", ((None, f"metric-{i}".encode()) for i in range(5)))
    c = connector(zk_connect, "filtered")
    try:
        streams = c.create_message_streams_by_filter(Whitelist("logs\\..*"), 2)
        readers = [Reader(s) for s in streams]
        wait_until(lambda: sum(len(r.records) for r in readers) >= 20, 30, message="the first topic's messages")
        create_topic(cluster, "logs.app", 3)
        produce(zk_connect, "logs.app", ((None, f"app-{i}".encode()) for i in range(30)))
        wait_until(lambda: sum(len(r.records) for r in readers) >= 50, 30,
                   message="the new topic's messages through the filter streams")
        for r in readers:
            r.stop()
        values = sorted(v for r in readers for v in r.values())
        assert values == sorted([f"web-{i}".encode() for i in range(20)] + [f"app-{i}".encode() for i in range(30)])
        topics = {tp[0] for tp in c.owned_partitions()}
        assert topics == {"logs.web", "logs.app"}
    finally:
        c.shutdown()


def test_consumers_pause_on_a_dead_broker_and_resume_when_it_returns(cluster: BrokerCluster,
                                                                     zk_connect: str) -> None:
    create_topic(cluster, "orders", 6)
    members = [connector(zk_connect, "billing") for _ in range(2)]
    readers = []
    try:
        for m in members:
            readers.append(Reader(m.create_message_streams({"orders": 1})["orders"][0]))
        acknowledged: list[bytes] = []

        def send(prefix: str, n: int) -> None:
            with Producer({"zookeeper.connect": zk_connect, "request.required.acks": 1}) as producer:
                for i in range(n):
                    value = f"{prefix}-{i}".encode()
                    producer.send(ProducerData("orders", None, [value]))
                    acknowledged.append(value)

        def received() -> set[bytes]:
            return {v for r in readers for v in r.values()}

        send("before", 60)
        wait_until(lambda: set(acknowledged) <= received(), 30, message="messages before the failure")
        offline = sorted(p for p in range(6) if cluster.partition_state("orders", p)["leader"] == 3)
        cluster.brokers[3].kill()
        wait_until(lambda: all(cluster.partition_state("orders", p)["leader"] == -1 for p in offline), 30,
                   message="broker 3's partitions offline")
        send("during", 60)
        wait_until(lambda: set(acknowledged) <= received(), 30, message="messages sent while broker 3 was down")
        cluster.brokers[3].start()
        wait_until(lambda: all(cluster.partition_state("orders", p)["leader"] == 3 for p in offline), 30,
                   message="broker 3 leading its partitions again")
        with Producer({"zookeeper.connect": zk_connect, "request.required.acks": 1}) as producer:
            for i in range(60):
                value = f"after-{i}".encode()
                producer.send(ProducerData("orders", f"key-{i}".encode(), [value]))
                acknowledged.append(value)
        wait_until(lambda: set(acknowledged) <= received(), 30, message="messages after broker 3 returned")
        for r in readers:
            r.stop()
        values = [v for r in readers for v in r.values()]
        assert sorted(values) == sorted(acknowledged), "nothing acknowledged is lost or read twice"
        resumed = {r.partition for rd in readers for r in rd.records if r.value.startswith(b"after")}
        assert set(offline) <= resumed, "the consumers fetch the partitions of the returned broker again"
    finally:
        for m in members:
            m.shutdown()


def test_expired_session_reregisters_and_the_group_rebalances(cluster: BrokerCluster, zk_connect: str) -> None:
    create_topic(cluster, "jobs", 6)
    observer = OwnershipObserver(zk_connect, "workers", "jobs")
    a, b = connector(zk_connect, "workers"), connector(zk_connect, "workers")
    try:
        readers = [Reader(a.create_message_streams({"jobs": 1})["jobs"][0]),
                   Reader(b.create_message_streams({"jobs": 1})["jobs"][0])]
        wait_until(lambda: len(observer.current()) == 6 and len(set(observer.current().values())) == 2, 30,
                   message="both consumers owning partitions")
        old_session = a.zookeeper.client_id[0]
        seen_before = len(observer.history)
        expire_session(a.zookeeper)
        wait_until(lambda: a.zookeeper.client_id is not None and a.zookeeper.client_id[0] != old_session
                   and cluster.zk.exists(layout.consumer_path("workers", a.consumer_id)) is not None, 30,
                   message="consumer a registered again with a new session")
        wait_until(lambda: len(observer.current()) == 6 and len(set(observer.current().values())) == 2, 30,
                   message=lambda: f"the group owning every partition again, have {observer.current()}")
        assert any(f"{a.consumer_id}-0" not in s.values() for s in observer.history[seen_before:]), \
            "a's ownerships vanished with its session"
        assert f"{a.consumer_id}-0" in observer.current().values(), "a owns partitions again"
        produce(zk_connect, "jobs", ((None, f"j{i}".encode()) for i in range(60)))
        wait_until(lambda: sum(len(r.records) for r in readers) >= 60, 30, message="the group consuming again")
        for r in readers:
            r.stop()
        assert sorted(v for r in readers for v in r.values()) == sorted(f"j{i}".encode() for i in range(60))
    finally:
        a.shutdown()
        b.shutdown()
        observer.close()


def test_group_keeps_working_when_a_zookeeper_node_dies(tmp_path: Path) -> None:
    with ZooKeeperEnsemble(tmp_path / "ensemble", 3) as ensemble:
        zk_connect = ensemble.connect_string + unique_chroot()
        brokers = start_cluster(tmp_path / "cluster", zk_connect)
        members = []
        try:
            create_topic(brokers, "tasks", 4)
            members = [connector(zk_connect, "crew") for _ in range(2)]
            readers = [Reader(m.create_message_streams({"tasks": 1})["tasks"][0]) for m in members]
            produce(zk_connect, "tasks", ((None, f"t{i}".encode()) for i in range(40)))
            wait_until(lambda: sum(len(r.records) for r in readers) >= 40, 30, message="first messages")
            ensemble.leader().kill()
            produce(zk_connect, "tasks", ((None, f"u{i}".encode()) for i in range(40)))
            wait_until(lambda: sum(len(r.records) for r in readers) >= 80, 30,
                       message="messages after a ZooKeeper node died")
            late = connector(zk_connect, "crew")
            members.append(late)
            readers.append(Reader(late.create_message_streams({"tasks": 1})["tasks"][0]))
            wait_until(lambda: len({tp for m in members for tp in m.owned_partitions()}) == 4
                       and all(m.owned_partitions() for m in members[:3]), 30,
                       message="a rebalance among three consumers on the surviving quorum")
            for r in readers:
                r.stop()
            values = sorted(v for r in readers for v in r.values())
            assert set(values) == {f"t{i}".encode() for i in range(40)} | {f"u{i}".encode() for i in range(40)}
        finally:
            for m in members:
                m.shutdown()
            brokers.stop()

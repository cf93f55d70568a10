"""Replication on three broker processes over a real ZooKeeper (RF 3, min.insync.replicas 2), at the
protocol level so every error code is seen: a killed follower catches up and rejoins the ISR while
acks=all needs min.insync.replicas; with every replica down the partition waits for its last ISR member
(no unclean election) and comes back with every acknowledged message; a divergent tail is truncated at
the leader-epoch boundary so the old leader matches the new one byte for byte; replicas move by
reassignment while acks=all producing goes on; a state from an older controller epoch is ignored."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from pipeline.cli import main as pipeline_cli
from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import iter_batches
from pipeline.protocol.errors import ErrorCode
from pipeline.records import decode_batch, encode_batch
from pipeline.zk import layout
from tests.integration.broker.test_metrics import scrape, value
from tests.support.cluster import BrokerCluster, metadata
from tests.support.codec_client import Client, fetch_body
from tests.support.polling import WaitTimeout, wait_until

pytestmark = pytest.mark.timeout(180)

TOPIC = "replicated"
SETTINGS = {
    "zookeeper.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 100,
    "replica.fetch.backoff.ms": 200,
    "controlled.shutdown.retry.backoff.ms": 3000,
    "min.insync.replicas": 2,
    "auto.leader.rebalance.enable": False,
    "metrics.port": 0,
}


@pytest.fixture
def cluster(broker_cluster_factory, zk_connect) -> BrokerCluster:
    """Three brokers and the topic TOPIC (1 partition, RF 3) with every replica in sync."""
    cluster = broker_cluster_factory(zk_connect, size=3, overrides=SETTINGS)
    with _client(cluster, 1) as client:
        body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 3, "assignments": [],
                            "configs": []}], "timeout_ms": 10000}
        assert client.call(ApiKey.CREATE_TOPICS, 4, body)["topics"][0]["error_code"] == ErrorCode.NONE
    wait_isr(cluster, {1, 2, 3})
    return cluster


class _client:
    """A codec client to one broker of the cluster, closed on exit."""

    def __init__(self, cluster: BrokerCluster, broker_id: int) -> None:
        self.client = Client(cluster.brokers[broker_id].port)

    def __enter__(self) -> Client:
        return self.client

    def __exit__(self, *exc_info: object) -> None:
        self.client.close()


def state(cluster: BrokerCluster, topic: str = TOPIC) -> dict:
    return cluster.partition_state(topic, 0)


def serves(cluster: BrokerCluster, leader: int, topic: str = TOPIC) -> bool:
    """Whether ``leader`` leads the partition already: each broker acts on the state in ZooKeeper when its own
    watch fires, so the leader ZooKeeper names answers NOT_LEADER_OR_FOLLOWER until its view names it (a broker
    leads the partition before its Metadata says so)."""
    broker = cluster.brokers[leader]
    if not broker.is_running:
        return False
    try:
        partitions = metadata(broker, [topic])["topics"].get(topic, {}).get("partitions", {})
    except OSError:
        return False
    return partitions.get(0, {}).get("leader") == leader


def wait_isr(cluster: BrokerCluster, isr: set[int], timeout: float = 30) -> dict:
    """The partition's state once ZooKeeper holds ``isr`` and the leader it names serves."""
    def reached() -> dict | None:
        current = state(cluster)
        in_sync = set(current["isr"]) == isr and current["leader"] in isr
        return current if in_sync and serves(cluster, current["leader"]) else None
    return wait_until(reached, timeout, interval=0.1, message=lambda: f"ISR {sorted(isr)} (state {state(cluster)})")


def wait_leader(cluster: BrokerCluster, not_in: set[int] = frozenset(), timeout: float = 30) -> int:
    """The leader ZooKeeper names, outside ``not_in``, once it serves."""
    def elected() -> int | None:
        leader = state(cluster)["leader"]
        return leader if leader not in (-1, *not_in) and serves(cluster, leader) else None
    return wait_until(elected, timeout, interval=0.1, message=lambda: f"a leader outside {sorted(not_in)} "
                                                                      f"({state(cluster)})")


def produce(cluster: BrokerCluster, broker_id: int, values: list[bytes], acks: int = -1, topic: str = TOPIC,
            records: bytes | None = None) -> dict:
    """One Produce of ``values`` (or of the batch ``records``) to ``broker_id``; its partition's answer."""
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": encode_batch(values) if records is None else records}]}]}
    with _client(cluster, broker_id) as client:
        return client.call(ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"][0]


def produce_until_stored(cluster: BrokerCluster, values: list[bytes], acks: int = -1, timeout: float = 30,
                         topic: str = TOPIC) -> int:
    """Produce to the current leader until it acknowledges; the offset of the first value."""
    def attempt() -> dict | None:
        leader = state(cluster, topic)["leader"]
        if leader == -1:
            return None
        try:
            answer = produce(cluster, leader, values, acks, topic)
        except OSError:
            return None
        return answer if answer["error_code"] == ErrorCode.NONE else None
    return wait_until(attempt, timeout, interval=0.2, message="an acknowledged produce")["base_offset"]


class IdempotentWriter:
    """Writes batches under one producer id, so a batch retried after an attempt that failed late (a timeout, or
    leadership moving while acks=all waited) is stored once: the broker answers the retry with the first offsets."""

    def __init__(self, cluster: BrokerCluster, topic: str = TOPIC) -> None:
        self.cluster, self.topic, self.sequence = cluster, topic, 0
        broker = next(b for b, process in cluster.brokers.items() if process.is_running)
        with _client(cluster, broker) as client:
            answer = client.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert answer["error_code"] == ErrorCode.NONE, answer
        self.producer_id = answer["producer_id"]

    def write(self, values: list[bytes], broker_id: int | None = None, timeout: float = 30) -> int:
        """Produce (acks=all) to ``broker_id`` or the current leader until acknowledged; the first value's offset."""
        records = encode_batch(values, producer_id=self.producer_id, producer_epoch=0, base_sequence=self.sequence)

        def attempt() -> dict | None:
            target = state(self.cluster, self.topic)["leader"] if broker_id is None else broker_id
            if target == -1:
                return None
            try:
                answer = produce(self.cluster, target, values, topic=self.topic, records=records)
            except OSError:
                return None
            return answer if answer["error_code"] == ErrorCode.NONE else None
        offset = wait_until(attempt, timeout, interval=0.2, message="an acknowledged produce")["base_offset"]
        self.sequence += len(values)
        return offset


def read_all(cluster: BrokerCluster, broker_id: int, topic: str = TOPIC) -> list[tuple[int, bytes]]:
    """(offset, value) of every message a consumer reads from ``broker_id`` (the leader), up to its high watermark."""
    found: list[tuple[int, bytes]] = []
    offset = 0
    with _client(cluster, broker_id) as client:
        while True:
            answer = client.call(ApiKey.FETCH, 11, fetch_body([(topic, 0, offset, 1 << 20)]))
            part = answer["responses"][0]["partitions"][0]
            assert part["error_code"] == ErrorCode.NONE, part
            data = bytes(part["records"] or b"")
            if not data:
                return found
            for position, _ in iter_batches(data):
                found += [(r.offset, r.value) for r in decode_batch(data, position)[1]]
            offset = found[-1][0] + 1
            if offset >= part["high_watermark"]:
                return found


def latest_offsets(cluster: BrokerCluster, broker_id: int) -> tuple[int, list[int]]:
    """The latest offset of TOPIC-0 by ListOffsets v1, and the offsets ListOffsets v0 lists as latest."""
    answers = []
    with _client(cluster, broker_id) as client:
        for version in (1, 0):
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1, "max_num_offsets": 5}]}]}
            part = client.call(ApiKey.LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]
            assert part["error_code"] == ErrorCode.NONE, part
            answers.append(part["offset"] if version else part["old_style_offsets"])
    return answers[0], answers[1]


def log_bytes(cluster: BrokerCluster, broker_id: int) -> bytes:
    """The partition's segments on a broker's disk, concatenated in offset order."""
    directory = cluster.brokers[broker_id].partition_dir(TOPIC, 0)
    return b"".join(path.read_bytes() for path in sorted(Path(directory).glob("*.log")))


def holds_for(condition, seconds: float) -> None:
    """Poll ``condition`` for ``seconds``; fail as soon as it does not hold."""
    try:
        wait_until(lambda: not condition(), seconds, interval=0.2)
    except WaitTimeout:
        return
    raise AssertionError(f"the condition stopped holding within {seconds}s")


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def test_a_killed_follower_catches_up_and_rejoins_while_acks_all_needs_min_insync(cluster):
    leader = state(cluster)["leader"]
    first, second = [b for b in (1, 2, 3) if b != leader]
    acknowledged = []
    for batch in range(5):
        acknowledged += values(f"all-{batch}", 20)
        assert produce(cluster, leader, acknowledged[-20:])["error_code"] == ErrorCode.NONE

    cluster.brokers[first].kill()
    wait_isr(cluster, {leader, second})
    acknowledged += values("two-in-sync", 20)
    assert produce(cluster, leader, acknowledged[-20:])["error_code"] == ErrorCode.NONE

    cluster.brokers[second].kill()
    wait_isr(cluster, {leader})
    refused = produce(cluster, leader, values("refused", 5))
    assert refused["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    def under_min_isr() -> dict | None:
        found = scrape(cluster.brokers[leader])
        return found if value(found, "kafka_server_replicamanager_under_min_isr_partition_count") == 1 else None
    samples = wait_until(under_min_isr, 10, message="the leader's metrics showing the ISR below min.insync.replicas")
    assert value(samples, "kafka_server_replicamanager_under_replicated_partitions") == 1
    assert produce(cluster, leader, values("acks-one", 5), acks=1)["error_code"] == ErrorCode.NONE
    acknowledged += values("acks-one", 5)

    cluster.brokers[first].restart()
    cluster.brokers[second].restart()
    wait_isr(cluster, {1, 2, 3})
    acknowledged += values("after", 20)
    assert produce(cluster, leader, acknowledged[-20:])["error_code"] == ErrorCode.NONE
    wait_until(lambda: log_bytes(cluster, first) == log_bytes(cluster, leader) == log_bytes(cluster, second), 20,
               message="the followers' logs matching the leader's")
    assert [v for _, v in read_all(cluster, leader)] == acknowledged
    samples = scrape(cluster.brokers[leader])
    assert value(samples, "kafka_server_replicamanager_under_replicated_partitions") == 0
    assert value(samples, "kafka_server_replicamanager_isr_expands_total") >= 2


def test_with_every_replica_down_the_last_isr_member_is_waited_for(cluster):
    leader = state(cluster)["leader"]
    followers = [b for b in (1, 2, 3) if b != leader]
    acknowledged = values("replicated", 30)
    assert produce(cluster, leader, acknowledged)["error_code"] == ErrorCode.NONE
    for follower in followers:
        cluster.brokers[follower].kill()
    wait_isr(cluster, {leader})
    acknowledged += values("leader-only", 10)
    assert produce(cluster, leader, acknowledged[-10:], acks=1)["error_code"] == ErrorCode.NONE

    cluster.brokers[leader].kill()
    for follower in followers:
        cluster.brokers[follower].restart()
    cluster.wait_registered(set(followers))
    # No unclean election: the live replicas are out of the ISR, so the partition goes and stays offline.
    wait_until(lambda: state(cluster)["leader"] == -1, 30, message="the partition going offline")
    holds_for(lambda: state(cluster)["leader"] == -1 and state(cluster)["isr"] == [leader], 3)

    cluster.brokers[leader].restart()
    assert wait_leader(cluster) == leader
    wait_isr(cluster, {1, 2, 3})
    assert [v for _, v in read_all(cluster, leader)] == acknowledged


def test_a_divergent_tail_is_truncated_to_the_new_leaders_log(cluster):
    old_leader = state(cluster)["leader"]
    followers = [b for b in (1, 2, 3) if b != old_leader]
    committed = values("committed", 20)
    # The module's earlier tests moved leaderships: the leader ZooKeeper names may not serve yet.
    IdempotentWriter(cluster).write(committed, old_leader)
    wait_until(lambda: all(log_bytes(cluster, f) == log_bytes(cluster, old_leader) for f in followers), 20,
               message="the followers holding the committed batch")

    # The followers stop fetching; the leader appends (acks=1) batches nobody copies, then dies.
    for follower in followers:
        os.kill(cluster.brokers[follower].pid, signal.SIGSTOP)
    divergent = [values(f"divergent-{batch}", 10) for batch in range(3)]
    try:
        for batch in divergent:
            assert produce(cluster, old_leader, batch, acks=1)["error_code"] == 0
        # What may still vanish is invisible to consumers: the latest offset is the high watermark, where a
        # fetch finds nothing, whatever the ListOffsets version.
        latest, listed = latest_offsets(cluster, old_leader)
        assert latest == len(committed) and max(listed) == listed[0] == len(committed), (latest, listed)
        assert [v for _, v in read_all(cluster, old_leader)] == committed
    finally:
        cluster.brokers[old_leader].kill()
        for follower in followers:
            os.kill(cluster.brokers[follower].pid, signal.SIGCONT)
    new_leader = wait_leader(cluster, not_in={old_leader})
    later = values("new-epoch", 15)
    produce_until_stored(cluster, later)

    cluster.brokers[old_leader].restart()
    wait_isr(cluster, {1, 2, 3})
    wait_until(lambda: log_bytes(cluster, old_leader) == log_bytes(cluster, new_leader), 20,
               message="the old leader's log matching the new leader's byte for byte")
    # The one fetch a follower had sent or the leader was holding when the followers stopped may have carried
    # divergent batches to it (then they are the new leader's too): the first ones, as the leader read them when it
    # answered (on a loaded machine, after all three appends). The rest reached nobody and the old leader truncated
    # them.
    read = [v for _, v in read_all(cluster, new_leader)]
    assert read[:len(committed)] == committed and read[-len(later):] == later
    carried = len(read) - len(committed) - len(later)
    assert carried % 10 == 0 and read[len(committed):-len(later)] == sum(divergent[:carried // 10], [])
    old_log = log_bytes(cluster, old_leader)
    assert not any(value in old_log for batch in divergent[carried // 10:] for value in batch)
    broker_log = cluster.brokers[old_leader].log_text()
    assert ("truncating from" in broker_log) == (carried < 30), broker_log[-3000:]


def test_replicas_move_by_reassignment_while_acks_all_producing_goes_on(cluster, tmp_path):
    moving = "moving"
    with _client(cluster, 1) as client:
        body = {"topics": [{"name": moving, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                            "configs": [{"name": "min.insync.replicas", "value": "1"}]}], "timeout_ms": 10000}
        assert client.call(ApiKey.CREATE_TOPICS, 4, body)["topics"][0]["error_code"] == ErrorCode.NONE
    original = wait_until(lambda: state(cluster, moving)["leader"] if state(cluster, moving)["leader"] > 0 else None,
                          10, message="the new topic led")
    acknowledged: list[bytes] = []
    stop = threading.Event()

    writer = IdempotentWriter(cluster, moving)

    def keep_producing() -> None:
        batch = 0
        while not stop.is_set():
            batch_values = values(f"moving-{batch}", 5)
            writer.write(batch_values)
            acknowledged.extend(batch_values)
            batch += 1
    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        zookeeper = ["--zookeeper", cluster.zk_connect, "--command-timeout-ms", "10000"]
        assert pipeline_cli([*zookeeper, "topics", "alter", "--topic", moving, "--replication-factor", "3"]) == 0
        wait_until(lambda: len(cluster.assignment(moving)[0]) == 3 and len(state(cluster, moving)["isr"]) == 3, 30,
                   message=lambda: f"three replicas in sync ({cluster.assignment(moving)}, {state(cluster, moving)})")
        target = [b for b in (1, 2, 3) if b != original]
        request = tmp_path / "move.json"
        request.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": moving, "partition": 0, "replicas": target}]}))
        assert pipeline_cli([*zookeeper, "reassign-partitions", "--reassignment-json-file", str(request),
                             "--execute"]) == 0
        wait_until(lambda: cluster.assignment(moving)[0] == target and state(cluster, moving)["leader"] in target,
                   30, message=lambda: f"replicas {target} ({cluster.assignment(moving)}, {state(cluster, moving)})")
        wait_until(lambda: not cluster.brokers[original].partition_dir(moving, 0).exists(), 30,
                   message=f"broker {original} deleting its replica")
        count = len(acknowledged)
        wait_until(lambda: len(acknowledged) >= count + 20, 30, message="producing going on after the move")
    finally:
        stop.set()
        producer.join(60)
    leader = state(cluster, moving)["leader"]
    assert [v for _, v in read_all(cluster, leader, moving)] == acknowledged


def test_a_state_from_an_older_controller_epoch_is_ignored(cluster):
    current = state(cluster)
    leader = current["leader"]
    other = next(b for b in (1, 2, 3) if b != leader)
    assert current["controller_epoch"] >= 1
    # What a controller that lost its session would write, had ZooKeeper let it: another leader, a newer
    # leader epoch, its own (older) controller epoch.
    cluster.zk.set(layout.partition_state_path(TOPIC, 0), layout.partition_state(
        other, current["leader_epoch"] + 1, [other], current["controller_epoch"] - 1))
    wait_until(lambda: "ignoring a stale state of replicated-0" in cluster.brokers[leader].log_text(), 10,
               message="the leader ignoring the stale state")
    assert produce(cluster, leader, values("still-leading", 3))["error_code"] == ErrorCode.NONE

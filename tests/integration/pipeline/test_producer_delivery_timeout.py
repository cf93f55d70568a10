"""Time-bounded retries on a real cluster: with the producer's defaults (retries bounded by delivery.timeout.ms,
not by 3 x 100 ms) a leader election and a partition without any leader for seconds lose nothing, and the
idempotent producer stores each message once across its long retries."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Iterator

import pytest

from pipeline.client.admin import AdminClient
from pipeline.client.cluster import Cluster, StaticBrokerList
from pipeline.client.producer import CallbackHandler, Producer, ProducerData
from tests.integration.broker.test_replication import SETTINGS
from tests.support.cluster import BrokerCluster
from tests.support.clients import kafka_python_consume
from tests.support.polling import wait_until
from tests.support.zookeeper import unique_chroot

pytestmark = pytest.mark.timeout(180)


class _Outcomes(CallbackHandler):
    """The messages each async batch stored or failed, with the errors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stored: list[bytes] = []
        self.failed: list[tuple[bytes, BaseException]] = []

    def after_send(self, batch, result) -> None:
        with self.lock:
            if isinstance(result, BaseException):
                self.failed.extend((m, result) for m in batch.messages)
            else:
                self.stored.extend(batch.messages)


@pytest.fixture(scope="module")
def brokers(zookeeper_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    """Three brokers, sessions of 4 s (a SIGKILLed leader is replaced within about 5 s)."""
    cluster = BrokerCluster(Path(tmp_path_factory.mktemp("delivery-timeout")),
                            zookeeper_server.connect_string + unique_chroot(), 3, SETTINGS)
    with cluster:
        yield cluster


def _create_topic(brokers: BrokerCluster, topic: str, replication_factor: int) -> None:
    with AdminClient(Cluster(StaticBrokerList(brokers.bootstrap), client_id="test-admin"), close_cluster=True) as admin:
        admin.create_topics(topic, 1, replication_factor, {"min.insync.replicas": str(min(2, replication_factor))})
    wait_until(lambda: len(brokers.partition_state(topic, 0)["isr"]) == replication_factor, 30,
               message=f"every replica of {topic} in sync")


def _produce_through(brokers: BrokerCluster, topic: str, fault, total: int = 600) -> tuple[_Outcomes, Producer]:
    """Send ``total`` messages with an async idempotent producer at its default retry settings, running
    ``fault()`` half-way; the producer is closed once everything is settled."""
    outcomes = _Outcomes()
    producer = Producer({"metadata.broker.list": brokers.bootstrap, "producer.type": "async",
                         "enable.idempotence": True, "batch.size": 20, "queue.time": 5,
                         "request.timeout.ms": 3000}, outcomes)
    try:
        for i in range(total):
            producer.send(ProducerData(topic, None, f"{topic}-{i:05d}".encode(), partition=0))
            if i == total // 2:
                assert producer.flush(30)
                fault()
        assert producer.flush(100)
    finally:
        producer.close(30)
    return outcomes, producer


def test_a_leader_election_loses_and_doubles_nothing(brokers: BrokerCluster) -> None:
    _create_topic(brokers, "elect", 3)
    victim = brokers.partition_state("elect", 0)["leader"]

    def kill_leader() -> None:
        brokers.brokers[victim].kill()

    outcomes, producer = _produce_through(brokers, "elect", kill_leader)
    try:
        assert outcomes.failed == []
        assert producer._sender.retried_batches > 0, "the election cost no retry: nothing was tested"
        wait_until(lambda: brokers.partition_state("elect", 0)["leader"] not in (-1, victim), 30,
                   message="a new leader")
        live = ",".join(b.bootstrap for b in brokers.live())
        records = kafka_python_consume(live, "elect", [0], 600)
        assert sorted(r.value for r in records) == sorted(f"elect-{i:05d}".encode() for i in range(600))
    finally:
        brokers.brokers[victim].restart()
        brokers.wait_registered({1, 2, 3})


def test_a_partition_without_a_leader_for_seconds_loses_nothing(brokers: BrokerCluster, caplog) -> None:
    # Replication factor 1: while its one broker is down, the partition has no leader at all.
    _create_topic(brokers, "orphan", 1)
    owner = brokers.brokers[brokers.partition_state("orphan", 0)["leader"]]

    def bounce_owner() -> None:
        owner.stop()
        restarter = threading.Timer(2.0, owner.start)
        restarter.daemon = True
        restarter.start()

    with caplog.at_level(logging.WARNING, logger="pipeline.client.sender"):
        outcomes, producer = _produce_through(brokers, "orphan", bounce_owner)
    assert outcomes.failed == []
    assert producer._sender.retried_batches > 0
    # The operator is told why the events wait: one line per kind of error per 10 s, not one per retry.
    retries = [m for m in caplog.messages if m.startswith("producer ") and " retrying " in m]
    assert retries and all(" for orphan-0 in " in m and " of delivery.timeout.ms left): " in m for m in retries)
    assert len(retries) <= 2 * len(producer._sender.retry_warnings.counts), retries
    records = kafka_python_consume(brokers.bootstrap, "orphan", [0], 600)
    assert sorted(r.value for r in records) == sorted(f"orphan-{i:05d}".encode() for i in range(600))

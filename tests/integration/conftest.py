"""Fixtures of the integration tests: broker processes and clusters, the session's ZooKeeper and its chroots, a
ZooKeeper ensemble, a standalone schema registry, the three clusters of a pipeline test, consumer-group brokers and
their stock-client members. Every process is stopped after the test (or module, or session) that started it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from pipeline.zk.server import ZooKeeperEnsemble, ZooKeeperServer
from tests.support import BrokerProcess
from tests.support.cluster import BrokerCluster
from tests.support.consumer_groups import start_cluster
from tests.support.ports import free_port
from tests.support.mirror import start_clusters
from tests.support.process import stop_all
from tests.support.registry import RegistryProcess, standalone_registry
from tests.support.zookeeper import unique_chroot

BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start brokers on demand: `broker_factory(overrides={...}, start=True)`; all are stopped after the test.

    Each broker gets its own log dir under the test's tmp_path and a free loopback port.
    """
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, object] | None = None, start: bool = True, **kwargs: object) -> BrokerProcess:
        index = len(started)
        broker = BrokerProcess(
            tmp_path / f"broker{index}" / "logs",
            overrides=overrides,
            log_path=tmp_path / f"broker{index}" / "broker.log",
            **kwargs,
        )
        started.append(broker)
        if start:
            broker.start()
        return broker

    yield make
    stop_all(started)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """One running standalone broker with default settings (auto topic creation as configured by the broker)."""
    return broker_factory()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper server for the whole test session; tests isolate themselves by chroot. Its tick is
    short so that a killed broker's session ends within half a second of its timeout (sessions expire on tick
    boundaries), with the session range of ZooKeeper's default 2-second tick kept (4 to 40 s)."""
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), free_port(), tick_ms=500,
                         session_timeout_range_ms=(4000, 40000)) as server:
        yield server


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeperServer) -> str:
    """A zookeeper.connect string with a chroot of its own: host:port/test-<random>."""
    return zookeeper_server.connect_string + unique_chroot()


@pytest.fixture
def zk_ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    """A 3-node ZooKeeper ensemble for tests that kill ZooKeeper nodes; stopped after the test."""
    with ZooKeeperEnsemble(tmp_path / "ensemble", 3) as ensemble:
        yield ensemble


@pytest.fixture
def broker_cluster_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerCluster]]:
    """Start clusters on demand: `broker_cluster_factory(zk_connect, size=3, overrides={...})`; stopped after.

    Brokers get ids 1..size, cluster mode on the given zookeeper.connect (use `zk_connect` or an ensemble's
    connect string plus a chroot), their own log dirs under tmp_path and free loopback ports.
    """
    clusters: list[BrokerCluster] = []

    def make(zk_connect: str, size: int = 3, overrides: dict[str, object] | None = None,
             start: bool = True) -> BrokerCluster:
        cluster = BrokerCluster(tmp_path / f"cluster{len(clusters)}", zk_connect, size, overrides)
        clusters.append(cluster)
        if start:
            cluster.start()
        return cluster

    yield make
    stop_all(clusters)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[BrokerCluster]:
    """Three cluster-mode brokers on this test's ZooKeeper chroot, with the short session timeouts the
    consumer-group tests use; stopped after the test."""
    brokers = start_cluster(tmp_path / "cluster", zk_connect)
    try:
        yield brokers
    finally:
        brokers.stop()


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One standalone broker per test module that coordinates consumer groups with short sessions
    (group.min.session.timeout.ms=1000, no initial rebalance delay); tests use topics and groups of their own."""
    from tests.support.stock_groups import GROUP_SETTINGS

    home = tmp_path_factory.mktemp("group-broker")
    with BrokerProcess(home / "logs", overrides=GROUP_SETTINGS, log_path=home / "broker.log") as broker:
        yield broker


@pytest.fixture
def group_members() -> Iterator[list]:
    """The test's stock-client group member processes (tests append GroupMember objects); each one still
    running is killed after the test."""
    started: list = []
    yield started
    for member in started:
        member.kill()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryProcess]:
    """A standalone schema registry process (data and log under tmp_path/registry); it must exit 0 on SIGTERM."""
    yield from standalone_registry(tmp_path / "registry")


@pytest.fixture
def clusters(zookeeper_server: Any, broker_cluster_factory: Callable[..., BrokerCluster]
             ) -> Iterator[dict[str, BrokerCluster]]:
    """dc1, dc2 and offline: the three clusters of a pipeline test, one broker each on chroots of the session's
    ZooKeeper."""
    yield start_clusters(zookeeper_server, broker_cluster_factory)

"""ClusterMembership: the parts a broker adds in cluster mode (zookeeper.connect set), started and stopped together.

Start-up: connect to ZooKeeper (the chroot is created if missing), create the persistent layout and
the cluster id, register /brokers/ids/<id> (refusing a duplicate id), load the cluster view from the
watches and lead what it names, then join the controller election. Start-up calls run in the loop's
executor so the event loop never waits on ZooKeeper; every call after that is bounded (BoundedZk, with
``zookeeper.session.timeout.ms`` as the deadline) and requests that need ZooKeeper fail with a retriable
error when it does not answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from broker.cluster.admin import ZkAdminManager
from broker.cluster.controller import ControllerSettings, KafkaController
from broker.cluster.isr_writer import IsrChangeWriter
from broker.cluster.metadata_cache import CacheChanges, ZkMetadataCache
from broker.cluster.partition_leadership import PartitionLeadership
from broker.cluster.registry import BrokerIdInUse, BrokerRegistry, ZkProducerIdManager
from pipeline.error_text import describe_error
from pipeline.zk.client import BoundedZk, ZooKeeperTimeout
from broker.config import ConfigError, KafkaConfig
from broker.coordinator.coordination import GroupCoordination, TransactionCoordination
from broker.coordinator.group_store import ZkGroupStore
from broker.coordinator.transaction_store import ZkTransactionStore
from broker.kafka_apis import KafkaApis
from broker.log.log_manager import LogManager
from broker.metadata import BrokerEndpoint
from broker.log.meta_properties import InconsistentLogDirError, check_and_claim
from broker.metrics import BrokerMetrics
from broker.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from broker.replica_manager import ReplicaManager
from broker.security.credential_store import CredentialStore
from broker.security.zk_credential_store import ZkCredentialStore
from broker.security.listeners import EndPoint
from pipeline.zk.client import connect
from pipeline.zk.security import ZooKeeperSecurity

log = logging.getLogger(__name__)


class ClusterMembership:
    """This broker's ZooKeeper session and everything that lives on it."""

    def __init__(self, config: KafkaConfig, log_manager: LogManager, advertised: list[EndPoint],
                 metrics: BrokerMetrics | None = None) -> None:
        self.config = config
        self.log_manager = log_manager
        self.metrics = metrics
        # Every advertised listener; the inter-broker one is the address other brokers fetch from.
        self.advertised = advertised
        self.zk: KazooClient | None = None
        self.registry: BrokerRegistry | None = None
        self.cache: ZkMetadataCache | None = None
        self.controller: KafkaController | None = None
        self.admin: ZkAdminManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.isr_writer: IsrChangeWriter | None = None
        self._isr_task: asyncio.Task | None = None
        self.groups: GroupCoordination | None = None
        self.transactions: TransactionCoordination | None = None
        self.cluster_id = ""
        self.credentials: CredentialStore = CredentialStore()

    async def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, function, *args)

    async def start(self) -> KafkaApis:
        """Join the cluster; return the request handlers to serve with."""
        config = self.config
        loop = asyncio.get_running_loop()
        session_timeout_s = config["zookeeper.session.timeout.ms"] / 1000
        connection_timeout_s = config["zookeeper.connection.timeout.ms"] / 1000
        security = ZooKeeperSecurity.from_values(config.as_dict())
        self.zk = client = await loop.run_in_executor(
            None, lambda: connect(config["zookeeper.connect"], timeout_s=connection_timeout_s,
                                  session_timeout_s=session_timeout_s, security=security))
        zk = BoundedZk(client, session_timeout_s)
        broker_id = config.broker_id
        inter_broker = next(e for e in self.advertised if e.listener_name == config.inter_broker_listener_name)
        self.registry = registry = BrokerRegistry(
            zk, broker_id, inter_broker.host, inter_broker.port, session_timeout_s,
            [(e.listener_name, e.security_protocol, e.host, e.port) for e in self.advertised])
        await self._call(registry.create_persistent_paths)
        self.cluster_id = await self._call(registry.cluster_id)
        try:
            await self._call(check_and_claim, config.log_dirs, self.cluster_id, broker_id)
        except InconsistentLogDirError as exc:
            raise ConfigError(str(exc)) from None
        try:
            await self._call(registry.register)
        except BrokerIdInUse as exc:
            raise ConfigError(str(exc)) from None
        registry.start()

        leadership: list[PartitionLeadership] = []
        groups: list[GroupCoordination] = []
        transactions: list[TransactionCoordination] = []

        def on_change(changes: CacheChanges) -> None:
            leadership[0].reconcile(changes)
            if changes.brokers or changes.shutting_down:
                for coordination in groups + transactions:
                    coordination.brokers_changed()
        self.cache = cache = ZkMetadataCache(zk, loop, on_change=on_change,
                                             inter_broker_listener=config.inter_broker_listener_name)
        cache.cluster_id = self.cluster_id
        metrics = self.metrics if self.metrics is not None else BrokerMetrics()
        self.isr_writer = IsrChangeWriter(zk, broker_id, loop, metrics)
        self.replica_manager = replica_manager = ReplicaManager(
            self.log_manager, is_known=cache.is_known, metrics=metrics, broker_id=broker_id,
            isr_proposer=self.isr_writer.propose, is_shutting_down=lambda broker: broker in cache.shutting_down)
        self.fetchers = ReplicaFetcherManager(FetcherSettings(
            broker_id, config["replica.fetch.wait.max.ms"], config["replica.fetch.min.bytes"],
            config["replica.fetch.max.bytes"], config["replica.fetch.response.max.bytes"],
            config["replica.fetch.backoff.ms"], config["replica.socket.timeout.ms"], config["num.replica.fetchers"],
            config.inter_broker_security()))
        log_config = config.log_config()
        leadership.append(PartitionLeadership(broker_id, cache, replica_manager, log_config, self.fetchers))
        self._isr_task = loop.create_task(self._shrink_isrs(config["replica.lag.time.max.ms"]))
        await self._call(cache.start)
        if not await cache.wait_for(lambda: cache.loaded, connection_timeout_s):
            log.warning("the cluster view was not complete after %.0fs; serving what is known", connection_timeout_s)
        self.controller = KafkaController(zk, broker_id, ControllerSettings.from_config(config))
        await self._call(self.controller.start)
        self.admin = admin = ZkAdminManager(zk, cache, log_config, config["num.partitions"],
                                            config["default.replication.factor"])
        self.groups = GroupCoordination(
            config, ZkGroupStore(zk, config["offsets.commit.timeout.ms"] / 1000), self._owns_group,
            lambda group: cache.group_coordinator(group) if cache.connected else None, metrics.registry)
        groups.append(self.groups)
        producer_ids = ZkProducerIdManager(registry)

        def find_coordinator(key: str) -> BrokerEndpoint | None:
            return cache.group_coordinator(key) if cache.connected else None
        self.transactions = TransactionCoordination(
            config, ZkTransactionStore(zk, session_timeout_s), self._owns_group, find_coordinator, find_coordinator,
            cache, producer_ids, metrics.registry, config.inter_broker_security())
        transactions.append(self.transactions)
        self.credentials = credentials = ZkCredentialStore(zk, loop)
        await credentials.start()
        return KafkaApis(broker_id, replica_manager, admin, cache, producer_ids,
                         config["auto.create.topics.enable"], config["fetch.max.wait.cap.ms"], self.groups.apis,
                         self.transactions.apis)

    def _owns_group(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id`` (a group or a transactional id: both are placed alike) in
        its current view of the cluster."""
        cache = self.cache
        coordinator = cache.group_coordinator(group_id) if cache is not None else None
        return coordinator is not None and coordinator.broker_id == self.config.broker_id

    async def _shrink_isrs(self, max_lag_ms: int) -> None:
        """Kafka's isr-expiration task: every half lag period, drop followers that stopped catching up."""
        while True:
            await asyncio.sleep(max_lag_ms / 2000)
            self.replica_manager.shrink_isrs(max_lag_ms)

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away and take it out of the ISRs, and wait
        until it answered (Kafka's controlled shutdown, through ZooKeeper); gives up after the configured
        attempts, and the broker then stops anyway (its partitions fail over when its session ends)."""
        config = self.config
        if not config["controlled.shutdown.enable"] or self.registry is None or self.cache is None:
            return
        if self.zk is None or not self.zk.connected:
            log.warning("no controlled shutdown: ZooKeeper is not reachable")
            return
        attempts = config["controlled.shutdown.max.retries"] + 1
        wait_s = config["controlled.shutdown.retry.backoff.ms"] / 1000
        broker_id = config.broker_id
        for attempt in range(1, attempts + 1):
            try:
                remaining = await self._call(self.registry.request_controlled_shutdown, wait_s)
            except (KazooException, ZooKeeperTimeout) as exc:
                log.warning("controlled shutdown attempt %d failed: %s", attempt, describe_error(exc))
                continue
            if remaining is None:
                log.warning("controlled shutdown attempt %d: no answer from the controller in %.1fs", attempt, wait_s)
                continue
            cache = self.cache

            def moved() -> bool:
                led = sum(1 for topic in cache.topics.values() for state in topic.states.values()
                          if state.leader == broker_id)
                return led <= remaining
            await cache.wait_for(moved, wait_s)
            log.info("controlled shutdown done: %d partition(s) still led here (no other in-sync replica)", remaining)
            return
        log.warning("controlled shutdown did not complete after %d attempt(s); stopping anyway", attempts)

    @property
    def is_active_controller(self) -> bool:
        """Whether this broker is the cluster's active controller."""
        controller = self.controller
        return controller is not None and controller.is_active

    def quiesce(self) -> None:
        """Stop acting on the cluster (controller duties, leadership changes, replica fetching, ISR changes)
        before the logs close."""
        if self.cache is not None:
            self.cache.on_change = None
        if self._isr_task is not None:
            self._isr_task.cancel()
            self._isr_task = None
        if self.isr_writer is not None:
            self.isr_writer.close()
        if self.fetchers is not None:
            self.fetchers.shutdown()
        if self.admin is not None:
            self.admin.close()
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    async def close(self) -> None:
        """Leave the cluster: stop the controller and end the session (the registration vanishes at once)."""
        self.quiesce()
        if isinstance(self.credentials, ZkCredentialStore):
            self.credentials.close()
        if self.registry is not None:
            self.registry.close()
        zk = self.zk
        if zk is not None:
            self.zk = None

            def end_session() -> None:
                zk.stop()
                zk.close()
            await self._call(end_session)

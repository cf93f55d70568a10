"""GroupCoordination and TransactionCoordination: a broker's group and transaction coordinators, each with its
store, its request handlers and its periodic work, built for standalone or cluster mode and stopped together."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from broker.config import KafkaConfig
from broker.coordinator.coordinator_metrics import GroupCoordinatorMetrics
from broker.coordinator.group_apis import GroupApis
from broker.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from broker.coordinator.group_store import FileGroupStore, GroupStore
from broker.coordinator.transaction_apis import TransactionApis
from broker.coordinator.transaction_coordinator import TransactionConfig, TransactionCoordinator
from broker.coordinator.transaction_marker_channel import NO_ROUTE, LocalWriter, TransactionMarkerChannelManager
from broker.coordinator.transaction_metrics import TransactionCoordinatorMetrics
from broker.coordinator.transaction_store import FileTransactionStore, TransactionStore
from broker.kafka_scheduler import KafkaScheduler
from broker.metadata import BrokerEndpoint, MetadataView, ProducerIdManager
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity
from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)


class GroupCoordination:
    """The coordinator of the groups ``owns`` names, answering FindCoordinator with ``find``."""

    def __init__(self, config: KafkaConfig, store: GroupStore, owns: Callable[[str], bool],
                 find: Callable[[str], BrokerEndpoint | None], registry: CollectorRegistry) -> None:
        self.store = store
        metrics = GroupCoordinatorMetrics()
        registry.register(metrics)
        self.coordinator = GroupCoordinator(store, GroupConfig.from_config(config), owns, metrics)
        self.apis = GroupApis(self.coordinator, find)
        self._config = config

    @classmethod
    def standalone(cls, config: KafkaConfig, endpoint: BrokerEndpoint, registry: CollectorRegistry) -> GroupCoordination:
        """A standalone broker coordinates every group, with offsets in its first log dir."""
        return cls(config, FileGroupStore(config.log_dirs[0]), lambda group: True, lambda group: endpoint, registry)

    def schedule(self, scheduler: KafkaScheduler, loop: asyncio.AbstractEventLoop) -> None:
        """Offset expiry every ``offsets.retention.check.interval.ms`` (on the loop), and the file store's fsync."""
        def expire() -> None:
            asyncio.run_coroutine_threadsafe(self.coordinator.expire_offsets(), loop).result()
        scheduler.schedule("delete-expired-group-metadata", expire, self._config["offsets.retention.check.interval.ms"])
        if isinstance(self.store, FileGroupStore):
            scheduler.schedule("group-offsets-flush", self.store.flush, self._config["log.flush.scheduler.interval.ms"])

    def brokers_changed(self) -> None:
        """Hand over the groups another broker coordinates now."""
        self.coordinator.unload_moved_groups()

    def shutdown(self) -> None:
        """Answer waiting group requests NOT_COORDINATOR, so members move on to the next coordinator."""
        self.coordinator.shutdown()

    def close(self) -> None:
        """Close the store (after the scheduler stopped)."""
        if isinstance(self.store, FileGroupStore):
            self.store.close()


class TransactionCoordination:
    """The coordinator of the transactional ids ``owns`` names, answering FindCoordinator (key type 1) with
    ``find``; markers go to the partition leaders ``view`` names and to the groups' coordinators (``find_group``)."""

    def __init__(self, config: KafkaConfig, store: TransactionStore, owns: Callable[[str], bool],
                 find: Callable[[str], BrokerEndpoint | None], find_group: Callable[[str], BrokerEndpoint | None],
                 view: MetadataView, producer_ids: ProducerIdManager, registry: CollectorRegistry,
                 security: ClientSecurity = PLAINTEXT_SECURITY) -> None:
        """``security``: how to reach the other brokers' inter-broker listeners (KafkaConfig.inter_broker_security()
        in a cluster; a standalone broker writes every marker in process)."""
        self.store = store
        self._config = config
        metrics = TransactionCoordinatorMetrics()
        registry.register(metrics)

        def route(topic: str, partition: int, group: str | None) -> int | None:
            if group is not None:
                coordinator = find_group(group)
                return NO_ROUTE if coordinator is None else coordinator.broker_id
            partitions = view.describe_topic(topic)
            if partitions is None:
                return None
            for candidate in partitions:
                if candidate.index == partition:
                    return candidate.leader if candidate.leader >= 0 else NO_ROUTE
            return NO_ROUTE if not partitions else None

        def endpoint(broker_id: int) -> BrokerEndpoint | None:
            return next((b for b in view.live_brokers() if b.broker_id == broker_id), None)
        self.markers = TransactionMarkerChannelManager(
            config.broker_id, route, endpoint, security,
            config["replica.socket.timeout.ms"])
        self.coordinator = TransactionCoordinator(store, TransactionConfig.from_config(config), owns, producer_ids,
                                                  self.markers, metrics)
        self.apis = TransactionApis(self.coordinator, find)

    @classmethod
    def standalone(cls, config: KafkaConfig, endpoint: BrokerEndpoint, view: MetadataView,
                   producer_ids: ProducerIdManager, registry: CollectorRegistry) -> TransactionCoordination:
        """A standalone broker coordinates every transactional id, with their state in its first log dir."""
        return cls(config, FileTransactionStore(config.log_dirs[0]), lambda transactional_id: True,
                   lambda transactional_id: endpoint, lambda group: endpoint, view, producer_ids, registry)

    def start(self, local_markers: LocalWriter | None) -> None:
        """Write this broker's own markers through ``local_markers`` (KafkaApis.write_txn_markers) and load the
        ids this broker coordinates (on the running loop)."""
        self.markers.local = local_markers
        self.coordinator.brokers_changed()

    def schedule(self, scheduler: KafkaScheduler, loop: asyncio.AbstractEventLoop) -> None:
        """Abort timed-out transactions and expire idle transactional ids (on the loop), and the file store's fsync."""
        config = self._config
        coordinator = self.coordinator

        def abort_timed_out() -> None:
            asyncio.run_coroutine_threadsafe(coordinator.abort_timed_out(), loop).result()

        def expire() -> None:
            asyncio.run_coroutine_threadsafe(coordinator.expire_transactional_ids(), loop).result()
        scheduler.schedule("transaction-abort", abort_timed_out,
                           config["transaction.abort.timed.out.transaction.cleanup.interval.ms"])
        scheduler.schedule("transactionalId-expiration", expire,
                           config["transaction.remove.expired.transaction.cleanup.interval.ms"])
        if isinstance(self.store, FileTransactionStore):
            scheduler.schedule("transaction-state-flush", self.store.flush, config["log.flush.scheduler.interval.ms"])

    def brokers_changed(self) -> None:
        """Hand over the ids another broker coordinates now and take over those that moved here."""
        self.coordinator.brokers_changed()

    async def shutdown(self) -> None:
        """Answer NOT_COORDINATOR from now on and stop marker work (the next coordinator resumes it)."""
        await self.coordinator.shutdown()

    def close(self) -> None:
        """Close the store (after the scheduler stopped)."""
        if isinstance(self.store, FileTransactionStore):
            self.store.close()

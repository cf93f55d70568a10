"""GroupCoordination: a broker's group coordinator with its store, its request handlers and its periodic work,
built for standalone or cluster mode and stopped together."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from broker.config import KafkaConfig
from broker.coordinator.coordinator_metrics import GroupCoordinatorMetrics
from broker.coordinator.group_apis import GroupApis
from broker.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from broker.coordinator.group_store import FileGroupStore, GroupStore
from broker.kafka_scheduler import KafkaScheduler
from broker.metadata import BrokerEndpoint
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

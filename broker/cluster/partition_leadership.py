"""PartitionLeadership: makes the partitions this broker hosts follow the states in ZooKeeper.

After every change of the cluster view it leads (opening or creating the log, with the topic's
config overrides and the state's leader epoch) each partition whose state names this broker, stops
leading the ones that name another broker or none (the log stays on disk: the partition may come
back), and deletes the logs of topics that were deleted.
"""

from __future__ import annotations

import logging

from broker.admin_manager import TopicError, topic_log_config
from broker.log.log_config import LogConfig
from broker.log.partition_metadata import read_topic_id, write_topic_id
from broker.replica_manager import ReplicaManager
from broker.cluster.metadata_cache import ZkMetadataCache

log = logging.getLogger(__name__)


class PartitionLeadership:
    """Reconciles the ReplicaManager's hosted partitions with the cached partition states."""

    def __init__(self, broker_id: int, cache: ZkMetadataCache, replica_manager: ReplicaManager,
                 default_log_config: LogConfig) -> None:
        self.broker_id = broker_id
        self._cache = cache
        self._replica_manager = replica_manager
        self._default_log_config = default_log_config
        self._seen_topics: set[str] = set()

    def reconcile(self) -> None:
        """Apply the cached view; runs on the event loop after every change."""
        me = self.broker_id
        led: set[tuple[str, int]] = set()
        for topic in self._cache.topics.values():
            mine = [(index, state) for index, state in topic.states.items() if state.leader == me]
            if not mine:
                continue
            config = self._log_config(topic.name, topic.configs)
            for index, state in mine:
                led.add((topic.name, index))
                partition = self._replica_manager.get_partition(topic.name, index)
                if partition is None:
                    self._drop_other_incarnation(topic.name, index, topic.topic_id)
                    log.info("leading %s-%d (leader epoch %d)", topic.name, index, state.leader_epoch)
                    partition = self._replica_manager.make_leader(topic.name, index, config, state.leader_epoch)
                    if topic.topic_id and read_topic_id(partition.log.dir) != topic.topic_id:
                        write_topic_id(partition.log.dir, topic.topic_id)
                elif partition.leader_epoch != state.leader_epoch:
                    partition.leader_epoch = state.leader_epoch
        current = set(self._cache.topics)
        deleted = self._seen_topics - current
        for partition in list(self._replica_manager.partitions()):
            key = (partition.topic, partition.index)
            if key not in led and partition.topic not in deleted:
                log.info("no longer leading %s-%d; its log stays", partition.topic, partition.index)
                self._replica_manager.stop_partition(partition.topic, partition.index, delete=False)
        if deleted:
            for topic, index in self._replica_manager.partitions_on_disk():
                if topic in deleted:
                    log.info("deleting the log of %s-%d: the topic was deleted", topic, index)
                    self._replica_manager.stop_partition(topic, index, delete=True)
        self._seen_topics = current

    def _drop_other_incarnation(self, topic: str, index: int, topic_id: str | None) -> None:
        """Delete a log on disk that belongs to an earlier topic of the same name (deleted while we were down)."""
        directory = self._replica_manager.log_dir(topic, index)
        if directory is None or topic_id is None:
            return
        recorded = read_topic_id(directory)
        if recorded is not None and recorded != topic_id:
            log.warning("deleting the log of %s-%d: it belongs to an earlier topic of that name (id %s, now %s)",
                        topic, index, recorded, topic_id)
            self._replica_manager.stop_partition(topic, index, delete=True)

    def _log_config(self, topic: str, configs: dict[str, str]) -> LogConfig:
        try:
            return topic_log_config(self._default_log_config, configs)
        except TopicError as exc:
            log.warning("topic %s: ignoring its configs (%s)", topic, exc)
            return self._default_log_config

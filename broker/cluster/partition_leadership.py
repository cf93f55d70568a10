"""PartitionLeadership: makes the partitions this broker hosts follow the states in ZooKeeper.

After every batch of changes to the cluster view it looks at the partitions that changed (and every
partition of a topic that changed): it leads (opening or creating the log, with the topic's config
overrides and the state's leader epoch) each one whose state names this broker, stops leading the ones
that name another broker or none (the log stays on disk: the partition may come back), and deletes the
logs of topics that were deleted. Once the view is complete for the first time, logs of topics that are
no longer in ZooKeeper (deleted while this broker was down) are deleted too.
"""

from __future__ import annotations

import logging

from broker.admin_manager import stored_topic_log_config
from broker.log.log_config import LogConfig
from broker.log.partition_metadata import read_topic_id, write_topic_id
from broker.replica_manager import ReplicaManager
from broker.cluster.metadata_cache import CacheChanges, ClusterTopic, ZkMetadataCache

log = logging.getLogger(__name__)


class PartitionLeadership:
    """Reconciles the ReplicaManager's hosted partitions with the cached partition states."""

    def __init__(self, broker_id: int, cache: ZkMetadataCache, replica_manager: ReplicaManager,
                 default_log_config: LogConfig) -> None:
        self.broker_id = broker_id
        self._cache = cache
        self._replica_manager = replica_manager
        self._default_log_config = default_log_config
        self._swept = False

    def reconcile(self, changes: CacheChanges) -> None:
        """Apply what changed in the cached view; runs on the event loop after every batch of changes."""
        topics = self._cache.topics
        partitions = set(changes.partitions)
        deleted = []
        for name in changes.topics:
            topic = topics.get(name)
            if topic is None:
                deleted.append(name)
            else:
                partitions.update((name, index) for index in topic.replicas)
        configs: dict[str, LogConfig] = {}
        for name, index in sorted(partitions):
            topic = topics.get(name)
            if topic is not None:
                self._follow(topic, index, configs)
        if deleted:
            self._delete_logs(set(deleted), "the topic was deleted")
        if not self._swept and self._cache.loaded:
            self._swept = True
            self._delete_logs({t for t, _ in self._replica_manager.partitions_on_disk()} - set(topics),
                              "the topic was deleted while this broker was down")

    def _follow(self, topic: ClusterTopic, index: int, configs: dict[str, LogConfig]) -> None:
        """Lead the partition if its state names this broker, else stop leading it."""
        state = topic.states.get(index)
        partition = self._replica_manager.get_partition(topic.name, index)
        if state is None or state.leader != self.broker_id:
            if partition is not None:
                log.info("no longer leading %s-%d; its log stays", topic.name, index)
                self._replica_manager.stop_partition(topic.name, index, delete=False)
            return
        if partition is None:
            config = configs.get(topic.name)
            if config is None:
                config = stored_topic_log_config(self._default_log_config, topic.name, topic.configs)
                configs[topic.name] = config
            self._drop_other_incarnation(topic.name, index, topic.topic_id)
            log.info("leading %s-%d (leader epoch %d)", topic.name, index, state.leader_epoch)
            partition = self._replica_manager.make_leader(topic.name, index, config, state.leader_epoch)
            if topic.topic_id and read_topic_id(partition.log.dir) != topic.topic_id:
                write_topic_id(partition.log.dir, topic.topic_id)
        elif partition.leader_epoch != state.leader_epoch:
            partition.leader_epoch = state.leader_epoch

    def _delete_logs(self, topics: set[str], reason: str) -> None:
        if not topics:
            return
        for topic, index in self._replica_manager.partitions_on_disk():
            if topic in topics:
                log.info("deleting the log of %s-%d: %s", topic, index, reason)
                self._replica_manager.stop_partition(topic, index, delete=True)

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


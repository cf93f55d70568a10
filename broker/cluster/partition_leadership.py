"""PartitionLeadership: makes the partitions this broker hosts follow the states in ZooKeeper.

After every batch of changes to the cluster view it looks at the partitions that changed (every
partition of a topic that changed, every followed partition when the live brokers changed). For each
partition whose assignment names this broker:

- the state names this broker leader: it leads (opening or creating the log, with the topic's config
  overrides), with the state's leader epoch and ISR; a newer ISR for the same epoch is taken as is;
- the topic's config overrides changed (AlterConfigs): its hosted logs take the new settings at once;
- the state names another broker (or none): it follows, and the replica fetcher copies the leader's
  log (first truncating where the logs diverge);
- a state with a leader epoch or a controller epoch below the ones this broker acts on is stale and ignored
  (Kafka's LeaderAndIsr checks: a controller that lost its session cannot move a partition back; ZooKeeper
  already refuses its writes, this is the brokers' side of the fence).

A partition whose assignment no longer names this broker (a reassignment moved it away) stops and its
log is deleted; so are the logs of deleted topics, and once the view is complete for the first time,
logs of topics that are no longer in ZooKeeper (deleted while this broker was down).
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker.admin_manager import stored_topic_log_config
from broker.log.log_config import LogConfig
from broker.log.partition_metadata import read_topic_id, write_topic_id
from broker.metadata import NO_LEADER
from broker.replica_fetcher import PartitionFetchState, ReplicaFetcherManager
from broker.replica_manager import ReplicaManager
from broker.cluster.metadata_cache import CacheChanges, ClusterTopic, PartitionState, ZkMetadataCache

log = logging.getLogger(__name__)


class PartitionLeadership:
    """Reconciles the ReplicaManager's hosted partitions with the cached partition states."""

    def __init__(self, broker_id: int, cache: ZkMetadataCache, replica_manager: ReplicaManager,
                 default_log_config: LogConfig, fetchers: ReplicaFetcherManager) -> None:
        self.broker_id = broker_id
        self._cache = cache
        self._replica_manager = replica_manager
        self._fetchers = fetchers
        self._default_log_config = default_log_config
        self._swept = False

    def reconcile(self, changes: CacheChanges) -> None:
        """Apply what changed in the cached view; runs on the event loop after every batch of changes."""
        topics = self._cache.topics
        partitions = set(changes.partitions)
        deleted = []
        configs: dict[str, LogConfig] = {}
        for name in changes.topics:
            topic = topics.get(name)
            if topic is None:
                deleted.append(name)
            else:
                partitions.update((name, index) for index in topic.replicas)
                configs[name] = stored_topic_log_config(self._default_log_config, name, topic.configs)
                self._replica_manager.update_log_config(name, topic.replicas, configs[name])
        if changes.brokers:
            partitions.update((p.topic, p.index) for p in self._replica_manager.follower_partitions())
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
        """Lead, follow or drop the partition as its assignment and state say."""
        name = topic.name
        replicas = tuple(topic.replicas.get(index, ()))
        manager = self._replica_manager
        hosted = manager.get_partition(name, index) or manager.get_follower(name, index)
        if replicas and self.broker_id not in replicas:
            if hosted is not None or manager.log_dir(name, index) is not None:
                log.info("%s-%d is no longer assigned to this broker (replicas %s): deleting its replica", name,
                         index, list(replicas))
                self._fetchers.remove_partitions([(name, index)])
                manager.stop_partition(name, index, delete=True)
            return
        state = topic.states.get(index)
        if state is None:
            return
        if hosted is not None and (state.leader_epoch < hosted.leader_epoch
                                   or state.controller_epoch < hosted.controller_epoch):
            log.warning("ignoring a stale state of %s-%d: leader epoch %d, controller epoch %d (acting on %d, %d)",
                        name, index, state.leader_epoch, state.controller_epoch, hosted.leader_epoch,
                        hosted.controller_epoch)
            return
        config = configs.get(name)
        if config is None:
            config = configs[name] = stored_topic_log_config(self._default_log_config, name, topic.configs)
        if hosted is None:
            self._drop_other_incarnation(name, index, topic.topic_id)
        if state.leader == self.broker_id:
            self._lead(topic, index, state, replicas, config)
        else:
            self._follow_leader(topic, index, state, replicas, config)

    def _lead(self, topic: ClusterTopic, index: int, state: PartitionState, replicas: tuple[int, ...], config: LogConfig) -> None:
        manager = self._replica_manager
        partition = manager.get_partition(topic.name, index)
        if partition is not None and partition.leader_epoch == state.leader_epoch:
            partition.controller_epoch = state.controller_epoch
            if partition.replicas != replicas:
                partition.update_replicas(replicas)
            if state.zk_version > partition.zk_version:
                partition.update_isr(state.isr, state.zk_version)
            return
        self._fetchers.remove_partitions([(topic.name, index)])
        log.info("leading %s-%d (leader epoch %d, isr %s)", topic.name, index, state.leader_epoch, list(state.isr))
        partition = manager.make_leader(topic.name, index, config, state.leader_epoch, replicas, state.isr,
                                        state.zk_version, state.controller_epoch)
        self._record_topic_id(partition.log.dir, topic.topic_id)

    def _follow_leader(self, topic: ClusterTopic, index: int, state: PartitionState, replicas: tuple[int, ...],
                       config: LogConfig) -> None:
        manager = self._replica_manager
        key = (topic.name, index)
        endpoint = self._cache.brokers.get(state.leader) if state.leader != NO_LEADER else None
        partition = manager.get_follower(topic.name, index)
        if partition is not None and partition.leader_epoch == state.leader_epoch and \
                partition.leader_id == state.leader and self._fetchers.fetching_from(key) == endpoint:
            partition.update_replicas(replicas)
            partition.controller_epoch = state.controller_epoch
            return
        if manager.get_partition(topic.name, index) is not None:
            log.info("no longer leading %s-%d: following broker %d (leader epoch %d)", topic.name, index,
                     state.leader, state.leader_epoch)
        partition = manager.make_follower(topic.name, index, config, state.leader, state.leader_epoch, replicas)
        partition.controller_epoch = state.controller_epoch
        self._record_topic_id(partition.log.dir, topic.topic_id)
        if endpoint is None:
            self._fetchers.remove_partitions([key])
        else:
            self._fetchers.add_partitions(endpoint, [PartitionFetchState(key, partition.log, state.leader_epoch)])

    @staticmethod
    def _record_topic_id(directory: Path, topic_id: str | None) -> None:
        if topic_id and read_topic_id(directory) != topic_id:
            write_topic_id(directory, topic_id)

    def _delete_logs(self, topics: set[str], reason: str) -> None:
        if not topics:
            return
        for topic, index in self._replica_manager.partitions_on_disk():
            if topic in topics:
                log.info("deleting the log of %s-%d: %s", topic, index, reason)
                self._fetchers.remove_partitions([(topic, index)])
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
            self._fetchers.remove_partitions([(topic, index)])
            self._replica_manager.stop_partition(topic, index, delete=True)


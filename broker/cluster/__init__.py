"""Cluster mode: what a broker adds when ``zookeeper.connect`` is set.

ClusterMembership (membership.py) starts and stops the rest on the broker's ZooKeeper session:
BrokerRegistry and ZkProducerIdManager (its /brokers/ids registration and producer-id blocks),
ZkMetadataCache (the cluster view fed by watches, a MetadataView), PartitionLeadership (hosted partitions
follow that view), KafkaController (elected through ZooKeeper) and ZkAdminManager (topic creation and
deletion through the controller, a TopicAdmin). The request handlers are the standalone KafkaApis fed
with these. Every ZooKeeper call goes through BoundedZk (pipeline/zk/client.py) and ends within a deadline.
Everything here sits above the standalone layers (KafkaApis, ReplicaManager, LogManager) and calls only
downward.
"""

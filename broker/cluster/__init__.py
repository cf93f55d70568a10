"""Cluster mode: what a broker adds when ``zookeeper.connect`` is set.

ClusterMembership (membership.py) starts and stops the rest on the broker's ZooKeeper session:
BrokerRegistry (its /brokers/ids registration and producer-id blocks), ZkMetadataCache (the cluster view
fed by watches), PartitionLeadership (hosted partitions follow that view), KafkaController (elected
through ZooKeeper), ZkAdminManager (topic creation and deletion through the controller) and
ClusterKafkaApis (the request handlers that differ from the standalone ones). Everything here sits above
the standalone layers (KafkaApis, ReplicaManager, LogManager) and calls only downward.
"""

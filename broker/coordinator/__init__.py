"""The group coordinator: broker-side consumer groups (Kafka 0.9's protocol) with offsets in ZooKeeper or the log dir."""

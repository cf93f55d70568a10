"""The broker: a partitioned, segmented append-only log served over the Kafka wire protocol."""

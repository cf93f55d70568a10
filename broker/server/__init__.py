"""The network layer: accepts connections and moves Kafka frames between sockets and request handlers."""

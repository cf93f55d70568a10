"""What every pipeline component shares: the Kafka wire protocol, the clients and the command line."""

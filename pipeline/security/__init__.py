"""Kafka's security model shared by the broker, the clients and the command line: principals, the client's
security settings (``security.protocol``, ``ssl.*``, ``sasl.*``) and the pieces both ends of a connection use."""

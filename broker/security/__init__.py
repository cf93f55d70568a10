"""The broker's side of Kafka's security model: SASL credentials and the authorizer with its ACLs."""

"""The schema registry service: a REST API compatible with Confluent's Schema Registry, for Avro schemas.

`store` holds the registry's rules (ids allocated once, versions per subject, soft and hard deletes,
compatibility levels, mode) over a small key-value `backends` interface with two implementations:
ZooKeeper (state shared by several instances) and a local directory (standalone). `service` serves the
HTTP API on aiohttp; `python -m schemas.registry` runs it.
"""

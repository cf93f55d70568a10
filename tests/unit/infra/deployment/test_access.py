"""The deployment's least-privilege ACLs per cluster, in Kafka's ZooKeeper form."""

from __future__ import annotations

import json

from infra.deployment.access import CLUSTER_RESOURCE, Acl, _acl_document, acls_for
from infra.deployment.topology import load
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS


def allowed(rules: list[Acl], user: str) -> set[tuple[str, str, str]]:
    return {(rule.kind, rule.name, rule.operation) for rule in rules if rule.principal == f"User:{user}"}


def test_each_service_gets_what_it_needs_where_it_needs_it() -> None:
    topology = load()
    dc1, offline = topology.cluster("dc1"), topology.offline
    datacenter, warehouse = acls_for(topology, dc1), acls_for(topology, offline)
    topic = sorted(EVENT_TOPICS)[0]
    emulators = allowed(datacenter, "emulators")
    assert {("Topic", topic, "Write"), ("Topic", AUDIT_TOPIC, "Write"), ("Cluster", CLUSTER_RESOURCE,
                                                                          "IdempotentWrite")} <= emulators
    assert not any(operation == "Read" for _, _, operation in emulators)
    assert allowed(warehouse, "emulators") == set()
    assert ("Topic", topic, "Read") in allowed(datacenter, "mirror")
    assert not any(operation == "Write" for _, _, operation in allowed(datacenter, "mirror"))
    assert {("Topic", topic, "Create"), ("Topic", topic, "Write")} <= allowed(warehouse, "mirror")
    assert ("Topic", topic, "Read") in allowed(warehouse, "etl") and allowed(datacenter, "etl") == set()
    assert ("Topic", "*", "Read") in allowed(datacenter, "audit") and ("Topic", "*", "Read") in allowed(warehouse,
                                                                                                        "audit")
    assert allowed(datacenter, "admin") == set() == allowed(datacenter, "broker")  # super users


def test_a_resource_s_acls_are_kafka_s_json() -> None:
    document = json.loads(_acl_document([Acl("Topic", "t", "User:etl", "Read")]))
    assert document == {"version": 1, "acls": [{"principal": "User:etl", "permissionType": "Allow",
                                                "operation": "Read", "host": "*"}]}


def test_the_exactly_once_mirror_may_write_its_transactional_ids_and_read_its_offset_groups_in_the_offline_cluster_only(
) -> None:
    topology = load()
    datacenter, warehouse = acls_for(topology, topology.cluster("dc1")), acls_for(topology, topology.offline)
    prefixed = {(rule.kind, rule.name, rule.operation) for rule in warehouse
                if rule.principal == "User:mirror" and rule.prefixed}
    assert prefixed == {("TransactionalId", "mirror.", "Write"), ("TransactionalId", "mirror.", "Describe"),
                        ("Group", "mirror.", "Read")}
    # The transactional ids and target groups the deployment's mirror uses are under those prefixes.
    assert topology.mirror.exactly_once
    assert not any(rule.kind == "TransactionalId" or rule.prefixed for rule in datacenter)
    assert not any(rule.kind == "TransactionalId" and rule.principal != "User:mirror" for rule in warehouse)
    # TxnOffsetCommit wants READ on the topics whose offsets it commits (the source topics' names, in the target).
    assert {("Topic", topic, "Read") for topic in EVENT_TOPICS} <= allowed(warehouse, "mirror")

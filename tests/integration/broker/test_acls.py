"""The authorizer end to end on PLAINTEXT (every client is User:ANONYMOUS there): ACLs stored in the log dir or
in ZooKeeper, prefixed ACLs, deny over allow, Metadata hiding what may not be described, consumer groups needing
READ on the group, super users, the `acls` CLI, and a change made through one broker of a ZooKeeper cluster
reaching the others."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

from pipeline.client.admin import AdminClient
from pipeline.client.connection import BrokerConnection
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.security.acl import (ANY_BINDING, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
                                   ResourcePatternFilter, ResourceType)
from tests.support import wait_until
from tests.support.acls import ANONYMOUS, AUTHORIZER, acl, administrator, seed_log_dir, seed_zookeeper

READ, WRITE, DESCRIBE, ALL = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


@pytest.fixture
def secured(broker_factory):
    """A standalone broker with the authorizer on, where User:ANONYMOUS may only manage topics and ACLs."""
    broker = broker_factory(AUTHORIZER, start=False)
    seed_log_dir(broker.log_dir, administrator())
    broker.start()
    return broker


def produce(bootstrap: str, topic: str, value: bytes = b"v") -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0, max_block_ms=10000)
    try:
        producer.send(topic, value).get(timeout=15)
    finally:
        producer.close(timeout=5)


def test_prefixed_acl_grants_a_family_of_topics(secured):
    with AdminClient(secured.bootstrap) as admin:
        admin.create_topics(["payments-eu", "payments-us", "orders"], 1, 1)
        admin.create_acls(acl(TOPIC, "payments-", WRITE, pattern=PatternType.PREFIXED))
    produce(secured.bootstrap, "payments-eu")
    produce(secured.bootstrap, "payments-us")
    with pytest.raises(TopicAuthorizationFailedError):
        produce(secured.bootstrap, "orders")


def test_deny_wins_over_allow(secured):
    with AdminClient(secured.bootstrap) as admin:
        admin.create_topics(["public", "secret"], 1, 1)
        admin.create_acls(acl(TOPIC, "*", ALL) + acl(TOPIC, "secret", WRITE, deny=True))
    produce(secured.bootstrap, "public")
    with pytest.raises(TopicAuthorizationFailedError):
        produce(secured.bootstrap, "secret")


def test_metadata_hides_what_the_principal_may_not_describe(secured):
    with AdminClient(secured.bootstrap) as admin:
        admin.create_topics(["visible", "hidden"], 1, 1)
        admin.create_acls(acl(TOPIC, "visible", DESCRIBE))
        assert admin.list_topics() == ["visible"]
        with pytest.raises(KafkaProtocolError) as refused:
            admin.describe_topics(["hidden"])
        assert refused.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        # An unknown topic is answered the same way: no ACL says whether it exists.
        with pytest.raises(KafkaProtocolError) as unknown:
            admin.describe_topics(["never-created"])
        assert unknown.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_consumer_groups_need_read_on_the_group(secured):
    with AdminClient(secured.bootstrap) as admin:
        admin.create_topics("events", 1, 1)
        admin.create_acls(acl(TOPIC, "events", READ, WRITE) + acl(GROUP, "allowed", READ))
    produce(secured.bootstrap, "events", b"hello")

    denied = KafkaConsumer("events", bootstrap_servers=secured.bootstrap, group_id="denied",
                           auto_offset_reset="earliest")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(20):
                denied.poll(timeout_ms=500)
    finally:
        denied.close()

    allowed = KafkaConsumer("events", bootstrap_servers=secured.bootstrap, group_id="allowed",
                            auto_offset_reset="earliest", consumer_timeout_ms=15000)
    try:
        assert next(iter(allowed)).value == b"hello"
        allowed.commit()
    finally:
        allowed.close()


def test_super_users_pass_without_any_acl(broker_factory):
    broker = broker_factory({**AUTHORIZER, "super.users": f"User:admin;{ANONYMOUS}"})
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topics("anything", 1, 1)
        assert admin.describe_acls(ANY_BINDING) == []
    produce(broker.bootstrap, "anything")


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker):
    with AdminClient(broker.bootstrap) as admin:
        with pytest.raises(KafkaProtocolError) as disabled:
            admin.describe_acls(ANY_BINDING)
    assert disabled.value.code == ErrorCode.SECURITY_DISABLED


def test_acl_apis_need_the_cluster_permissions(broker_factory):
    broker = broker_factory({**AUTHORIZER, "allow.everyone.if.no.acl.found": "false"})
    with AdminClient(broker.bootstrap) as admin:
        with pytest.raises(KafkaProtocolError) as describe:
            admin.describe_acls(ANY_BINDING)
        with pytest.raises(KafkaProtocolError) as create:
            admin.create_acls(acl(TOPIC, "t", READ))
    assert describe.value.code == create.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def acls_cli(broker, *args: str, check: bool = True) -> str:
    completed = subprocess.run([sys.executable, "-m", "pipeline", "acls", "--bootstrap-server", broker.bootstrap,
                                *args], capture_output=True, text=True, timeout=60, check=False)
    if check:
        assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_cli_adds_lists_and_removes(secured, tmp_path):
    resource = "`ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`"
    alice_write = "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)"
    added = acls_cli(secured, "--add", "--allow-principal", "User:alice", "--operation", "Write",
                     "--operation", "Read", "--topic", "t")
    assert f"Adding ACLs for resource {resource}: \n \t{alice_write} \n" in added
    assert f"Current ACLs for resource {resource}:" in added
    acls_cli(secured, "--add", "--allow-principal", "User:etl", "--consumer", "--topic", "offline-",
             "--resource-pattern-type", "prefixed", "--group", "etl")
    listing = acls_cli(secured, "--list", "--topic", "t")
    assert alice_write in listing and "operation=READ" in listing and "User:etl" not in listing
    everything = acls_cli(secured, "--list")
    assert "name=offline-, patternType=PREFIXED" in everything
    assert "(principal=User:etl, host=*, operation=READ, permissionType=ALLOW)" in everything
    assert "resourceType=GROUP, name=etl" in everything
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=PLAINTEXT\nclient.id=ignored\n")
    matched = acls_cli(secured, "--command-config", str(properties), "--list", "--topic", "offline-events",
                       "--resource-pattern-type", "match")
    assert "name=offline-, patternType=PREFIXED" in matched
    removed = acls_cli(secured, "--remove", "--force", "--topic", "t")
    assert f"Removed ACLs for resource {resource}:" in removed
    assert acls_cli(secured, "--list", "--topic", "t").strip() == ""
    assert "User:etl" in acls_cli(secured, "--list")


def describe_on(host: str, port: int, selector: AclBindingFilter) -> set:
    """(name, principal, operation) of the ACLs ``selector`` matches, asked of this one broker."""
    connection = BrokerConnection(host, port)
    try:
        response = connection.request(ApiKey.DESCRIBE_ACLS, {
            "resource_type_filter": int(selector.pattern.resource_type), "resource_name_filter": selector.pattern.name,
            "pattern_type_filter": int(selector.pattern.pattern_type), "principal_filter": None, "host_filter": None,
            "operation": int(AclOperation.ANY), "permission_type": int(AclPermissionType.ANY)})
    finally:
        connection.close()
    assert response["error_code"] == ErrorCode.NONE
    return {(r["resource_name"], a["principal"], a["operation"]) for r in response["resources"] for a in r["acls"]}


def test_acls_in_zookeeper_reach_every_broker(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, 3, overrides=AUTHORIZER, start=False)
    seed_zookeeper(cluster.zk, administrator())
    cluster.start()
    first, second, third = cluster.brokers.values()
    selector = AclBindingFilter(ResourcePatternFilter(TOPIC, "shared", PatternType.LITERAL))
    with AdminClient(first.bootstrap) as admin:
        admin.create_acls(acl(TOPIC, "shared", WRITE, principal="User:alice"))
    wanted = {("shared", "User:alice", int(WRITE))}
    for broker in (first, second, third):
        wait_until(lambda b=broker: describe_on(b.host, b.port, selector) == wanted, timeout=10,
                   message=f"broker {broker.bootstrap} did not see the new ACL")
    data, _ = cluster.zk.get("/kafka-acl/Topic/shared")
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Write",'
                    b'"host":"*"}]}')
    changes = [cluster.zk.get(f"/kafka-acl-changes/{c}")[0] for c in cluster.zk.get_children("/kafka-acl-changes")]
    assert b"Topic:shared" in changes

    # Written by another tool straight into ZooKeeper (acl_zk.add_acls, with its notification): every broker reloads it.
    seed_zookeeper(cluster.zk, acl(TOPIC, "pay-", READ, principal="User:bob", pattern=PatternType.PREFIXED))
    notifications = cluster.zk.get_children("/kafka-acl-extended-changes")
    assert [cluster.zk.get(f"/kafka-acl-extended-changes/{n}")[0] for n in notifications] == [
        b'{"version":1,"resourceType":"Topic","name":"pay-","patternType":"Prefixed"}']
    prefixed = AclBindingFilter(ResourcePatternFilter(TOPIC, "pay-", PatternType.PREFIXED))
    for broker in (first, second, third):
        wait_until(lambda b=broker: describe_on(b.host, b.port, prefixed) == {("pay-", "User:bob", int(READ))},
                   timeout=10, message=f"broker {broker.bootstrap} did not reload the prefixed ACL")

    with AdminClient(second.bootstrap) as admin:
        assert len(admin.delete_acls([selector])) == 1
    for broker in (first, second, third):
        wait_until(lambda b=broker: describe_on(b.host, b.port, selector) == set(), timeout=10,
                   message=f"broker {broker.bootstrap} still has the deleted ACL")
    assert not cluster.zk.exists("/kafka-acl/Topic/shared")


@pytest.mark.parametrize("cluster_action", [True, False], ids=["with-cluster-action", "without"])
def test_followers_need_cluster_action_to_replicate(zk_connect, broker_cluster_factory, cluster_action):
    """On PLAINTEXT the brokers fetch as User:ANONYMOUS too: with CLUSTER_ACTION on the cluster every follower
    joins the ISR; without it, their fetches are refused and the ISR shrinks to the leader alone."""
    settings = {**AUTHORIZER, "replica.fetch.backoff.ms": 200, "replica.lag.time.max.ms": 3000}
    cluster = broker_cluster_factory(zk_connect, 3, overrides=settings, start=False)
    extra = acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CLUSTER_ACTION) if cluster_action else []
    seed_zookeeper(cluster.zk, administrator() + extra + acl(TOPIC, "replicated", WRITE))
    cluster.start()
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics("replicated", 1, 3)
    if cluster_action:
        produce(cluster.bootstrap, "replicated")
        wait_until(lambda: len(cluster.partition_state("replicated", 0)["isr"]) == 3, timeout=20,
                   message="the followers did not join the ISR")
    else:
        # The followers start in the ISR (as assigned) and leave it once replica.lag.time.max.ms passes.
        wait_until(lambda: len(cluster.partition_state("replicated", 0)["isr"]) == 1, timeout=30,
                   message="refused followers stayed in the ISR")
        leader = cluster.partition_state("replicated", 0)["leader"]
        assert "denied FETCH: CLUSTER_ACTION on CLUSTER" in cluster.brokers[leader].log_path.read_text()


def test_metadata_reports_the_authorized_operations_asked_for(secured):
    with AdminClient(secured.bootstrap) as admin:
        admin.create_topics("ops", 1, 1)
        admin.create_acls(acl(TOPIC, "ops", READ))
    connection = BrokerConnection(secured.host, secured.port)
    try:
        asked = connection.request(ApiKey.METADATA, {"topics": [{"name": "ops"}], "allow_auto_topic_creation": False,
                                                     "include_cluster_authorized_operations": True,
                                                     "include_topic_authorized_operations": True})
        plain = connection.request(ApiKey.METADATA, {"topics": [{"name": "ops"}], "allow_auto_topic_creation": False})
    finally:
        connection.close()
    assert asked["topics"][0]["topic_authorized_operations"] == (1 << READ) | (1 << DESCRIBE)
    assert asked["cluster_authorized_operations"] == sum(1 << op for op in (
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE))
    assert plain["topics"][0]["topic_authorized_operations"] == -(2**31)

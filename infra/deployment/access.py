"""Who may do what in each cluster of the secured deployment: SCRAM users and least-privilege ACLs, written to the
cluster's ZooKeeper chroot in Kafka's own formats before its brokers start.

Written to ZooKeeper rather than through the brokers' admin APIs because the brokers cannot start without them: the
inter-broker user must exist before the first broker authenticates to another, and with
``allow.everyone.if.no.acl.found=false`` a service started before its ACLs would be refused (Kafka's own
procedure for a new secured cluster is the same: ``kafka-configs --zookeeper`` for the broker's SCRAM user first).
The brokers watch the change notifications, so writing again while they run takes effect too. Credentials are
written once per password (an existing one that still matches the password is left alone); each resource's ACL
list is replaced by the deployment's.

The ACLs (``broker`` and ``admin`` are super users and need none):

- datacenters: ``emulators`` WRITE and DESCRIBE on the event topics and AuditCount, IDEMPOTENT_WRITE on the cluster
  (their producers are idempotent); ``mirror`` READ and DESCRIBE (DESCRIBE_CONFIGS: it copies their settings) on the
  event topics, READ on its group; ``audit`` READ and DESCRIBE on every topic, DESCRIBE on every group (lag).
- offline: ``mirror`` CREATE, WRITE, DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS on the event topics (it creates
  and configures their copies), WRITE and DESCRIBE on AuditCount, IDEMPOTENT_WRITE on the cluster, and for its
  exactly-once mode WRITE and DESCRIBE on the transactional ids prefixed ``mirror.`` (its own, and those of other
  mirror processes it fences), READ on the groups prefixed ``mirror.`` (its source offsets, one group per source)
  and READ on the event topics (TxnOffsetCommit wants it on the topics whose offsets it commits, as Kafka's does); ``etl`` READ and
  DESCRIBE on the event topics, WRITE and DESCRIBE on AuditCount, IDEMPOTENT_WRITE, READ on its group; ``audit`` as
  in a datacenter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from infra.deployment.secrets import KAFKA_USERS, Secrets
from infra.deployment.secured import MECHANISM
from infra.deployment.topology import ClusterSpec, Topology
from pipeline.security import acl_zk
from pipeline.security.acl import (AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                   ResourceType)
from pipeline.security.scram import new_credential, password_matches
from pipeline.security.scram_users import parse_user_config, user_config_json
from pipeline.zk import layout
from pipeline.zk.client import BoundedZk, connect
from pipeline.zk.security import ZooKeeperSecurity
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS

__all__ = ["Acl", "acls_for", "provision"]

CLUSTER_RESOURCE = "kafka-cluster"
WILDCARD = "*"
TIMEOUT_S = 15.0


@dataclass(frozen=True, order=True)
class Acl:
    """One allow rule: ``principal`` may do ``operation`` on the resource (``kind`` Topic, Group or Cluster, its
    ``name``, ``prefixed`` or literal) from any host."""

    kind: str
    name: str
    principal: str
    operation: str
    prefixed: bool = False


def _topic_rules(user: str, topics: Iterable[str], *operations: str) -> list[Acl]:
    return [Acl("Topic", topic, f"User:{user}", operation) for topic in topics for operation in operations]


def acls_for(topology: Topology, cluster: ClusterSpec, mirror_group: str = "mirror", etl_group: str = "etl") -> list[Acl]:
    """The deployment's ACLs in ``cluster`` (a datacenter or the offline cluster)."""
    events = sorted(EVENT_TOPICS)
    rules = [*_topic_rules("audit", [WILDCARD], "Read", "Describe"), Acl("Group", WILDCARD, "User:audit", "Describe")]
    if cluster in topology.datacenters:
        rules += _topic_rules("emulators", [*events, AUDIT_TOPIC], "Write", "Describe")
        rules.append(Acl("Cluster", CLUSTER_RESOURCE, "User:emulators", "IdempotentWrite"))
        rules += _topic_rules("mirror", events, "Read", "Describe", "DescribeConfigs")
        rules.append(Acl("Group", mirror_group, "User:mirror", "Read"))
    else:
        rules += _topic_rules("mirror", events, "Create", "Write", "Describe", "DescribeConfigs", "AlterConfigs",
                              "Read")
        rules += _topic_rules("mirror", [AUDIT_TOPIC], "Write", "Describe")
        rules += _topic_rules("etl", events, "Read", "Describe")
        rules += _topic_rules("etl", [AUDIT_TOPIC], "Write", "Describe")
        rules += [Acl("Cluster", CLUSTER_RESOURCE, f"User:{user}", "IdempotentWrite") for user in ("mirror", "etl")]
        rules += [Acl("TransactionalId", f"{mirror_group}.", "User:mirror", operation, prefixed=True)
                  for operation in ("Write", "Describe")]
        rules.append(Acl("Group", f"{mirror_group}.", "User:mirror", "Read", prefixed=True))
        rules.append(Acl("Group", etl_group, "User:etl", "Read"))
    return sorted(rules)


def _pattern(rule: Acl) -> ResourcePattern:
    return ResourcePattern(ResourceType.parse(rule.kind), rule.name,
                           PatternType.PREFIXED if rule.prefixed else PatternType.LITERAL)


def _acl_document(rules: list[Acl]) -> bytes:
    """A resource's ACL znode holding ``rules`` (acl_zk's form, the brokers')."""
    return acl_zk.entries_json(AccessControlEntry(rule.principal, WILDCARD, AclOperation.parse(rule.operation),
                                                  AclPermissionType.ALLOW) for rule in rules)


def _write_acls(zk: BoundedZk, rules: list[Acl]) -> int:
    """Replace each resource's ACL list by ``rules``'s; the number of resources changed (each notified)."""
    resources: dict[ResourcePattern, list[Acl]] = {}
    for rule in rules:
        resources.setdefault(_pattern(rule), []).append(rule)
    changed = 0
    for pattern, found in sorted(resources.items(), key=lambda item: acl_zk.resource_path(item[0])):
        path = acl_zk.resource_path(pattern)
        document = _acl_document(found)
        try:
            current, _ = zk.sync("get", path)
        except NoNodeError:
            current = None
        if current is not None and acl_zk.parse_entries(current) == acl_zk.parse_entries(document):
            continue
        if current is None:
            zk.sync("create", path, document, makepath=True)
        else:
            zk.sync("set", path, document)
        zk.sync("create", f"{acl_zk.change_root(pattern.pattern_type)}/{acl_zk.CHANGE_PREFIX}",
                acl_zk.change_json(pattern), sequence=True, makepath=True)
        changed += 1
    return changed


def _write_credential(zk: BoundedZk, user: str, password: str) -> bool:
    """``/config/users/<user>`` holding a SCRAM credential of ``password`` (kept when it already matches); whether
    it was written (then notified)."""
    path = layout.user_config_path(user)
    try:
        current, _ = zk.sync("get", path)
    except NoNodeError:
        current = None
    stored = parse_user_config(current).get(MECHANISM)
    if stored is not None and password_matches(MECHANISM, stored, password):
        return False
    document = user_config_json({MECHANISM: new_credential(MECHANISM, password)})
    if current is None:
        zk.sync("create", path, document, makepath=True)
    else:
        zk.sync("set", path, document)
    zk.sync("create", f"{layout.CONFIG_CHANGES}/{layout.CONFIG_CHANGE_PREFIX}", layout.user_config_change(user),
            sequence=True, makepath=True)
    return True


def provision(topology: Topology, cluster: ClusterSpec, secrets: Secrets) -> tuple[int, int]:
    """Write the SCRAM users and the ACLs of ``cluster`` to its chroot; (users written, resources changed)."""
    security = ZooKeeperSecurity.from_values({"zookeeper.set.acl": True,
                                              "zookeeper.digest.file": str(secrets.zookeeper_digest_file)})
    client: KazooClient = connect(topology.cluster_zookeeper(cluster), timeout_s=TIMEOUT_S, security=security)
    try:
        zk = BoundedZk(client, TIMEOUT_S)
        passwords = secrets.passwords()
        users = sum(_write_credential(zk, user, passwords[user]) for user in KAFKA_USERS)
        return users, _write_acls(zk, acls_for(topology, cluster))
    finally:
        client.stop()
        client.close()

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
  and configures their copies), WRITE and DESCRIBE on AuditCount, IDEMPOTENT_WRITE on the cluster; ``etl`` READ and
  DESCRIBE on the event topics, WRITE and DESCRIBE on AuditCount, IDEMPOTENT_WRITE, READ on its group; ``audit`` as
  in a datacenter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from infra.deployment.secrets import KAFKA_USERS, Secrets
from infra.deployment.secured import MECHANISM
from infra.deployment.topology import ClusterSpec, Topology
from pipeline.security.scram import ScramCredential, new_credential, password_matches
from pipeline.zk.client import BoundedZk, connect
from pipeline.zk.security import ZooKeeperSecurity
from schemas.events import AUDIT_TOPIC, EVENT_TOPICS

__all__ = ["Acl", "acls_for", "provision"]

CLUSTER_RESOURCE = "kafka-cluster"
WILDCARD = "*"
USERS_PATH = "/config/users"
CONFIG_CHANGES = "/config/changes/config_change_"
LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes/acl_changes_"
EXTENDED_CHANGES = "/kafka-acl-extended-changes/acl_changes_"
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
        rules += _topic_rules("mirror", events, "Create", "Write", "Describe", "DescribeConfigs", "AlterConfigs")
        rules += _topic_rules("mirror", [AUDIT_TOPIC], "Write", "Describe")
        rules += _topic_rules("etl", events, "Read", "Describe")
        rules += _topic_rules("etl", [AUDIT_TOPIC], "Write", "Describe")
        rules += [Acl("Cluster", CLUSTER_RESOURCE, f"User:{user}", "IdempotentWrite") for user in ("mirror", "etl")]
        rules.append(Acl("Group", etl_group, "User:etl", "Read"))
    return sorted(rules)


def _acl_document(rules: list[Acl]) -> bytes:
    entries = [{"principal": rule.principal, "permissionType": "Allow", "operation": rule.operation, "host": "*"}
               for rule in rules]
    return json.dumps({"version": 1, "acls": entries}, sort_keys=True).encode()


def _write_acls(zk: BoundedZk, rules: list[Acl]) -> int:
    """Replace each resource's ACL list by ``rules``'s; the number of resources changed (each notified)."""
    resources: dict[tuple[str, str, bool], list[Acl]] = {}
    for rule in rules:
        resources.setdefault((rule.kind, rule.name, rule.prefixed), []).append(rule)
    changed = 0
    for (kind, name, prefixed), found in sorted(resources.items()):
        path = f"{PREFIXED_ROOT if prefixed else LITERAL_ROOT}/{kind}/{name}"
        document = _acl_document(found)
        try:
            current, _ = zk.sync("get", path)
        except NoNodeError:
            current = None
        if current is not None and json.loads(current) == json.loads(document):
            continue
        if current is None:
            zk.sync("create", path, document, makepath=True)
        else:
            zk.sync("set", path, document)
        if prefixed:
            notice = json.dumps({"version": 1, "resourceType": kind, "name": name, "patternType": "Prefixed"})
            zk.sync("create", EXTENDED_CHANGES, notice.encode(), sequence=True, makepath=True)
        else:
            zk.sync("create", LITERAL_CHANGES, f"{kind}:{name}".encode(), sequence=True, makepath=True)
        changed += 1
    return changed


def _write_credential(zk: BoundedZk, user: str, password: str) -> bool:
    """``/config/users/<user>`` holding a SCRAM credential of ``password`` (kept when it already matches); whether
    it was written (then notified)."""
    path = f"{USERS_PATH}/{user}"
    try:
        current, _ = zk.sync("get", path)
    except NoNodeError:
        current = None
    if current is not None:
        stored = json.loads(current).get("config", {}).get(MECHANISM)
        if stored and password_matches(MECHANISM, ScramCredential.from_string(stored), password):
            return False
    document = json.dumps({"version": 1, "config": {MECHANISM: new_credential(MECHANISM, password).to_string()}})
    if current is None:
        zk.sync("create", path, document.encode(), makepath=True)
    else:
        zk.sync("set", path, document.encode())
    notice = json.dumps({"version": 2, "entity_path": f"users/{user}"})
    zk.sync("create", CONFIG_CHANGES, notice.encode(), sequence=True, makepath=True)
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

"""ZkAclStore on a real ZooKeeper: Kafka's znodes, changes by others reported through their notifications, and
everything read again on a new session (notifications may be gone by then)."""

from __future__ import annotations

import threading

from broker.security.zk_acl_store import ZkAclStore
from pipeline.security import acl_zk
from pipeline.security.acl import (AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                   ResourceType)
from pipeline.zk.client import BoundedZk, connect
from tests.support import wait_until
from tests.support.acls import acl, seed_zookeeper
from tests.support.zookeeper import expire_session

TOPIC = ResourcePattern(ResourceType.TOPIC, "t")
PREFIX = ResourcePattern(ResourceType.TOPIC, "p-", PatternType.PREFIXED)
READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
WRITE = AccessControlEntry("User:bob", "*", AclOperation.WRITE, AclPermissionType.ALLOW)


def test_changes_by_others_and_a_new_session_reach_the_store(zk_connect):
    broker_zk, other = connect(zk_connect), connect(zk_connect)
    store = ZkAclStore(BoundedZk(broker_zk, 10))
    seen: dict[ResourcePattern, frozenset] = {}
    lock = threading.Lock()

    def on_change(pattern, entries):
        with lock:
            seen[pattern] = entries
    try:
        seed_zookeeper(other, acl(ResourceType.TOPIC, "t", AclOperation.READ, principal="User:alice"))
        store.start(on_change)
        assert store.load() == {TOPIC: {READ}}

        assert store.alter(PREFIX, lambda current: current | {WRITE}) == {WRITE}
        assert other.get(acl_zk.resource_path(PREFIX))[0] == acl_zk.entries_json([WRITE])

        seed_zookeeper(other, acl(ResourceType.TOPIC, "t", AclOperation.WRITE, principal="User:bob"))
        wait_until(lambda: seen.get(TOPIC) == {READ, WRITE}, message="the notified change was not reported")

        # Changed without a notification (as if it had been purged while this broker was away): a new session reads it.
        other.delete(acl_zk.resource_path(TOPIC))
        other.set(acl_zk.resource_path(PREFIX), acl_zk.entries_json([WRITE, READ]))
        expire_session(broker_zk)
        wait_until(lambda: seen.get(TOPIC) == frozenset() and seen.get(PREFIX) == {WRITE, READ}, timeout=20,
                   message="the ACLs were not read again on the new session")
    finally:
        store.close()
        for client in (broker_zk, other):
            client.stop()
            client.close()

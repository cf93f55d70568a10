"""ZkAclStore: ACLs in ZooKeeper under Kafka's paths (pipeline.security.acl_zk), shared by a cluster's brokers.

A change is a conditional write of the resource's znode (retried when another writer got there first)
followed by a sequential change notification; every broker watches the two notification parents and
re-reads the resources named by notifications it has not seen, so a change reaches all brokers within
ZooKeeper's watch latency. Notifications older than a quarter of an hour are removed by the writers, as
Kafka's do; a broker whose session expired reads every ACL again on its new session (what it missed may have
been removed). Calls block on ZooKeeper (bounded by the session timeout); watches run on kazoo's threads.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError, NodeExistsError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from pipeline.error_text import describe_error
from pipeline.security.acl import PatternType, ResourcePattern
from pipeline.security.acl_zk import (CHANGE_PREFIX, EXTENDED_CHANGES, LITERAL_CHANGES, STORED_TYPES, change_json,
                                      change_root, entries_json, parse_change, parse_entries, resource_path,
                                      type_root)
from pipeline.zk.client import BoundedZk
from broker.security.acl_store import ChangeListener, Entries, EntriesChange

log = logging.getLogger(__name__)

#: How old a change notification may get before a writer deletes it (Kafka: 15 minutes).
NOTIFICATION_TTL_S = 15 * 60


class ZkAclStore:
    """The ACLs of the cluster whose chroot ``zk`` is connected to."""

    def __init__(self, zk: BoundedZk) -> None:
        self._zk = zk
        self._on_change: ChangeListener | None = None
        self._seen: dict[str, set[str]] = {LITERAL_CHANGES: set(), EXTENDED_CHANGES: set()}
        self._lock = threading.Lock()
        self._known: set[ResourcePattern] = set()  # the patterns reported to on_change (or loaded)
        self._session_lost = False

    def load(self) -> dict[ResourcePattern, Entries]:
        zk = self._zk
        acls: dict[ResourcePattern, Entries] = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for resource_type in STORED_TYPES:
                root = type_root(resource_type, pattern_type)
                try:
                    names = zk.sync("get_children", root)
                except NoNodeError:
                    continue
                patterns = [ResourcePattern(resource_type, name, pattern_type) for name in names]
                results = zk.all(zk.client.get_async(resource_path(p)) for p in patterns)
                for pattern, result in zip(patterns, results):
                    if isinstance(result, NoNodeError):
                        continue
                    if isinstance(result, Exception):
                        raise result
                    entries = parse_entries(result[0])
                    if entries:
                        acls[pattern] = entries
        with self._lock:
            self._known |= set(acls)
        return acls

    def read(self, pattern: ResourcePattern) -> Entries:
        try:
            data, _ = self._zk.sync("get", resource_path(pattern))
        except NoNodeError:
            return frozenset()
        return parse_entries(data)

    def alter(self, pattern: ResourcePattern, change: EntriesChange) -> Entries:
        zk, path = self._zk, resource_path(pattern)
        while True:
            try:
                data, stat = zk.sync("get", path)
            except NoNodeError:
                current, version = frozenset(), None
            else:
                current, version = parse_entries(data), stat.version
            new = frozenset(change(current))
            if new == current:
                return current
            try:
                if version is None:
                    zk.sync("create", path, entries_json(new), makepath=True)
                elif new:
                    zk.sync("set", path, entries_json(new), version=version)
                else:
                    zk.sync("delete", path, version=version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # another writer changed the resource in between: apply the change to theirs
            break
        with self._lock:
            self._known.add(pattern)
        root = change_root(pattern.pattern_type)
        zk.sync("create", f"{root}/{CHANGE_PREFIX}", change_json(pattern), sequence=True, makepath=True)
        self._purge_notifications(root)
        return new

    def _purge_notifications(self, root: str) -> None:
        zk = self._zk
        try:
            children = zk.sync("get_children", root)
            stats = zk.all(zk.client.exists_async(f"{root}/{c}") for c in children)
            old = time.time() - NOTIFICATION_TTL_S
            stale = [c for c, s in zip(children, stats) if s is not None and not isinstance(s, Exception)
                     and s.ctime / 1000 < old]
            zk.all(zk.client.delete_async(f"{root}/{c}") for c in stale)
        except KazooException as exc:
            log.debug("could not purge old ACL change notifications: %s", describe_error(exc))

    def start(self, on_change: ChangeListener) -> None:
        """Watch the notification parents (call from a worker thread: the first reads are synchronous).
        Notifications present now are taken as seen: ``load`` after ``start`` reads their result."""
        self._on_change = on_change
        self._zk.client.add_listener(self._on_session)
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._zk.sync("ensure_path", root)
            with self._lock:
                self._seen[root] = set(self._zk.sync("get_children", root))
            ChildrenWatch(self._zk.client, root, lambda children, root=root: self._notified(root, children))

    def _notified(self, root: str, children: list[str]) -> bool | None:
        if self._on_change is None:
            return False
        with self._lock:
            new = sorted(c for c in children if c not in self._seen[root])
            self._seen[root] = set(children)
        for child in new:
            try:
                data, _ = self._zk.sync("get", f"{root}/{child}")
                pattern = parse_change(data, extended=root == EXTENDED_CHANGES)
                self._report(pattern, self.read(pattern))
            except NoNodeError:
                continue
            except (KazooException, ValueError, KeyError) as exc:
                log.warning("could not apply the ACL change %s/%s: %s", root, child, describe_error(exc))
        return None

    def _report(self, pattern: ResourcePattern, entries: Entries) -> None:
        on_change = self._on_change
        if on_change is not None:
            with self._lock:
                self._known.add(pattern)
            on_change(pattern, entries)

    def _on_session(self, state: KazooState) -> None:
        """kazoo's connection listener (its connection thread: must not block)."""
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._zk.client.handler.spawn(self._reload)

    def _reload(self) -> None:
        """Read every ACL again and report each pattern whose ACLs may have changed (removed ones as empty)."""
        try:
            acls = self.load()
        except KazooException as exc:
            log.warning("could not reload the ACLs after a new ZooKeeper session: %s", describe_error(exc))
            return
        with self._lock:
            patterns = set(self._known)
        for pattern in patterns:
            self._report(pattern, acls.get(pattern, frozenset()))
        log.info("reloaded %d ACL resource(s) on a new ZooKeeper session", len(acls))

    def close(self) -> None:
        self._on_change = None
        self._zk.client.remove_listener(self._on_session)

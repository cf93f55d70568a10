"""Where the authorizer keeps its ACLs: the AclStore interface, and the standalone broker's file in its log dir.

A store loads every ACL at start, changes one resource pattern's ACLs atomically (read, change, write: two
admins adding ACLs to one topic at once both keep theirs) and reports changes written by others (other brokers
of a ZooKeeper cluster) to ``on_change`` -- from any thread; the authorizer moves them to its event loop.
Store calls block (disk or ZooKeeper): the broker runs them off the event loop.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable, Protocol

from pipeline.durable_file import write_atomically
from pipeline.security.acl import AccessControlEntry, PatternType, ResourcePattern, ResourceType
from pipeline.security.acl_zk import entries_json, parse_entries

Entries = frozenset[AccessControlEntry]
#: A change of one pattern's ACLs: the current entries -> the new ones.
EntriesChange = Callable[[Entries], Entries]
ChangeListener = Callable[[ResourcePattern, Entries], None]

#: The standalone broker's ACL file, in its first log dir (next to __standalone_metadata.json).
ACL_FILE = "__acls.json"


class AclStore(Protocol):
    """Durable ACLs shared by the brokers that use the same store."""

    def load(self) -> dict[ResourcePattern, Entries]:
        """Every stored ACL."""

    def alter(self, pattern: ResourcePattern, change: EntriesChange) -> Entries:
        """Replace the ACLs of ``pattern`` with ``change(current)``, atomically; the new entries."""

    def start(self, on_change: ChangeListener) -> None:
        """Report the changes others make from now on."""

    def close(self) -> None:
        """Stop reporting changes."""


class FileAclStore:
    """A standalone broker's ACLs: one owner-only JSON file, replaced atomically at every change."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / ACL_FILE
        self._lock = threading.Lock()

    def load(self) -> dict[ResourcePattern, Entries]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        acls = {}
        for resource in json.loads(text)["resources"]:
            pattern = ResourcePattern(ResourceType.parse(resource["resourceType"]), resource["name"],
                                      PatternType.parse(resource["patternType"]))
            acls[pattern] = parse_entries(json.dumps({"acls": resource["acls"]}).encode())
        return acls

    def alter(self, pattern: ResourcePattern, change: EntriesChange) -> Entries:
        with self._lock:
            acls = self.load()
            current = acls.get(pattern, frozenset())
            new = frozenset(change(current))
            if new == current:
                return current
            if new:
                acls[pattern] = new
            else:
                acls.pop(pattern, None)
            self.write(acls)
            return new

    def write(self, acls: dict[ResourcePattern, Entries]) -> None:
        """Replace every stored ACL (a deployment's initial ACLs; the broker changes them with ``alter``)."""
        resources = [{"resourceType": p.resource_type.display, "name": p.name, "patternType": p.pattern_type.display,
                      "acls": json.loads(entries_json(e))["acls"]}
                     for p, e in sorted(acls.items(), key=lambda item: (item[0].resource_type, item[0].name,
                                                                       item[0].pattern_type))]
        write_atomically(self.path, json.dumps({"version": 1, "resources": resources}, indent=1).encode(), mode=0o600)

    def start(self, on_change: ChangeListener) -> None:
        """Nothing to watch: this broker is the file's only writer."""

    def close(self) -> None:
        pass

"""BrokerRegistry: this broker's presence in ZooKeeper -- the persistent layout, the cluster id, its
ephemeral /brokers/ids/<id> registration, kept across session expiries -- and the producer-id blocks.

After a session expiry kazoo opens a new session by itself; the registry listens for that and
registers again (ephemeral nodes died with the old session). The current session's id and password
are written to ``<log dir>/zookeeper_session.json`` so that tests can expire the session from outside.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from pipeline.zk import layout

log = logging.getLogger(__name__)

SESSION_FILE = "zookeeper_session.json"
PRODUCER_ID_BLOCK_SIZE = 1000


class BrokerIdInUse(RuntimeError):
    """Another live broker holds this broker's id."""


class BrokerRegistry:
    """Registers this broker in ZooKeeper and keeps it registered for the life of the process."""

    def __init__(self, zk: KazooClient, broker_id: int, host: str, port: int, session_file: Path,
                 session_timeout_s: float) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self._session_file = Path(session_file)
        self._session_timeout_s = session_timeout_s
        self._closed = threading.Event()
        self._session_lost = False

    # -- start-up (worker thread) -----------------------------------------------------------------

    def create_persistent_paths(self) -> None:
        for path in layout.PERSISTENT_PATHS:
            self._zk.ensure_path(path)

    def cluster_id(self) -> str:
        """The cluster id in /cluster/id, created by the first broker that asks."""
        try:
            self._zk.create(layout.CLUSTER_ID, layout.encode({"version": "1", "id": uuid.uuid4().hex[:22]}),
                            makepath=True)
        except NodeExistsError:
            pass
        return layout.decode(self._zk.get(layout.CLUSTER_ID)[0])["id"]

    def register(self) -> None:
        """Create /brokers/ids/<id>; BrokerIdInUse if another broker holds it.

        A node left by this broker's own previous life (same host and port, e.g. after kill -9) is
        waited out for up to one session timeout: it vanishes when that session expires.
        """
        path = layout.broker_path(self.broker_id)
        deadline = time.monotonic() + self._session_timeout_s + 2
        while True:
            try:
                self._zk.create(path, layout.broker_registration(self.host, self.port), ephemeral=True)
                break
            except NodeExistsError:
                try:
                    data, stat = self._zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._zk.client_id[0]:
                    break
                holder = layout.decode(data)
                same_address = holder.get("host") == self.host and holder.get("port") == self.port
                if not same_address or time.monotonic() > deadline:
                    raise BrokerIdInUse(
                        f"broker id {self.broker_id} is already registered in ZooKeeper ({path}) by the broker at "
                        f"{holder.get('host')}:{holder.get('port')}; give this broker another broker.id") from None
                log.info("waiting for the registration of broker %d's previous session to expire", self.broker_id)
                self._closed.wait(0.25)
        self._write_session_file()
        log.info("registered broker %d at %s:%d in ZooKeeper", self.broker_id, self.host, self.port)

    def start(self) -> None:
        """Re-register after every new session (call once registered)."""
        self._zk.add_listener(self._on_session_state)

    def close(self) -> None:
        self._closed.set()
        self._zk.remove_listener(self._on_session_state)

    # -- session expiry ---------------------------------------------------------------------------

    def _on_session_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session expired; broker %d will register again", self.broker_id)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            threading.Thread(target=self._register_again, name="broker-reregister", daemon=True).start()

    def _register_again(self) -> None:
        while not self._closed.is_set():
            try:
                self.register()
                return
            except BrokerIdInUse as exc:
                log.error("%s", exc)
                return
            except Exception as exc:
                log.warning("registering again failed (%s); retrying", exc)
                self._closed.wait(0.5)

    def _write_session_file(self) -> None:
        session_id, password = self._zk.client_id
        tmp = self._session_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"session_id": session_id, "password": password.hex(),
                                   "broker_id": self.broker_id}))
        os.replace(tmp, self._session_file)

    # -- producer ids -----------------------------------------------------------------------------

    def allocate_producer_id_block(self) -> tuple[int, int]:
        """Claim the next block of producer ids (first, last) with a compare-and-swap on its znode."""
        while True:
            try:
                data, stat = self._zk.get(layout.PRODUCER_ID_BLOCK)
            except NoNodeError:
                first, last = 0, PRODUCER_ID_BLOCK_SIZE - 1
                try:
                    self._zk.create(layout.PRODUCER_ID_BLOCK, layout.producer_id_block(self.broker_id, first, last))
                    return first, last
                except NodeExistsError:
                    continue
            previous = layout.parse_producer_id_block(data)
            first = 0 if previous is None else previous[1] + 1
            last = first + PRODUCER_ID_BLOCK_SIZE - 1
            try:
                self._zk.set(layout.PRODUCER_ID_BLOCK, layout.producer_id_block(self.broker_id, first, last),
                             version=stat.version)
                return first, last
            except BadVersionError:
                continue

"""BrokerRegistry: this broker's presence in ZooKeeper -- the persistent layout, the cluster id, its
ephemeral /brokers/ids/<id> registration, kept across session expiries -- and the producer-id blocks.

After a session expiry kazoo opens a new session by itself; the registry listens for that and
registers again (ephemeral nodes died with the old session). The session's credentials stay in memory:
nothing outside the process can join or end the session.

ZkProducerIdManager hands out producer ids from the blocks the registry claims (Kafka's ZooKeeper-mode
ProducerIdManager); every ZooKeeper call here is bounded (BoundedZk).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from pipeline.error_text import describe_error
from pipeline.zk.client import BoundedZk, ZooKeeperTimeout, watch_until
from broker.metadata import ProducerIdUnavailable
from pipeline.zk import layout

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000


class BrokerIdInUse(RuntimeError):
    """Another live broker holds this broker's id."""


class BrokerRegistry:
    """Registers this broker in ZooKeeper and keeps it registered for the life of the process."""

    def __init__(self, zk: BoundedZk, broker_id: int, host: str, port: int, session_timeout_s: float,
                 endpoints: list[tuple[str, str, str, int]] | None = None) -> None:
        self._zk = zk
        self.broker_id = broker_id
        # The inter-broker listener's address, and every advertised (listener, protocol, host, port).
        self.host = host
        self.port = port
        self.endpoints = endpoints
        self._session_timeout_s = session_timeout_s
        self._closed = threading.Event()
        self._session_lost = False

    # -- start-up (worker thread) -----------------------------------------------------------------

    def create_persistent_paths(self) -> None:
        for path in layout.PERSISTENT_PATHS:
            self._zk.sync("ensure_path", path)

    def cluster_id(self) -> str:
        """The cluster id in /cluster/id, created by the first broker that asks."""
        try:
            self._zk.sync("create", layout.CLUSTER_ID, layout.encode({"version": "1", "id": uuid.uuid4().hex[:22]}),
                          makepath=True)
        except NodeExistsError:
            pass
        return layout.decode(self._zk.sync("get", layout.CLUSTER_ID)[0])["id"]

    def register(self) -> None:
        """Create /brokers/ids/<id>; BrokerIdInUse if another broker holds it.

        A node left by this broker's own previous life (same host and port, e.g. after kill -9) is
        waited out for up to one session timeout: it vanishes when that session expires.
        """
        path = layout.broker_path(self.broker_id)
        deadline = time.monotonic() + self._session_timeout_s + 2
        while True:
            try:
                self._zk.sync("create", path, layout.broker_registration(self.host, self.port, self.endpoints),
                              ephemeral=True)
                break
            except NodeExistsError:
                try:
                    data, stat = self._zk.sync("get", path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._zk.client.client_id[0]:
                    break
                holder = layout.decode(data)
                same_address = holder.get("host") == self.host and holder.get("port") == self.port
                if not same_address or time.monotonic() > deadline:
                    raise BrokerIdInUse(
                        f"broker id {self.broker_id} is already registered in ZooKeeper ({path}) by the broker at "
                        f"{holder.get('host')}:{holder.get('port')}; give this broker another broker.id") from None
                log.info("waiting for the registration of broker %d's previous session to expire", self.broker_id)
                self._closed.wait(0.25)
        log.info("registered broker %d at %s:%d in ZooKeeper", self.broker_id, self.host, self.port)

    def request_controlled_shutdown(self, timeout_s: float) -> int | None:
        """Ask the controller to move this broker's leaderships away: create (or renew) the ephemeral
        /admin/controlled_shutdown/<id> and wait for the controller's answer in it, the number of
        partitions still led here. None when no answer came within ``timeout_s``."""
        path = layout.controlled_shutdown_path(self.broker_id)
        request = layout.encode({"version": 1, "requested_ms": layout.now_ms()})
        try:
            self._zk.sync("create", path, request, ephemeral=True, makepath=True)
        except NodeExistsError:
            self._zk.sync("set", path, request)
        return watch_until(self._zk.client, path, lambda data, stat: layout.parse_controlled_shutdown_reply(data),
                           timeout_s)

    def start(self) -> None:
        """Re-register after every new session (call once registered)."""
        self._zk.client.add_listener(self._on_session_state)

    def close(self) -> None:
        self._closed.set()
        self._zk.client.remove_listener(self._on_session_state)

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
                log.warning("registering again failed (%s); retrying", describe_error(exc))
                self._closed.wait(0.5)

    # -- producer ids -----------------------------------------------------------------------------

    async def claim_producer_id_block(self) -> tuple[int, int]:
        """Claim the next block of producer ids (first, last) with a compare-and-swap on its znode."""
        while True:
            try:
                data, stat = await self._zk.call("get", layout.PRODUCER_ID_BLOCK)
            except NoNodeError:
                first, last = 0, PRODUCER_ID_BLOCK_SIZE - 1
                try:
                    await self._zk.call("create", layout.PRODUCER_ID_BLOCK,
                                        layout.producer_id_block(self.broker_id, first, last))
                    return first, last
                except NodeExistsError:
                    continue
            previous = layout.parse_producer_id_block(data)
            first = 0 if previous is None else previous[1] + 1
            last = first + PRODUCER_ID_BLOCK_SIZE - 1
            try:
                await self._zk.call("set", layout.PRODUCER_ID_BLOCK,
                                    layout.producer_id_block(self.broker_id, first, last), version=stat.version)
                return first, last
            except BadVersionError:
                continue


class ZkProducerIdManager:
    """Producer ids for InitProducerId from blocks claimed in ZooKeeper, one claim at a time.

    An id of the current block is handed out at once; when the block is used up, one claim runs and
    every request that needs an id waits for it (bounded: ProducerIdUnavailable when ZooKeeper does not
    answer). No lock is held while ZooKeeper is asked.
    """

    def __init__(self, registry: BrokerRegistry) -> None:
        self._registry = registry
        self._next, self._last = 0, -1
        self._claim: asyncio.Future[None] | None = None

    def next_producer_id(self) -> int | asyncio.Future[int]:
        if self._next <= self._last:
            return self._take()
        return asyncio.ensure_future(self._after_claim())

    def _take(self) -> int:
        producer_id = self._next
        self._next += 1
        return producer_id

    async def _after_claim(self) -> int:
        while self._next > self._last:
            if self._claim is None:
                self._claim = asyncio.ensure_future(self._claim_block())
            await asyncio.shield(self._claim)
        return self._take()

    async def _claim_block(self) -> None:
        try:
            first, last = await self._registry.claim_producer_id_block()
        except (ZooKeeperTimeout, KazooException) as exc:
            raise ProducerIdUnavailable(f"claiming a block of producer ids failed: {describe_error(exc)}"
                                        ) from None
        finally:
            self._claim = None
        log.info("claimed producer ids %d..%d", first, last)
        self._next, self._last = first, last

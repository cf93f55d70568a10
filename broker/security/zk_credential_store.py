"""The SCRAM credentials of a ZooKeeper cluster, as Kafka keeps them: ``/config/users/<user>`` and change notifications.

Every broker loads all users at start and watches ``/config/changes``: a new ``config_change_<seq>`` node whose
``entity_path`` is ``users/<user>`` makes it read that user again (Kafka's ZkConfigManager; kafka-configs and
any broker write them). A broker serving AlterUserScramCredentials writes the user's znode, then the
notification, so the other brokers see the change within a watch round trip. Reads happen on the event loop
(BoundedZk.call), woken by the watch from kazoo's thread. Old notifications are not purged here.
"""

from __future__ import annotations

import asyncio
import json
import logging

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from broker.security.credential_store import CredentialStore
from pipeline.protocol.errors import ErrorCode
from pipeline.security.scram_users import UserCredentials, parse_user_config, user_config_json
from pipeline.zk.client import BoundedZk
from pipeline.zk.layout import (CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, CONFIG_USERS, config_change_sequence,
                                user_config_change, user_config_path)

log = logging.getLogger(__name__)

class ZkCredentialStore(CredentialStore):
    """The cluster's credentials, cached and kept current by the change notifications."""

    def __init__(self, zk: BoundedZk, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._zk = zk
        self._loop = loop
        self._last_change = -1
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Load every user, then follow the notifications."""
        for path in (CONFIG_USERS, CONFIG_CHANGES):
            await self._zk.call("ensure_path", path)
        children = await self._zk.call("get_children", CONFIG_CHANGES)
        self._last_change = max((config_change_sequence(name) for name in children), default=-1)
        for user in await self._zk.call("get_children", CONFIG_USERS):
            await self._reload(user)
        self._task = self._loop.create_task(self._follow())
        ChildrenWatch(self._zk.client, CONFIG_CHANGES, self._on_changes)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _on_changes(self, children: list[str]) -> bool | None:
        if self._task is None:
            return False
        self._loop.call_soon_threadsafe(self._changed.set)
        return None

    async def _follow(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self._process_changes()
            except (KazooException, OSError, TimeoutError) as exc:
                log.warning("reading the config change notifications failed (%s); retrying", exc)
                await asyncio.sleep(1.0)
                self._changed.set()

    async def _process_changes(self) -> None:
        children = await self._zk.call("get_children", CONFIG_CHANGES)
        names = sorted((n for n in children if config_change_sequence(n) > self._last_change), key=config_change_sequence)
        for name in names:
            try:
                data, _ = await self._zk.call("get", f"{CONFIG_CHANGES}/{name}")
                entity = json.loads(data).get("entity_path", "")
            except NoNodeError:
                entity = ""
            except ValueError:
                log.warning("ignoring malformed config change %s", name)
                entity = ""
            if isinstance(entity, str) and entity.startswith("users/"):
                await self._reload(entity[len("users/"):])
            self._last_change = config_change_sequence(name)

    async def _reload(self, user: str) -> None:
        try:
            data, _ = await self._zk.call("get", user_config_path(user))
        except NoNodeError:
            data = None
        self.set_user(user, parse_user_config(data))

    async def _persist(self, changes: dict[str, UserCredentials]) -> dict[str, tuple[int, str]]:
        failed: dict[str, tuple[int, str]] = {}
        for user, credentials in changes.items():
            data = user_config_json(credentials)
            try:
                try:
                    await self._zk.call("set", user_config_path(user), data)
                except NoNodeError:
                    try:
                        await self._zk.call("create", user_config_path(user), data, makepath=True)
                    except NodeExistsError:
                        await self._zk.call("set", user_config_path(user), data)
                await self._zk.call("create", f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}", user_config_change(user),
                                    sequence=True, makepath=True)
            except (KazooException, OSError, TimeoutError) as exc:
                log.warning("storing the credentials of user %r failed: %s", user, exc)
                failed[user] = (ErrorCode.REQUEST_TIMED_OUT, "ZooKeeper did not store the credential")
                continue
            self.set_user(user, credentials)
        return failed


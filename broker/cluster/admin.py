"""ZkAdminManager: topic creation and deletion in cluster mode, through ZooKeeper and the controller.

The receiving broker validates the request as the standalone AdminManager does, writes a request
znode (/admin/create_topics/<t> or /admin/delete_topics/<t>) and waits, without blocking the event
loop, until its own cache shows the controller's result: the topic with every partition's state, or
the topic gone. A creation the controller refuses comes back as an error written into the request
znode, which this broker reads and removes. ZooKeeper calls run in the loop's default executor.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from broker.admin_manager import TopicError, topic_log_config
from broker.log.log_config import LogConfig
from broker.metadata import InvalidTopicError, validate_topic_name
from broker.cluster.metadata_cache import ZkMetadataCache
from pipeline.protocol.errors import ErrorCode
from pipeline.zk import layout

log = logging.getLogger(__name__)


class ZkAdminManager:
    """CreateTopics / DeleteTopics / auto-creation of one broker, carried out by the controller."""

    def __init__(self, zk: KazooClient, cache: ZkMetadataCache, default_log_config: LogConfig,
                 default_partitions: int, default_replication_factor: int) -> None:
        self._zk = zk
        self._cache = cache
        self._default_log_config = default_log_config
        self._default_partitions = default_partitions
        self._default_replication_factor = default_replication_factor

    async def _zk_call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: function(*args, **kwargs))

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, validate_only: bool = False,
                           timeout_ms: int = 30000) -> None:
        """Create a topic through the controller; TopicError with Kafka's code when refused or late."""
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)) from None
        if partitions == -1:
            partitions = self._default_partitions
        if partitions < 1:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {partitions}")
        if replication_factor == -1:
            replication_factor = self._default_replication_factor
        live = len(self._cache.brokers)
        if replication_factor < 1:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication factor must be at least 1, got {replication_factor}")
        if replication_factor > live:
            raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"replication factor {replication_factor} is larger than the {live} live broker(s)")
        configs = dict(configs or {})
        topic_log_config(self._default_log_config, configs)
        if name in self._cache.topics or await self._zk_call(self._zk.exists, layout.topic_path(name)):
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if validate_only:
            return
        request_path = layout.create_topic_request_path(name)
        refused: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            await self._zk_call(self._zk.create, request_path,
                                layout.create_topic_request(partitions, replication_factor, configs))
        except NodeExistsError:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} is being created") from None
        await self._zk_call(DataWatch, self._zk, request_path, self._refusal_watcher(refused))
        if timeout_ms <= 0:
            return
        created = asyncio.ensure_future(
            self._cache.wait_for(lambda: (t := self._cache.topics.get(name)) is not None and t.complete,
                                 timeout_ms / 1000))
        try:
            done, _ = await asyncio.wait({created, refused}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            created.cancel()
        if refused in done:
            code, message = refused.result()
            await self._zk_call(self._delete_quietly, request_path)
            raise TopicError(code, message)
        refused.cancel()
        if not created.result():
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT,
                             f"the controller did not create topic {name!r} within {timeout_ms} ms")
        log.info("topic %s created by the controller: %d partition(s)", name, partitions)

    def _refusal_watcher(self, refused: asyncio.Future) -> Callable[[bytes | None, object], bool | None]:
        loop = asyncio.get_running_loop()

        def settle(code: int, message: str) -> None:
            if not refused.done():
                refused.set_result((code, message))

        def on_request(data: bytes | None, stat: object) -> bool | None:
            if data is None or refused.done():
                return False
            value = layout.decode(data)
            if "error_code" in value:
                loop.call_soon_threadsafe(settle, int(value["error_code"]), str(value.get("error_message")))
                return False
            return None
        return on_request

    def _delete_quietly(self, path: str) -> None:
        try:
            self._zk.delete(path)
        except NoNodeError:
            pass

    async def delete_topic(self, name: str, timeout_ms: int = 30000) -> None:
        """Delete a topic through the controller; TopicError if unknown or late."""
        if name not in self._cache.topics and not await self._zk_call(self._zk.exists, layout.topic_path(name)):
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        try:
            await self._zk_call(self._zk.create, layout.delete_topic_request_path(name), b"")
        except NodeExistsError:
            pass
        if timeout_ms <= 0:
            return
        if not await self._cache.wait_for(lambda: name not in self._cache.topics, timeout_ms / 1000):
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT,
                             f"the controller did not delete topic {name!r} within {timeout_ms} ms")
        log.info("topic %s deleted by the controller", name)

"""ZkAdminManager: topic creation, deletion and config changes in cluster mode, through ZooKeeper and the controller.

The receiving broker validates the request as the standalone AdminManager does (validate_new_topic),
writes a request znode (/admin/create_topics/<t> or /admin/delete_topics/<t>) and waits, without
blocking the event loop, until its own cache shows the controller's result: the topic with every
partition's state, or the topic gone. A creation the controller refuses comes back as an error written
into the request znode, which this broker reads and removes; a creation not done in time has its request
withdrawn (removed), so a topic name never stays "being created". Every ZooKeeper call is bounded: when
ZooKeeper does not answer, the request fails with Kafka's retriable REQUEST_TIMED_OUT.

CreatePartitions is Kafka's ZooKeeper-mode way: the receiving broker validates the request, extends the
replica assignment in the topic's znode (/brokers/topics/<t>, conditional on the version it read) and
waits until its cache shows every new partition with a state; the controller, watching the topic znodes,
writes those states with a live replica as leader.

AlterConfigs and IncrementalAlterConfigs rewrite the topic's /config/topics/<t> znode, conditional on the
version read; every broker's cache watches it and applies the new settings to the replicas it hosts.

Auto-creation (a Metadata request naming an unknown topic) does not wait: it starts the creation in the
background and the Metadata answer says LEADER_NOT_AVAILABLE for the topic, as Kafka's does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from broker.admin_manager import TopicError, validate_name, validate_new_partitions, validate_new_topic
from broker.cluster.controller import assign_replicas
from broker.cluster.metadata_cache import ZkMetadataCache
from pipeline.error_text import describe_error
from pipeline.zk.client import BoundedZk, ZooKeeperTimeout
from broker.log.log_config import LogConfig
from pipeline.protocol.errors import ErrorCode
from pipeline.zk import layout

log = logging.getLogger(__name__)

# How long a background auto-creation waits for the controller before withdrawing its request.
AUTO_CREATE_TIMEOUT_MS = 30000
# How long an AlterConfigs answer waits for this broker's view to show the configs it stored.
CONFIG_VIEW_WAIT_S = 5.0


def zookeeper_unavailable(name: str, outcome: str, exc: Exception) -> TopicError:
    """The retriable error of a topic operation ZooKeeper did not answer in time."""
    return TopicError(ErrorCode.REQUEST_TIMED_OUT,
                      f"ZooKeeper is unavailable; topic {name!r} {outcome} ({describe_error(exc)})")


class ZkAdminManager:
    """CreateTopics / DeleteTopics / auto-creation of one broker, carried out by the controller."""

    def __init__(self, zk: BoundedZk, cache: ZkMetadataCache, default_log_config: LogConfig,
                 default_partitions: int, default_replication_factor: int) -> None:
        self._zk = zk
        self._cache = cache
        self._default_log_config = default_log_config
        self._default_partitions = default_partitions
        self._default_replication_factor = default_replication_factor
        self._auto_creating: dict[str, asyncio.Task] = {}

    @property
    def default_log_config(self) -> LogConfig:
        return self._default_log_config

    # -- creation ---------------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, validate_only: bool = False,
                           timeout_ms: int = 30000) -> None:
        """Create a topic through the controller; TopicError with Kafka's code when refused or late."""
        topic = validate_new_topic(name, partitions, replication_factor, configs, self._default_log_config,
                                   self._default_partitions, self._default_replication_factor,
                                   len(self._cache.brokers))
        if layout.estimated_creation_bytes(name, topic.partitions, topic.replication_factor) > layout.MAX_REQUEST_BYTES:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"{topic.partitions} partitions are more than one ZooKeeper transaction can create "
                             f"(its {layout.MAX_REQUEST_BYTES}-byte request limit)")
        if name in self._cache.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if validate_only:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        request_path = layout.create_topic_request_path(name)
        request = layout.create_topic_request(topic.partitions, topic.replication_factor, topic.configs)
        try:
            # A request with a timeout gives ZooKeeper no longer than it; one without gets the ZooKeeper deadline.
            await self._write_request(request_path, request, name,
                                      max(0.0, deadline - loop.time()) if timeout_ms > 0 else None)
            if timeout_ms <= 0:
                return
            refused = await self._outcome(name, request_path, deadline)
        except (ZooKeeperTimeout, KazooException) as exc:
            # Not waited for: ZooKeeper is not answering. kazoo sends it once connected again (after the
            # create, if that is still queued), so the request does not outlive this answer.
            self._zk.client.delete_async(request_path)
            raise zookeeper_unavailable(name, "was not created", exc) from None
        if refused is not None:
            await self._withdraw(request_path)
            raise TopicError(*refused)
        if not self._created(name):
            await self._withdraw(request_path)
            if not self._created(name):
                raise TopicError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"the controller did not create topic {name!r} within {timeout_ms} ms")
        log.info("topic %s created by the controller: %d partition(s)", name, topic.partitions)

    def _created(self, name: str) -> bool:
        topic = self._cache.topics.get(name)
        return topic is not None and topic.complete

    async def _write_request(self, request_path: str, request: bytes, name: str, timeout_s: float | None) -> None:
        """Create the request znode; a refused request left behind by a requester that gave up is replaced."""
        for _ in range(2):
            try:
                await self._zk.call("create", request_path, request, timeout_s=timeout_s)
                return
            except NodeExistsError:
                try:
                    data, stat = await self._zk.call("get", request_path, timeout_s=timeout_s)
                except NoNodeError:
                    continue
                if "error_code" not in layout.decode(data):
                    raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} is being created") from None
                try:
                    await self._zk.call("delete", request_path, version=stat.version, timeout_s=timeout_s)
                except (NoNodeError, KazooException):
                    continue
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} is being created")

    async def _outcome(self, name: str, request_path: str, deadline: float) -> tuple[int, str] | None:
        """Wait until the topic is in the cache (None) or the controller refused it ((code, message)), or
        the deadline (None; the caller looks at the cache)."""
        loop = asyncio.get_running_loop()
        created = asyncio.ensure_future(self._cache.wait_for(lambda: self._created(name), deadline - loop.time()))
        try:
            while not created.done() and loop.time() < deadline:
                changed = asyncio.Event()

                def on_change(event: WatchedEvent, changed: asyncio.Event = changed) -> None:
                    try:
                        loop.call_soon_threadsafe(changed.set)
                    except RuntimeError:
                        pass  # the loop closed: the broker is shutting down
                try:
                    data, _ = await self._zk.call("get", request_path, watch=on_change,
                                                  timeout_s=max(0.0, deadline - loop.time()))
                except NoNodeError:
                    # The controller consumed the request: the topic shows up in the cache.
                    await created
                    return None
                except ZooKeeperTimeout:
                    if loop.time() >= deadline:
                        return None  # the request's own time ran out, not ZooKeeper's
                    raise
                value = layout.decode(data)
                if "error_code" in value:
                    return int(value["error_code"]), str(value.get("error_message"))
                waiter = asyncio.ensure_future(changed.wait())
                try:
                    await asyncio.wait({created, waiter}, timeout=max(0.0, deadline - loop.time()),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
            return None
        finally:
            created.cancel()

    async def _withdraw(self, request_path: str) -> None:
        """Remove a creation request that failed or timed out (the controller leaves a refused one to us)."""
        try:
            await self._zk.call("delete", request_path)
        except NoNodeError:
            pass
        except (ZooKeeperTimeout, KazooException) as exc:
            # ZooKeeper is unavailable: kazoo still sends the delete once it reconnects, and a later request
            # for this name replaces a refused one.
            log.warning("could not withdraw %s yet: %s", request_path, describe_error(exc))

    def auto_create(self, name: str) -> None:
        """Start creating ``name`` in the background with the defaults; TopicError at once if the name is illegal."""
        validate_name(name)
        if name in self._auto_creating:
            return
        task = asyncio.ensure_future(self.create_topic(name, timeout_ms=AUTO_CREATE_TIMEOUT_MS))
        self._auto_creating[name] = task
        task.add_done_callback(lambda done: self._auto_created(name, done))

    def _auto_created(self, name: str, task: asyncio.Task) -> None:
        self._auto_creating.pop(name, None)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            log.info("auto-created topic %s", name)
        elif isinstance(error, TopicError):
            if error.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.info("not auto-creating topic %r: %s", name, error)
        else:
            log.error("auto-creating topic %r failed", name, exc_info=error)

    def close(self) -> None:
        """Stop background creations (at shutdown)."""
        for task in list(self._auto_creating.values()):
            task.cancel()

    # -- new partitions ---------------------------------------------------------------------------

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                                validate_only: bool = False, timeout_ms: int = 30000) -> None:
        """Grow a topic to ``count`` partitions; TopicError with Kafka's code when refused or late."""
        path = layout.topic_path(name)
        try:
            while True:
                try:
                    data, stat = await self._zk.call("get", path)
                except NoNodeError:
                    data, stat = None, None
                current = None if data is None else layout.parse_topic_assignment(data)
                replicas = self._new_assignment(name, current, count, assignments)
                if await self._zk.call("exists", layout.delete_topic_request_path(name)):
                    raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {name!r} is queued for deletion")
                if validate_only:
                    return
                try:
                    await self._zk.call("set", path, layout.topic_assignment(replicas, layout.parse_topic_id(data)),
                                        version=stat.version)
                    break
                except BadVersionError:
                    continue  # the topic changed since it was read: validate against what it is now
                except NoNodeError:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist") from None
        except (ZooKeeperTimeout, KazooException) as exc:
            raise zookeeper_unavailable(name, "did not grow", exc) from None
        await self._wait_for_controller(lambda: self._grown(name, count), timeout_ms,
                                        f"start the new partitions of {name!r}")
        log.info("topic %s grew to %d partitions", name, count)

    async def alter_topic_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                                  validate_only: bool = False) -> None:
        """Kafka's ZooKeeper-mode way: rewrite /config/topics/<t> (conditional on the version read, so two
        changes at once do not lose one), which every broker watches and applies to its replicas; then wait a
        little for this broker's own view, so that a describe sent here next sees the change."""
        if name not in self._cache.topics:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        path = layout.topic_config_path(name)
        try:
            while True:
                try:
                    data, stat = await self._zk.call("get", path)
                    configs = change(layout.parse_topic_config(data))
                    if validate_only:
                        return
                    await self._zk.call("set", path, layout.topic_config(configs), version=stat.version)
                    break
                except BadVersionError:
                    continue  # changed since it was read: apply the change to what it is now
                except NoNodeError:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist") from None
        except (ZooKeeperTimeout, KazooException) as exc:
            raise zookeeper_unavailable(name, "kept its configs", exc) from None
        log.info("topic %s now overrides %s", name, configs or "no config")
        seen = await self._cache.wait_for(lambda: self._cache.topic_configs(name) in (configs, None), CONFIG_VIEW_WAIT_S)
        if not seen:
            log.warning("topic %s: the new configs were stored but this broker's view does not show them yet", name)

    def _new_assignment(self, name: str, current: dict[int, list[int]] | None, count: int,
                        assignments: list[list[int]] | None) -> dict[int, list[int]]:
        """The topic's whole replica assignment after growing to ``count``: the given lists for the new
        partitions, or round-robin over the live brokers continuing where the existing partitions left off."""
        live = sorted(self._cache.brokers)
        validate_new_partitions(name, current, count, assignments, set(live))
        assert current is not None  # validate_new_partitions refused an unknown topic
        factor = len(assignments[0]) if assignments else len(current.get(0, ())) or 1
        if layout.estimated_creation_bytes(name, count, factor) > layout.MAX_REQUEST_BYTES:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"{count} partitions are more than one ZooKeeper request can describe "
                             f"(its {layout.MAX_REQUEST_BYTES}-byte limit)")
        if assignments is None:
            if factor > len(live):
                raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"replication factor {factor} is larger than the {len(live)} live broker(s)")
            first = current[0][0] if current.get(0) else None
            start = (live.index(first) if first in live else 0) + len(current)
            added = assign_replicas(live, count - len(current), factor, start=start)
            assignments = [added[k] for k in sorted(added)]
        return {**current, **{len(current) + k: list(r) for k, r in enumerate(assignments)}}

    async def _wait_for_controller(self, done: Callable[[], bool], timeout_ms: int, what: str) -> None:
        """Wait until the cache shows the controller's work ``done`` (not at all for a timeout <= 0);
        TopicError(REQUEST_TIMED_OUT) when it is not done in time."""
        if timeout_ms > 0 and not await self._cache.wait_for(done, timeout_ms / 1000):
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, f"the controller did not {what} within {timeout_ms} ms")

    def _grown(self, name: str, count: int) -> bool:
        topic = self._cache.topics.get(name)
        return topic is not None and topic.partitions >= count and topic.complete

    # -- deletion ---------------------------------------------------------------------------------

    async def delete_topic(self, name: str, timeout_ms: int = 30000) -> None:
        """Delete a topic through the controller; TopicError if unknown, late, or ZooKeeper is unavailable.

        A deletion request that times out stays, as in Kafka: the topic is marked for deletion.
        """
        try:
            if name not in self._cache.topics and not await self._zk.call("exists", layout.topic_path(name)):
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            try:
                await self._zk.call("create", layout.delete_topic_request_path(name), b"")
            except NodeExistsError:
                pass
        except (ZooKeeperTimeout, KazooException) as exc:
            raise zookeeper_unavailable(name, "was not deleted", exc) from None
        await self._wait_for_controller(lambda: name not in self._cache.topics, timeout_ms, f"delete topic {name!r}")
        log.info("topic %s deleted by the controller", name)


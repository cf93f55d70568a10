"""ClusterKafkaApis: the request handlers that differ when the broker is one of a ZooKeeper cluster.

Metadata answers from the ZooKeeper-fed cache (all live brokers, the controller, leaders or -1 with
LEADER_NOT_AVAILABLE), CreateTopics / DeleteTopics and auto-creation go through the controller, and
InitProducerId hands out ids from blocks claimed in ZooKeeper. Produce, Fetch and ListOffsets are the
standalone handlers: the ReplicaManager answers NOT_LEADER_OR_FOLLOWER for partitions led elsewhere.
Leader epochs are advertised as -1 in Metadata: OffsetForLeaderEpoch is not served, and librdkafka
would otherwise validate fetch positions with it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable

from broker.admin_manager import TopicError
from broker.cluster.registry import BrokerRegistry
from broker.kafka_apis import AUTHORIZED_OPERATIONS_OMITTED, KafkaApis
from broker.replica_manager import ReplicaManager
from broker.cluster.admin import ZkAdminManager
from broker.cluster.metadata_cache import NO_LEADER, ZkMetadataCache
from pipeline.protocol.codec import RequestHeader
from pipeline.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# How long a Metadata request waits for the controller to create a topic it asked for.
AUTO_CREATE_WAIT_MS = 10000


class ClusterKafkaApis(KafkaApis):
    """KafkaApis of a broker in cluster mode."""

    def __init__(self, broker_id: int, advertised_host: str, advertised_port: int, replica_manager: ReplicaManager,
                 admin: ZkAdminManager, cache: ZkMetadataCache, registry: BrokerRegistry, auto_create_topics: bool,
                 fetch_max_wait_cap_ms: int) -> None:
        super().__init__(broker_id, advertised_host, advertised_port, replica_manager, admin, cache,  # type: ignore[arg-type]
                         auto_create_topics, fetch_max_wait_cap_ms)
        self.cache = cache
        self.zk_admin = admin
        self.registry = registry
        self._producer_ids: tuple[int, int] | None = None
        self._producer_id_lock = asyncio.Lock()

    # -- Metadata -------------------------------------------------------------------------------

    def handle_metadata(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        requested = request.get("topics")
        allow_create = request.get("allow_auto_topic_creation", True) and self.auto_create_topics
        if requested is None or (header.api_version == 0 and not requested):
            names = sorted(self.cache.topics)
        else:
            names = [t["name"] for t in requested]
        missing = [n for n in names if n not in self.cache.topics]
        if missing and allow_create:
            return self._metadata_after_creating(names, missing)
        return self._metadata_body(names)

    async def _metadata_after_creating(self, names: list[str], missing: list[str]) -> dict:
        async def create(name: str) -> None:
            try:
                await self.zk_admin.create_topic(name, timeout_ms=AUTO_CREATE_WAIT_MS)
                log.info("auto-created topic %s", name)
            except TopicError as exc:
                if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.info("not auto-creating topic %r: %s", name, exc)
        await asyncio.gather(*(create(n) for n in missing))
        return self._metadata_body(names)

    def _metadata_body(self, names: list[str]) -> dict:
        cache = self.cache
        live = cache.brokers
        entries = []
        for name in names:
            topic = cache.topics.get(name)
            if topic is None or not topic.replicas:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode.LEADER_NOT_AVAILABLE
                entries.append({"error_code": code, "name": name, "partitions": [],
                                "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
                continue
            partitions = []
            for index, replicas in sorted(topic.replicas.items()):
                state = topic.states.get(index)
                leader = state.leader if state is not None and state.leader in live else NO_LEADER
                partitions.append({
                    "error_code": ErrorCode.NONE if leader != NO_LEADER else ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition_index": index,
                    "leader_id": leader,
                    "leader_epoch": -1,
                    "replica_nodes": list(replicas),
                    "isr_nodes": [b for b in state.isr if b in live] if state is not None else [],
                    "offline_replicas": [b for b in replicas if b not in live],
                })
            entries.append({"error_code": ErrorCode.NONE, "name": name, "is_internal": False,
                            "partitions": partitions, "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
        return {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": None}
                        for b in cache.live_brokers()],
            "cluster_id": cache.cluster_id,
            "controller_id": cache.controller_id,
            "topics": entries,
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }

    # -- CreateTopics, DeleteTopics -------------------------------------------------------------

    def handle_create_topics(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        return self._create_topics(request)

    async def _create_topics(self, request: dict) -> dict:
        timeout_ms = request.get("timeout_ms", 30000)
        validate_only = request.get("validate_only", False)

        async def create(topic: dict) -> dict:
            try:
                await self.zk_admin.create_topic(*self.topic_to_create(topic), validate_only=validate_only,
                                                 timeout_ms=timeout_ms)
            except TopicError as exc:
                return self.topic_result(topic["name"], exc)
            return self.topic_result(topic["name"])
        results = await asyncio.gather(*(create(t) for t in request["topics"]))
        return {"throttle_time_ms": 0, "topics": list(results)}

    def handle_delete_topics(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        return self._delete_topics(request)

    async def _delete_topics(self, request: dict) -> dict:
        timeout_ms = request.get("timeout_ms", 30000)

        async def delete(name: str) -> dict:
            try:
                await self.zk_admin.delete_topic(name, timeout_ms)
            except TopicError as exc:
                return self.topic_result(name, exc)
            return self.topic_result(name)
        results = await asyncio.gather(*(delete(n) for n in request["topic_names"]))
        return {"throttle_time_ms": 0, "responses": list(results)}

    # -- InitProducerId -------------------------------------------------------------------------

    def handle_init_producer_id(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if request.get("transactional_id") is not None:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        block = self._producer_ids
        if block is not None and block[0] <= block[1]:
            self._producer_ids = (block[0] + 1, block[1])
            return self._producer_id_response(block[0])
        return self._init_producer_id_from_new_block()

    async def _init_producer_id_from_new_block(self) -> dict:
        async with self._producer_id_lock:
            block = self._producer_ids
            if block is None or block[0] > block[1]:
                loop = asyncio.get_running_loop()
                try:
                    block = await loop.run_in_executor(None, self.registry.allocate_producer_id_block)
                except Exception as exc:
                    log.warning("could not claim a producer id block: %s", exc)
                    return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            "producer_id": -1, "producer_epoch": -1}
                log.info("claimed producer ids %d..%d", *block)
            self._producer_ids = (block[0] + 1, block[1])
            return self._producer_id_response(block[0])

    def _producer_id_response(self, producer_id: int) -> dict:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}

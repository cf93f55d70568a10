"""KafkaApis: decodes each request frame, calls the partition and admin layers, encodes the response.

One handler per API key, found through a table; request and response bodies are the dicts of the
shared protocol codec (Kafka's field names in snake_case), so one handler serves every version the
codec declares. Malformed frames and unsupported APIs close the offending connection; errors that
concern one partition or topic are answered with that entry's error code. Every answered request is
counted in the ReplicaManager's BrokerMetrics (by API and version, its time, its response's error codes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from time import perf_counter
from typing import Any, Awaitable, Callable, Iterable

from broker.admin_manager import TopicAdmin, TopicError, describe_topic_configs
from broker.coordinator.coordinator_placement import GROUP_METADATA_TOPIC
from broker.coordinator.group_apis import GroupApis
from broker.coordinator.transaction_apis import TransactionApis
from broker.metadata import MetadataView, ProducerIdManager, ProducerIdUnavailable, metadata_response
from broker.replica_manager import STORAGE_ERRORS, FetchResult, PendingSync, ReplicaManager
from broker.security.credential_store import CredentialStore
from broker.security.scram_admin import alter_user_scram_credentials, describe_user_scram_credentials
from broker.topic_config_changes import ConfigOperation, OverridesChange, incremental_overrides, replaced_overrides
from broker.security import acl_requests
from broker.security.authorizer import AclAuthorizer
from broker.server.session import Session
from broker.server.socket_server import CloseConnection, Deferred
from pipeline.protocol.api_keys import ApiKey
from pipeline.records.batch import ATTRIBUTES, COMPRESSION_MASK, HEADER_SIZE, TRANSACTIONAL_FLAG
from pipeline.protocol.codec import (
    SUPPORTED_VERSIONS,
    ProtocolError,
    RequestHeader,
    decode_request,
    encode_response,
    read_request_header,
)
from pipeline.protocol.compression import ZSTD
from pipeline.protocol.errors import ErrorCode
from pipeline.protocol.messages import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_DYNAMIC_TOPIC,
    RESOURCE_TYPE_BROKER,
    RESOURCE_TYPE_BROKER_LOGGER,
    RESOURCE_TYPE_TOPIC,
)
from pipeline.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from pipeline.warning_limiter import WarningLimiter

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
ISOLATION_READ_COMMITTED = 1
# How long WriteTxnMarkers waits for the ISR to hold a marker (Kafka: the broker's request.timeout.ms).
TXN_MARKER_TIMEOUT_S = 30.0
# The hot paths count their responses' error codes where they set them (see ApiStats).
_COUNT_OWN_ERRORS = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})
# APIs whose awaitable answers only wait (Kafka's purgatory): cancelled when their client goes away. The others
# (a commit being written, a topic being created, a produce waiting for its replicas) run to their end.
_PURGATORY_APIS = frozenset({ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})


class KafkaApis:
    """The request handlers of one broker, dispatched by API key."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager, admin: TopicAdmin, metadata: MetadataView,
                 producer_ids: ProducerIdManager, auto_create_topics: bool, fetch_max_wait_cap_ms: int,
                 groups: GroupApis, transactions: TransactionApis | None = None) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.admin = admin
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.auto_create_topics = auto_create_topics
        self.fetch_max_wait_cap_ms = fetch_max_wait_cap_ms
        self.metrics = replica_manager.metrics
        self.groups = groups
        # Lines about what a client asked for, limited per client address (the socket server's, once it runs).
        self.client_warnings = WarningLimiter(log)
        self._peer = ""
        # The connection of the request being dispatched (its principal, listener and address).
        self.session: Session | None = None
        # authorizer.class.name: None serves every request, as a broker without an authorizer does.
        self.authorizer: AclAuthorizer | None = None
        self._api_key = -1  # the API being dispatched, for the denial counts (set only with an authorizer)
        groups.request_check = self.request_check
        groups.partition_count = self._partition_count
        # The SCRAM credentials (the broker sets them: its log dir's file, or ZooKeeper's).
        self.credentials = CredentialStore()
        self._handlers: dict[int, Callable[[RequestHeader, dict], Any]] = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.handle_create_acls,
            ApiKey.DELETE_ACLS: self.handle_delete_acls,
            ApiKey.SASL_HANDSHAKE: self.handle_sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.handle_sasl_authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter_user_scram_credentials,
            ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            **groups.handlers(),
        }
        if transactions is not None:
            transactions.request_check = self.request_check
            transactions.listener_name = self._listener_name
            self._handlers.update(transactions.handlers(self._handlers))
        self._api_stats = {key: self.metrics.api_stats(key, walk_responses=key not in _COUNT_OWN_ERRORS)
                           for key in self._handlers}
        self._produce_stats = self._api_stats[ApiKey.PRODUCE]
        self._fetch_stats = self._api_stats[ApiKey.FETCH]
        self._api_versions_body = {
            "error_code": ErrorCode.NONE,
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
                if key in self._handlers
            ],
            "throttle_time_ms": 0,
        }

    # -- dispatch -------------------------------------------------------------------------------

    def handle(self, frame: memoryview, session: Session) -> list | None | Deferred:
        """Answer one request frame of the connection ``session``; the socket server calls this for every frame in
        order."""
        started = perf_counter()
        try:
            header = read_request_header(frame)
        except ProtocolError as exc:
            raise CloseConnection(f"unreadable request header: {exc}", "malformed_request") from None
        handler = self._handlers.get(header.api_key)
        self.session = session
        self.groups.peer = self._peer = session.peer
        self.groups.listener_name = session.listener_name
        if self.authorizer is not None:
            self._api_key = header.api_key
        versions = SUPPORTED_VERSIONS.get(header.api_key)
        if header.api_key == ApiKey.API_VERSIONS and versions and header.api_version > versions[1]:
            # A client newer than us: answer in the v0 layout with our list so it can retry lower.
            body = dict(self._api_versions_body, error_code=ErrorCode.UNSUPPORTED_VERSION)
            return self._answer(header, 0, body, started)
        if handler is None or versions is None:
            raise CloseConnection(f"unknown API key {header.api_key} (client {header.client_id!r})", "unknown_api")
        if not versions[0] <= header.api_version <= versions[1]:
            raise CloseConnection(f"unsupported version {header.api_version} of {_api_name(header.api_key)} "
                                  f"(supported {versions[0]}-{versions[1]}, client {header.client_id!r})",
                                  "unsupported_version")
        try:
            request = decode_request(header, frame, header.size)
        except ProtocolError as exc:
            if header.api_key == ApiKey.API_VERSIONS:
                body = dict(self._api_versions_body, error_code=ErrorCode.INVALID_REQUEST)
                return self._answer(header, 0, body, started)
            raise CloseConnection(f"malformed {_api_name(header.api_key)} v{header.api_version} request "
                                  f"(client {header.client_id!r}): {exc}", "malformed_request") from None
        result = handler(header, request)
        if isinstance(result, dict):
            response = encode_response(header.api_key, header.api_version, header.correlation_id, result)
        elif result is None:
            response = None
        else:
            return Deferred(result, lambda body: self._answer(header, header.api_version, body, started),
                            parked=header.api_key in _PURGATORY_APIS)
        self._api_stats[header.api_key].completed(header.api_version, perf_counter() - started, result)
        return response

    def _listener_name(self) -> str | None:
        session = self.session
        return None if session is None else session.listener_name

    def _answer(self, header: RequestHeader, version: int, body: dict, started: float) -> list:
        """The encoded response, counted in the request metrics."""
        response = encode_response(header.api_key, version, header.correlation_id, body)
        self._api_stats[header.api_key].completed(header.api_version, perf_counter() - started, body)
        return response

    # -- authorization --------------------------------------------------------------------------

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME, *,
                  count: bool = True) -> bool:
        """Whether the connection of the request being dispatched may perform ``operation`` on the resource (True
        without an authorizer); a refusal is counted by API and logged, rate-limited, with the principal (unless
        ``count`` is false: a listing that leaves out what the principal may not see). Only valid before the
        handler's first await: the next request replaces the session (see ``request_check``)."""
        authorizer = self.authorizer
        if authorizer is None or authorizer.authorize(self.session, operation, resource_type, name):
            return True
        if count:
            self._denied(self.session, self._api_key, operation, resource_type, name)
        return False

    def _partition_count(self, topic: str) -> int | None:
        partitions = self.metadata.describe_topic(topic)
        return None if partitions is None else len(partitions)

    def request_check(self) -> Callable[..., bool]:
        """``authorize`` bound to the request being dispatched, for checks made after the handler awaited."""
        authorizer, session, api_key = self.authorizer, self.session, self._api_key
        if authorizer is None:
            return _allow_all

        def check(operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME,
                  count: bool = True) -> bool:
            if authorizer.authorize(session, operation, resource_type, name):
                return True
            if count:
                self._denied(session, api_key, operation, resource_type, name)
            return False
        return check

    def _denied(self, session: Session | None, api_key: int, operation: AclOperation, resource_type: ResourceType,
                name: str) -> None:
        api = _api_name(api_key)
        self.metrics.authorization_denied(api)
        principal = session.principal if session is not None else "?"
        peer = session.peer if session is not None else "?"
        self.client_warnings.warn(f"{principal}@{peer.rpartition(':')[0]}", "authorization_denied",
                                  "denied %s: %s on %s %r to %s from %s", api, operation.name,
                                  resource_type.name, name, principal, peer, level=logging.INFO, logger=log)

    def _authorized_topics(self, operation: AclOperation, names: Iterable[str]) -> set[str]:
        """The topics of ``names`` the request may ``operation`` (each checked once)."""
        return {name for name in set(names) if self.authorize(operation, ResourceType.TOPIC, name)}

    # -- ApiVersions, Metadata ------------------------------------------------------------------

    def handle_api_versions(self, header: RequestHeader, request: dict) -> dict:
        return self._api_versions_body

    def handle_metadata(self, header: RequestHeader, request: dict) -> dict:
        requested = request.get("topics")
        allow_create = request.get("allow_auto_topic_creation", True) and self.auto_create_topics
        view = self.metadata
        errors: dict[str, int] = {}
        if requested is None or (header.api_version == 0 and not requested):
            names = view.topic_names()
            if self.authorizer is not None:
                # Listing every topic shows only those the principal may describe, as Kafka does.
                names = [n for n in names if self.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n, count=False)]
        else:
            names = [t["name"] for t in requested]
            if self.authorizer is not None:
                for name in names:
                    if not self.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                        errors[name] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if allow_create:
            for name in names:
                if name not in errors and view.describe_topic(name) is None:
                    if self.authorizer is not None and not self._may_create(name):
                        errors[name] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    else:
                        errors[name] = self._auto_create(name)
        response = metadata_response(view, names, errors, self.session.listener_name if self.session else None)
        if self.authorizer is not None:
            self._add_authorizations(request, response, errors)
        return response

    def _add_authorizations(self, request: dict, response: dict, errors: dict[str, int]) -> None:
        """Refused topics without their partitions; the authorized operations a v8+ request asks for (Kafka's
        bit fields: bit N set when operation N is allowed)."""
        with_topic_operations = request.get("include_topic_authorized_operations", False)
        for entry in response["topics"]:
            if errors.get(entry["name"]) == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                entry.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partitions=[])
            elif with_topic_operations:
                entry["topic_authorized_operations"] = self._authorized_operations(
                    ResourceType.TOPIC, entry["name"], _TOPIC_OPERATIONS)
        if request.get("include_cluster_authorized_operations", False):
            response["cluster_authorized_operations"] = self._authorized_operations(
                ResourceType.CLUSTER, CLUSTER_NAME, _CLUSTER_OPERATIONS)

    def _authorized_operations(self, resource_type: ResourceType, name: str,
                               operations: tuple[AclOperation, ...]) -> int:
        return sum(1 << op for op in operations if self.authorize(op, resource_type, name, count=False))

    def _may_create(self, name: str) -> bool:
        """CREATE on the cluster, or on the topic (Kafka checks the cluster first)."""
        authorizer = self.authorizer
        if authorizer is not None and authorizer.authorize(self.session, AclOperation.CREATE, ResourceType.CLUSTER,
                                                            CLUSTER_NAME):
            return True
        return self.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)

    def _auto_create(self, name: str) -> int:
        """Create (or start creating) an unknown topic a Metadata request names; the error its entry
        gets if it is not there yet: LEADER_NOT_AVAILABLE while being created, as Kafka answers, or why not."""
        try:
            self.admin.auto_create(name)
        except TopicError as exc:
            if exc.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return ErrorCode.LEADER_NOT_AVAILABLE
            self.client_warnings.warn(self._peer.rpartition(":")[0], "invalid_topic_name",
                                      "not auto-creating topic %r for %s: %s", name, self._peer, exc,
                                      level=logging.INFO, logger=log)
            return exc.error_code
        return ErrorCode.LEADER_NOT_AVAILABLE

    # -- Produce --------------------------------------------------------------------------------

    def handle_produce(self, header: RequestHeader, request: dict) -> dict | None:
        acks = request["acks"]
        topic_data = request["topic_data"]
        if _has_transactional_batch(topic_data) and (error := self._transactional_produce_refusal(
                request.get("transactional_id"))):
            # Kafka refuses the whole request when a transactional batch comes without a transactional
            # id it authorizes.
            message = "a transactional batch needs a transactional id the principal may write"
        elif acks not in (0, 1, -1):
            error, message = ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}"
        else:
            error, message = None, None
        replica_manager = self.replica_manager
        append = replica_manager.append_records
        peer = self._peer
        syncs: list[PendingSync] | None = [] if acks else None
        replicated: dict[tuple[str, int], int] = {}
        responses = []
        failed: tuple[str, int, int, str | None] | None = None  # the first partition refused: (topic, index, code, why)
        authorizer = self.authorizer
        for topic in topic_data:
            name = topic["name"]
            results = []
            denied = authorizer is not None and not self.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)
            for part in topic["partition_data"]:
                records = part["records"]
                record_errors: tuple[tuple[int, str], ...] = ()
                if error is not None:
                    code, base_offset, log_start, err_msg = error, -1, -1, message
                elif denied:
                    code, base_offset, log_start, err_msg = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1,
                                                             f"not authorized to write to {name!r}")
                elif header.api_version < 7 and _compression_of(records) == ZSTD:
                    code, base_offset, log_start, err_msg = (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1, -1,
                                                             "Produce requests before v7 may not use zstd")
                else:
                    code, base_offset, log_start, err_msg, record_errors, last_offset = append(
                        name, part["index"], records, syncs, acks, peer)
                    if acks == -1 and not code and not replica_manager.is_replicated(name, part["index"], last_offset):
                        replicated[(name, part["index"])] = last_offset + 1
                if code:
                    failed = failed or (name, part["index"], code, err_msg)
                    self._produce_stats.count_error(code)
                results.append({"index": part["index"], "error_code": code, "base_offset": base_offset,
                                "log_append_time_ms": -1, "log_start_offset": log_start,
                                "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                                                  for i, m in record_errors],
                                "error_message": err_msg})
            responses.append({"name": name, "partition_responses": results})
        if acks == 0:
            if failed:
                # With acks=0 the only way to tell the producer is to drop the connection (Kafka does too).
                topic_name, index, code, why = failed
                raise CloseConnection(f"an acks=0 produce request failed: {ErrorCode(code).name} for "
                                      f"{topic_name!r} partition {index}" + (f" ({why})" if why else ""),
                                      "failed_acks0_produce")
            return None
        body = {"responses": responses, "throttle_time_ms": 0}
        if syncs or replicated:
            return self._respond_when_done(syncs or [], replicated, request["timeout_ms"], body)
        return body

    def _transactional_produce_refusal(self, transactional_id: str | None) -> int | None:
        """TRANSACTIONAL_ID_AUTHORIZATION_FAILED for transactional batches without a transactional id, or
        whose id the principal may not WRITE (with an authorizer); None when they may be appended."""
        if transactional_id is None or (self.authorizer is not None and not self.authorize(
                AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return None

    async def _respond_when_done(self, syncs: list[PendingSync], replicated: dict[tuple[str, int], int],
                                 timeout_ms: int, body: dict) -> dict:
        """The Produce response, once the fsyncs the appends asked for are done (log.flush.interval.messages)
        and, with acks=all, once the ISR has every appended batch (or the request's timeout passed)."""
        failed = await self.replica_manager.wait_synced(syncs) if syncs else {}
        if replicated:
            not_replicated = await self.replica_manager.wait_replicated(replicated, max(0, timeout_ms) / 1000)
            for key, code in not_replicated.items():
                failed.setdefault(key, code)
        for topic in body["responses"]:
            for result in topic["partition_responses"]:
                code = failed.get((topic["name"], result["index"]))
                if code is not None:
                    message = ("the log could not be synced" if code == ErrorCode.KAFKA_STORAGE_ERROR
                               else f"not replicated to the ISR: {ErrorCode(code).name}")
                    result.update(error_code=code, base_offset=-1, error_message=message)
                    self._produce_stats.count_error(code)
        return body

    # -- Fetch ----------------------------------------------------------------------------------

    def handle_fetch(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if self.authorizer is not None:
            request["denied"] = self._fetch_denied(request)
        results = self._read_fetch(request)
        total = sum(r.size for _, _, r in results)
        errors = any(r.error_code for _, _, r in results)
        max_wait_ms = min(request["max_wait_ms"], self.fetch_max_wait_cap_ms)
        if max_wait_ms <= 0 or total >= request["min_bytes"] or errors or not results:
            return self._fetch_response(request, results)
        return self._delayed_fetch(request, results, max_wait_ms)

    async def _delayed_fetch(self, request: dict, results: list, max_wait_ms: int) -> dict:
        deadline = time.monotonic() + max_wait_ms / 1000
        watched = [(topic, index) for topic, index, _ in results]
        follower = request.get("replica_id", -1) >= 0
        while True:
            for _, _, result in results:
                result.release()
            remaining = deadline - time.monotonic()
            woken = remaining > 0 and await self.replica_manager.wait_for_data(watched, remaining,
                                                                                follower=follower)
            results = self._read_fetch(request)
            total = sum(r.size for _, _, r in results)
            if not woken or total >= request["min_bytes"] or any(r.error_code for _, _, r in results):
                return self._fetch_response(request, results)

    def _fetch_denied(self, request: dict) -> set[str]:
        """The topics a Fetch may not read: all of them for a follower without CLUSTER_ACTION on the cluster,
        those without READ for a consumer."""
        names = [t["topic"] for t in request["topics"]]
        if request.get("replica_id", -1) >= 0:
            return set() if self.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) else set(names)
        return set(names) - self._authorized_topics(AclOperation.READ, names)

    def _read_fetch(self, request: dict) -> list[tuple[str, int, FetchResult]]:
        remaining = request.get("max_bytes", 0x7FFFFFFF)
        read = self.replica_manager.read
        replica_id = request.get("replica_id", -1)
        denied = request.get("denied")
        read_committed = replica_id < 0 and request.get("isolation_level") == ISOLATION_READ_COMMITTED
        results = []
        for topic in request["topics"]:
            name = topic["topic"]
            if denied and name in denied:
                results.extend((name, part["partition"], FetchResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                               for part in topic["partitions"])
                continue
            for part in topic["partitions"]:
                epoch = part.get("current_leader_epoch", -1)
                if remaining > 0:
                    limit = min(part["partition_max_bytes"], remaining)
                    result = read(name, part["partition"], part["fetch_offset"], limit,
                                  (remaining == request.get("max_bytes", 0x7FFFFFFF)), replica_id, epoch,
                                  read_committed)
                    remaining -= result.size
                else:
                    result = read(name, part["partition"], part["fetch_offset"], 0, False, replica_id, epoch,
                                  read_committed)
                    result.release()
                results.append((name, part["partition"], result))
        return results

    def _fetch_response(self, request: dict, results: list[tuple[str, int, FetchResult]]) -> dict:
        read_committed = request.get("isolation_level") == ISOLATION_READ_COMMITTED
        responses: list[dict] = []
        by_topic: dict[str, list] = {}
        for name, index, result in results:
            partitions = by_topic.get(name)
            if partitions is None:
                partitions = by_topic[name] = []
                responses.append({"topic": name, "partitions": partitions})
            if result.size:
                if result.stats is not None:
                    result.stats.bytes_out += result.size
            elif result.error_code:
                self._fetch_stats.count_error(result.error_code)
            aborted = result.aborted
            if aborted is None:
                aborted_transactions = None if not read_committed else []
            else:
                aborted_transactions = [{"producer_id": pid, "first_offset": first} for pid, first in aborted]
            partitions.append({
                "partition_index": index,
                "error_code": result.error_code,
                "high_watermark": result.high_watermark,
                "last_stable_offset": result.last_stable_offset,
                "log_start_offset": result.log_start_offset,
                "aborted_transactions": aborted_transactions,
                "preferred_read_replica": -1,
                "records": result.records,
            })
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}

    # -- ListOffsets ----------------------------------------------------------------------------

    def handle_list_offsets(self, header: RequestHeader, request: dict) -> dict:
        read_committed = request.get("isolation_level") == ISOLATION_READ_COMMITTED
        topics = []
        allowed = (None if self.authorizer is None
                   else self._authorized_topics(AclOperation.DESCRIBE, (t["name"] for t in request["topics"])))
        for topic in request["topics"]:
            name = topic["name"]
            partitions = []
            for part in topic["partitions"]:
                if allowed is not None and name not in allowed:
                    partitions.append({"partition_index": part["partition_index"],
                                       "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "timestamp": -1,
                                       "offset": -1, "leader_epoch": -1, "old_style_offsets": []})
                elif header.api_version == 0:
                    entry = self._offsets_before(name, part["partition_index"], part["timestamp"],
                                                 part["max_num_offsets"])
                else:
                    entry = self._list_offset(name, part["partition_index"], part["timestamp"],
                                              part.get("current_leader_epoch", -1), read_committed)
                partitions.append(entry)
            topics.append({"name": name, "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _offsets_before(self, topic: str, index: int, timestamp: int, max_num_offsets: int) -> dict:
        """ListOffsets v0: the paper's getOffsetsBefore, several offsets newest first, none above the high
        watermark."""
        entry = {"partition_index": index, "error_code": ErrorCode.NONE, "old_style_offsets": []}
        partition = self.replica_manager.get_partition(topic, index)
        if partition is None:
            entry["error_code"] = self.replica_manager.missing_partition_error(topic, index)
        elif timestamp < 0 and timestamp not in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP):
            entry["error_code"] = ErrorCode.INVALID_REQUEST
        else:
            offsets = partition.log.offsets_before(timestamp, max_num_offsets)
            high_watermark = partition.high_watermark
            if offsets and offsets[0] > high_watermark:
                # As Kafka answers consumers: nothing above the high watermark, which takes the newest place.
                offsets = [high_watermark] + [o for o in offsets if o < high_watermark][:max_num_offsets - 1]
            entry["old_style_offsets"] = offsets
        return entry

    def _list_offset(self, topic: str, index: int, timestamp: int, current_leader_epoch: int,
                     read_committed: bool = False) -> dict:
        """One partition's offset by timestamp; latest is the high watermark (what consumers may read), the
        last stable offset for read_committed, which also bounds the timestamp lookup."""
        entry = {"partition_index": index, "error_code": ErrorCode.NONE, "timestamp": -1, "offset": -1,
                 "leader_epoch": -1}
        partition, code = self.replica_manager.leader_partition(topic, index, current_leader_epoch)
        if partition is None:
            entry["error_code"] = code
            return entry
        log_ = partition.log
        entry["leader_epoch"] = partition.leader_epoch
        visible_end = log_.last_stable_offset if read_committed else partition.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            entry["offset"] = visible_end
        elif timestamp == EARLIEST_TIMESTAMP:
            entry["offset"] = log_.log_start_offset
        elif timestamp < 0:
            entry["error_code"] = ErrorCode.INVALID_REQUEST
        else:
            try:
                found = log_.offset_for_timestamp(timestamp)
            except STORAGE_ERRORS as exc:
                log.error("timestamp lookup in %s-%d failed: %s", topic, index, exc)
                entry["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                return entry
            if found is not None and found[0] < visible_end:
                entry["offset"], entry["timestamp"] = found
        return entry

    # -- OffsetForLeaderEpoch -------------------------------------------------------------------

    def handle_offset_for_leader_epoch(self, header: RequestHeader, request: dict) -> dict:
        """KIP-101: the end offset of the largest epoch at or below the one asked for, from the leader's
        leader-epoch cache; followers truncate to it and clients validate their positions with it."""
        topics = []
        allowed = None
        if self.authorizer is not None:
            names = [t["topic"] for t in request["topics"]]
            if request.get("replica_id", -2) >= 0:
                allowed = set(names) if self.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) else set()
            else:
                allowed = self._authorized_topics(AclOperation.DESCRIBE, names)
        for topic in request["topics"]:
            name = topic["topic"]
            results = []
            for part in topic["partitions"]:
                index = part["partition"]
                if allowed is not None and name not in allowed:
                    results.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "partition": index,
                                    "leader_epoch": -1, "end_offset": -1})
                    continue
                partition, code = self.replica_manager.leader_partition(name, index,
                                                                        part.get("current_leader_epoch", -1))
                epoch, end_offset = -1, -1
                if partition is not None:
                    try:
                        epoch, end_offset = partition.log.end_offset_for_epoch(part["leader_epoch"])
                    except STORAGE_ERRORS as exc:
                        log.error("epoch lookup in %s-%d failed: %s", name, index, exc)
                        code = ErrorCode.KAFKA_STORAGE_ERROR
                results.append({"error_code": code, "partition": index, "leader_epoch": epoch,
                                "end_offset": end_offset})
            topics.append({"topic": name, "partitions": results})
        return {"throttle_time_ms": 0, "topics": topics}

    # -- CreateTopics, DeleteTopics -------------------------------------------------------------

    @staticmethod
    def topic_to_create(topic: dict) -> tuple[str, int, int, dict[str, str]]:
        """(name, partitions, replication factor, configs) of one CreateTopics entry; TopicError if refused."""
        if topic.get("assignments"):
            raise TopicError(ErrorCode.INVALID_REQUEST, "manual replica assignments are not supported")
        configs = {c["name"]: c["value"] for c in topic.get("configs") or []}
        return topic["name"], topic["num_partitions"], topic["replication_factor"], configs

    @staticmethod
    def topic_result(name: str, error: TopicError | None = None) -> dict:
        """One topic's entry in a CreateTopics, DeleteTopics or CreatePartitions response."""
        if error is None:
            return {"name": name, "error_code": ErrorCode.NONE, "error_message": None}
        return {"name": name, "error_code": error.error_code, "error_message": str(error)}

    def handle_create_topics(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        may_create_any = self.authorizer is None or self.authorizer.authorize(
            self.session, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
        denied = set() if may_create_any else {
            t["name"] for t in request["topics"] if not self.authorize(AclOperation.CREATE, ResourceType.TOPIC, t["name"])}
        return self._create_topics(request, denied)

    async def _create_topics(self, request: dict, denied: set[str]) -> dict:
        timeout_ms = request.get("timeout_ms", 30000)
        validate_only = request.get("validate_only", False)

        async def create(topic: dict) -> dict:
            if topic["name"] in denied:
                return self.topic_result(topic["name"], _not_authorized("create", topic["name"]))
            try:
                await self.admin.create_topic(*self.topic_to_create(topic), validate_only=validate_only,
                                              timeout_ms=timeout_ms)
            except TopicError as exc:
                return self.topic_result(topic["name"], exc)
            return self.topic_result(topic["name"])
        results = await asyncio.gather(*(create(t) for t in request["topics"]))
        return {"throttle_time_ms": 0, "topics": list(results)}

    def handle_delete_topics(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        names = request["topic_names"]
        allowed = set(names) if self.authorizer is None else self._authorized_topics(AclOperation.DELETE, names)
        return self._delete_topics(request, allowed)

    async def _delete_topics(self, request: dict, allowed: set[str]) -> dict:
        timeout_ms = request.get("timeout_ms", 30000)

        async def delete(name: str) -> dict:
            if name not in allowed:
                return self.topic_result(name, _not_authorized("delete", name))
            try:
                await self.admin.delete_topic(name, timeout_ms)
            except TopicError as exc:
                return self.topic_result(name, exc)
            return self.topic_result(name)
        results = await asyncio.gather(*(delete(n) for n in request["topic_names"]))
        return {"throttle_time_ms": 0, "responses": list(results)}

    # -- CreatePartitions ------------------------------------------------------------------------

    def handle_create_partitions(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        names = [t["name"] for t in request["topics"]]
        allowed = set(names) if self.authorizer is None else self._authorized_topics(AclOperation.ALTER, names)
        return self._create_partitions(request, allowed)

    async def _create_partitions(self, request: dict, allowed: set[str]) -> dict:
        timeout_ms = request.get("timeout_ms", 30000)
        validate_only = request.get("validate_only", False)
        names = [t["name"] for t in request["topics"]]
        duplicates = {n for n in names if names.count(n) > 1}

        async def grow(topic: dict) -> dict:
            name = topic["name"]
            if name not in allowed:
                return self.topic_result(name, _not_authorized("alter", name))
            if name in duplicates:
                return self.topic_result(name, TopicError(ErrorCode.INVALID_REQUEST, "duplicate topic in request"))
            assignments = topic.get("assignments")
            try:
                await self.admin.create_partitions(
                    name, topic["count"], None if assignments is None else [a["broker_ids"] for a in assignments],
                    validate_only=validate_only, timeout_ms=timeout_ms)
            except TopicError as exc:
                return self.topic_result(name, exc)
            return self.topic_result(name)
        results = await asyncio.gather(*(grow(t) for t in request["topics"]))
        return {"throttle_time_ms": 0, "results": list(results)}

    # -- DescribeConfigs -------------------------------------------------------------------------

    def handle_describe_configs(self, header: RequestHeader, request: dict) -> dict:
        """Topic resources: every topic config with its value in effect, the topic's overrides marked as
        DYNAMIC_TOPIC_CONFIG and the rest as the broker's defaults. Other resources are refused one by one."""
        results = []
        for resource in request["resources"]:
            name, kind = resource["resource_name"], resource["resource_type"]
            result = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": kind,
                      "resource_name": name, "configs": []}
            refusal = self._config_refusal(AclOperation.DESCRIBE_CONFIGS, kind, name)
            overrides = self.metadata.topic_configs(name) if kind == RESOURCE_TYPE_TOPIC and not refusal else None
            if refusal:
                result.update(error_code=refusal.error_code, error_message=str(refusal))
            elif kind != RESOURCE_TYPE_TOPIC:
                result.update(error_code=ErrorCode.INVALID_REQUEST,
                              error_message=f"only topic configs are described (resource type {kind})")
            elif overrides is None:
                result.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              error_message=f"topic {name!r} does not exist")
            else:
                entries = describe_topic_configs(self.admin.default_log_config, name, overrides,
                                                 resource.get("configuration_keys"))
                result["configs"] = [{
                    "name": e.name, "value": e.value, "read_only": False, "is_default": not e.overridden,
                    "config_source": CONFIG_SOURCE_DYNAMIC_TOPIC if e.overridden else CONFIG_SOURCE_DEFAULT,
                    "is_sensitive": False, "synonyms": [], "config_type": e.config_type, "documentation": None} for e in entries]
            results.append(result)
        return {"throttle_time_ms": 0, "results": results}

    def _config_refusal(self, operation: AclOperation, kind: int, name: str) -> TopicError | None:
        """Why the request may not describe or alter the configs of a resource (None: it may): topics are
        authorized one by one, brokers and their loggers on the cluster."""
        if self.authorizer is None:
            return None
        if kind in (RESOURCE_TYPE_BROKER, RESOURCE_TYPE_BROKER_LOGGER):
            if self.authorize(operation, ResourceType.CLUSTER):
                return None
            return TopicError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"not authorized to {operation.name} the cluster")
        if kind == RESOURCE_TYPE_TOPIC and not self.authorize(operation, ResourceType.TOPIC, name):
            return TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to {operation.name} {name!r}")
        return None

    # -- AlterConfigs, IncrementalAlterConfigs ---------------------------------------------------

    def handle_alter_configs(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        """Each topic resource's overrides become the configs it lists (the others return to the defaults)."""
        default = self.admin.default_log_config
        return self._alter_configs(request, self._config_refusals(request), lambda configs: replaced_overrides(
            default, [(c["name"], c["value"]) for c in configs]))

    def handle_incremental_alter_configs(self, header: RequestHeader, request: dict) -> Awaitable[dict]:
        """Each topic resource's configs are set, deleted, appended to or subtracted from one by one."""
        default = self.admin.default_log_config
        return self._alter_configs(request, self._config_refusals(request), lambda configs: incremental_overrides(
            default, [ConfigOperation(c["name"], c["config_operation"], c["value"]) for c in configs]))

    def _config_refusals(self, request: dict) -> list[TopicError | None]:
        """Per resource of an AlterConfigs or IncrementalAlterConfigs request, why it may not be altered."""
        return [self._config_refusal(AclOperation.ALTER_CONFIGS, r["resource_type"], r["resource_name"])
                for r in request["resources"]]

    async def _alter_configs(self, request: dict, refusals: list[TopicError | None],
                             change_of: Callable[[list[dict]], OverridesChange]) -> dict:
        validate_only = request.get("validate_only", False)
        resources = request["resources"]
        named = Counter((r["resource_type"], r["resource_name"]) for r in resources)

        async def alter(resource: dict, refusal: TopicError | None) -> dict:
            name, kind = resource["resource_name"], resource["resource_type"]
            result = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": kind,
                      "resource_name": name}
            try:
                if refusal:
                    raise refusal
                if kind != RESOURCE_TYPE_TOPIC:
                    raise TopicError(ErrorCode.INVALID_REQUEST, f"only topic configs are altered (resource type {kind})")
                if named[(kind, name)] > 1:
                    raise TopicError(ErrorCode.INVALID_REQUEST, f"topic {name!r} is named twice in one request")
                await self.admin.alter_topic_configs(name, change_of(resource["configs"]), validate_only)
            except TopicError as exc:
                result.update(error_code=exc.error_code, error_message=str(exc))
            return result
        results = await asyncio.gather(*(alter(r, refusal) for r, refusal in zip(resources, refusals)))
        return {"throttle_time_ms": 0, "responses": list(results)}

    # -- SaslHandshake, SaslAuthenticate, SCRAM credentials ------------------------------------

    def handle_sasl_handshake(self, header: RequestHeader, request: dict) -> dict:
        # The SASL exchange runs in the network layer before any request reaches here; this is a PLAINTEXT or
        # SSL listener, or an authenticated connection without reauthentication: Kafka's answer.
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}

    def handle_sasl_authenticate(self, header: RequestHeader, request: dict) -> dict:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
                "error_message": "SaslAuthenticate request received after successful authentication"}

    def handle_describe_user_scram_credentials(self, header: RequestHeader, request: dict) -> dict:
        if not self.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "not authorized to describe users", "results": []}
        return describe_user_scram_credentials(self.credentials, request)

    def handle_alter_user_scram_credentials(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if not self.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
            users = dict.fromkeys(e["name"] for e in [*request["deletions"], *request["upsertions"]])
            return {"throttle_time_ms": 0, "results": [
                {"user": user, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 "error_message": "not authorized to alter users"} for user in users]}
        return alter_user_scram_credentials(self.credentials, request)

    # -- InitProducerId -------------------------------------------------------------------------

    def handle_init_producer_id(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        if request.get("transactional_id") is not None:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        authorizer = self.authorizer
        if authorizer is not None and not (
                authorizer.authorize(self.session, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
                or authorizer.authorize_any(self.session, AclOperation.WRITE, ResourceType.TOPIC)):
            # Kafka 2.8+ (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any topic.
            self._denied(self.session, self._api_key, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
            return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        producer_id = self.producer_ids.next_producer_id()
        if isinstance(producer_id, int):
            return self._producer_id_response(producer_id)
        return self._producer_id_later(producer_id)

    async def _producer_id_later(self, pending: Awaitable[int]) -> dict:
        try:
            return self._producer_id_response(await pending)
        except ProducerIdUnavailable as exc:
            log.warning("no producer id to hand out: %s", exc)
            return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "producer_id": -1, "producer_epoch": -1}

    @staticmethod
    def _producer_id_response(producer_id: int) -> dict:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}

    # -- WriteTxnMarkers -------------------------------------------------------------------------

    def handle_write_txn_markers(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        """A transaction coordinator's markers (CLUSTER_ACTION on the cluster): see write_txn_markers."""
        markers = request["markers"]
        if not self.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return {"markers": [{"producer_id": m["producer_id"], "topics": [
                {"name": t["name"], "partitions": [
                    {"partition_index": i, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                    for i in t["partition_indexes"]]} for t in m["topics"]]} for m in markers]}
        return self._write_txn_markers_response(markers)

    async def _write_txn_markers_response(self, markers: list[dict]) -> dict:
        return {"markers": await self.write_txn_markers(markers)}

    async def write_txn_markers(self, markers: list[dict], timeout_s: float = TXN_MARKER_TIMEOUT_S) -> list[dict]:
        """Write transaction markers as WriteTxnMarkers does; the coordinator calls this in process for the
        partitions this broker leads. ``markers`` are the request's entries ({producer_id, producer_epoch,
        transaction_result, coordinator_epoch, topics: [{name, partition_indexes}]}); the result is the
        response's (per marker {producer_id, topics: [{name, partitions: [{partition_index, error_code}]}]}).

        Each data partition gets its control batch on the leader, answered once the ISR has it; entries of
        ``__consumer_offsets`` make or drop the producer's pending transactional offset commits of that
        offsets partition (GroupApis.complete_txn_offsets)."""
        data: list[tuple[str, int, int, int, bool, int]] = []
        offsets: list[Awaitable[int]] = []
        complete_txn_offsets = getattr(self.groups, "complete_txn_offsets", None)
        for marker in markers:
            pid, epoch, committed = marker["producer_id"], marker["producer_epoch"], marker["transaction_result"]
            for topic in marker["topics"]:
                for index in topic["partition_indexes"]:
                    if topic["name"] != GROUP_METADATA_TOPIC:
                        data.append((topic["name"], index, pid, epoch, committed, marker["coordinator_epoch"]))
                    elif complete_txn_offsets is not None:
                        offsets.append(complete_txn_offsets(pid, epoch, committed, index))
        data_codes, offset_codes = await asyncio.gather(
            self.replica_manager.write_txn_markers(data, timeout_s), asyncio.gather(*offsets))
        data_codes, offset_codes = iter(data_codes), iter(offset_codes)
        results = []
        for marker in markers:
            topics = []
            for topic in marker["topics"]:
                if topic["name"] != GROUP_METADATA_TOPIC:
                    codes = data_codes
                elif complete_txn_offsets is not None:
                    codes = offset_codes
                else:
                    codes = iter(lambda: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                topics.append({"name": topic["name"], "partitions": [
                    {"partition_index": index, "error_code": next(codes)} for index in topic["partition_indexes"]]})
            results.append({"producer_id": marker["producer_id"], "topics": topics})
        return results

    # -- DescribeAcls, CreateAcls, DeleteAcls ----------------------------------------------------

    def handle_describe_acls(self, header: RequestHeader, request: dict) -> dict:
        if self.authorizer is None:
            return acl_requests.describe_error(ErrorCode.SECURITY_DISABLED, "no authorizer is configured")
        if not self.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return acl_requests.describe_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized to describe ACLs")
        return acl_requests.describe_acls(self.authorizer, request)

    def handle_create_acls(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        return self._change_acls(request, acl_requests.create_acls, acl_requests.create_error)

    def handle_delete_acls(self, header: RequestHeader, request: dict) -> dict | Awaitable[dict]:
        return self._change_acls(request, acl_requests.delete_acls, acl_requests.delete_error)

    def _change_acls(self, request: dict, change: Callable[[AclAuthorizer, dict], Awaitable[dict]],
                     refused: Callable[[dict, int, str], dict]) -> dict | Awaitable[dict]:
        """CreateAcls and DeleteAcls: ALTER on the cluster."""
        if self.authorizer is None:
            return refused(request, ErrorCode.SECURITY_DISABLED, "no authorizer is configured")
        if not self.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
            return refused(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized to alter ACLs")
        return change(self.authorizer, request)


#: The operations a Metadata response reports as authorized on a topic and on the cluster (Kafka's lists).
_TOPIC_OPERATIONS = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
                     AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)
_CLUSTER_OPERATIONS = (AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
                       AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE)


def _allow_all(operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME,
               count: bool = True) -> bool:
    return True


def _not_authorized(action: str, topic: str) -> TopicError:
    return TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to {action} topic {topic!r}")


def _compression_of(records: memoryview | bytes | None) -> int:
    """The codec bits of the first batch in a partition's records (0 when too short to tell)."""
    if records is None or len(records) < HEADER_SIZE:
        return 0
    return records[ATTRIBUTES + 1] & COMPRESSION_MASK


def _has_transactional_batch(topic_data: list[dict]) -> bool:
    """Whether any partition's records start with a transactional batch (Kafka's hasTransactionalRecords)."""
    for topic in topic_data:
        for part in topic["partition_data"]:
            records = part["records"]
            if records is not None and len(records) >= HEADER_SIZE and records[ATTRIBUTES + 1] & TRANSACTIONAL_FLAG:
                return True
    return False


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"

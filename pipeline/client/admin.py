"""AdminClient: create, grow, delete, list and describe topics, describe and alter their configs, look up offsets,
list, add and remove ACLs, and (through pipeline.client.group_admin) list, describe, delete and commit offsets for
broker-coordinated groups, (through pipeline.client.scram_admin) describe and alter users' SCRAM credentials, and
(through pipeline.client.transaction_admin) list and describe transactions, on top of a Cluster.

Requests go to any broker for now (a standalone broker is its own controller); once brokers form a
cluster, CreateTopics, CreatePartitions and DeleteTopics go to the controller named in the Metadata response. A broker's
refusal surfaces as KafkaProtocolError carrying its error code and message (TOPIC_ALREADY_EXISTS,
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from pipeline.client.cluster import Cluster, PartitionInfo, StaticBrokerList
from pipeline.client.connection import BrokerConnection
from pipeline.client.errors import KafkaConnectionError, UnknownTopicError
from pipeline.client.group_admin import GroupCalls
from pipeline.client.scram_admin import ScramCredentialCalls
from pipeline.client.transaction_admin import TransactionCalls
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode, KafkaProtocolError
from pipeline.security.acl import (AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   PatternType, ResourcePattern, ResourceType)
from pipeline.security.client_settings import PLAINTEXT_SECURITY, ClientSecurity
from pipeline.protocol.messages import (CONFIG_OP_DELETE, CONFIG_OP_SET, CONFIG_SOURCE_DYNAMIC_TOPIC,
                                        RESOURCE_TYPE_TOPIC)

#: ListOffsets timestamps with a special meaning (Kafka's ListOffsetsRequest.LATEST_TIMESTAMP / EARLIEST_TIMESTAMP).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True)
class TopicDescription:
    """A topic's layout as Metadata reports it: its partitions with leader, replicas and in-sync replicas."""

    name: str
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


class AdminClient(GroupCalls, ScramCredentialCalls, TransactionCalls):
    """Topic and group administration and offset look-ups for one cluster (Kafka's AdminClient, the calls we need).

    Give it a Cluster to share one with other clients, or a bootstrap string (``host:port,...``) to have
    it own one; ``close()`` closes the cluster only when it owns it (or ``close_cluster=True``). Thread-safe, as
    Kafka's: threads calling it at once take turns on each request (the Cluster's pooled connections carry one
    request and its answer at a time).
    """

    def __init__(self, cluster: Cluster | str, *, client_id: str = "pipeline-admin", timeout_s: float = 30.0,
                 close_cluster: bool = False, security: ClientSecurity = PLAINTEXT_SECURITY) -> None:
        if isinstance(cluster, str):
            self.cluster = Cluster(StaticBrokerList(cluster), client_id=client_id, timeout_s=timeout_s,
                                   security=security)
            self._owns_cluster = True
        else:
            self.cluster = cluster
            self._owns_cluster = close_cluster
        self.timeout_s = timeout_s

    # -- topics ----------------------------------------------------------------------------------

    def create_topics(self, names: str | Iterable[str], partitions: int = -1, replication_factor: int = -1,
                      configs: Mapping[str, str] | None = None, *, validate_only: bool = False) -> None:
        """Create each topic of ``names`` with ``partitions`` partitions and ``replication_factor`` replicas (-1:
        the broker's num.partitions and default.replication.factor, as Kafka's AdminClient leaves them unset).

        Raises KafkaProtocolError for the first topic the broker refused (the others were still created).
        """
        topic_names = [names] if isinstance(names, str) else list(names)
        config_entries = [{"name": k, "value": v} for k, v in (configs or {}).items()]
        body = {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                        "assignments": [], "configs": config_entries} for name in topic_names],
            "timeout_ms": int(self.timeout_s * 1000),
            "validate_only": validate_only,
        }
        response = self._admin_request(ApiKey.CREATE_TOPICS, body)
        self._raise_first_error(response["topics"], "create")
        if not validate_only:
            self.cluster.refresh(topic_names)

    def create_partitions(self, topics: str | Mapping[str, int], new_total: int | None = None, *,
                          validate_only: bool = False) -> None:
        """Grow a topic to ``new_total`` partitions, or each topic of a ``{topic: new total}`` mapping
        (Kafka's CreatePartitions; the broker places the new partitions). Partitions are only ever added.

        Raises KafkaProtocolError for the first topic the broker refused (INVALID_PARTITIONS when the new
        total is not larger; the others were still grown), UnknownTopicError for a missing one.
        """
        if isinstance(topics, str):
            if new_total is None:
                raise TypeError("create_partitions(topic, new_total) needs the new total")
            totals = {topics: new_total}
        else:
            if new_total is not None:
                raise TypeError("create_partitions(mapping) takes the totals from the mapping")
            totals = dict(topics)
        body = {
            "topics": [{"name": name, "count": total, "assignments": None} for name, total in totals.items()],
            "timeout_ms": int(self.timeout_s * 1000),
            "validate_only": validate_only,
        }
        response = self._admin_request(ApiKey.CREATE_PARTITIONS, body)
        self._raise_first_error(response["results"], "grow")
        if not validate_only:
            self.cluster.refresh(list(totals))

    def delete_topics(self, names: str | Iterable[str]) -> None:
        """Delete each topic of ``names``; KafkaProtocolError for the first one the broker refused."""
        topic_names = [names] if isinstance(names, str) else list(names)
        body = {"topic_names": topic_names, "timeout_ms": int(self.timeout_s * 1000)}
        response = self._admin_request(ApiKey.DELETE_TOPICS, body)
        self._raise_first_error(response["responses"], "delete")
        self.cluster.refresh([])

    def list_topics(self) -> list[str]:
        """The names of every topic of the cluster, sorted."""
        return sorted(self.cluster.topics())

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Describe ``names`` (None: every topic), sorted by name; UnknownTopicError for a missing one."""
        if names is None:
            topics = self.cluster.topics()
            wanted = sorted(topics)
        else:
            wanted = list(names)
            self.cluster.refresh(wanted)
            topics = {name: self.cluster.topic(name, refresh=False) for name in wanted}
        described = []
        for name in wanted:
            info = topics[name]
            if info.error_code and not info.partitions:
                raise KafkaProtocolError(info.error_code, f"topic {name!r} is not available")
            described.append(TopicDescription(name, tuple(info.partitions[p] for p in sorted(info.partitions))))
        return described

    def describe_configs(self, topic: str, *, overrides_only: bool = False) -> dict[str, str]:
        """The configs of ``topic`` with the values in effect (``overrides_only``: only those the topic sets
        itself, as they would be given to create_topics); UnknownTopicError for a missing topic."""
        body = {"resources": [{"resource_type": RESOURCE_TYPE_TOPIC, "resource_name": topic, "configuration_keys": None}]}
        result = self._request(self.cluster.any_connection(), ApiKey.DESCRIBE_CONFIGS, body)["results"][0]
        self._raise_first_error([{**result, "name": topic}], "describe the configs of")
        return {c["name"]: c["value"] for c in result["configs"]
                if not overrides_only or c.get("config_source", -1) == CONFIG_SOURCE_DYNAMIC_TOPIC
                or (c.get("config_source", -1) == -1 and not c.get("is_default", False))}

    def alter_configs(self, topic: str, set_configs: Mapping[str, str] | None = None, delete: Iterable[str] = (), *,
                      validate_only: bool = False) -> None:
        """Change the config overrides of ``topic`` with IncrementalAlterConfigs: set ``set_configs``, drop the
        overrides named in ``delete`` (back to the broker's default), leave the others; every broker hosting the
        topic applies the result to its logs. KafkaProtocolError(INVALID_CONFIG) for a value the broker refuses,
        UnknownTopicError for a missing topic."""
        configs = [{"name": name, "config_operation": CONFIG_OP_SET, "value": str(value)}
                   for name, value in (set_configs or {}).items()]
        configs += [{"name": name, "config_operation": CONFIG_OP_DELETE, "value": None} for name in delete]
        body = {"resources": [{"resource_type": RESOURCE_TYPE_TOPIC, "resource_name": topic, "configs": configs}],
                "validate_only": validate_only}
        result = self._admin_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body)["responses"][0]
        self._raise_first_error([{**result, "name": topic}], "alter the configs of")

    # -- offsets ---------------------------------------------------------------------------------

    def list_offsets(self, topic: str, partitions: Iterable[int] | None = None,
                     timestamp: int = LATEST_TIMESTAMP, isolation_level: int = 0) -> dict[int, int | None]:
        """For each partition, the offset for ``timestamp`` (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP or ms).

        For a time in ms: the earliest offset whose timestamp is at or after it, None when no message is
        that recent. Each partition is asked of its leader, one request per leader. ``isolation_level`` 1
        (read_committed): LATEST is the last stable offset, where a read_committed reader ends.
        """
        known = self.cluster.partitions_for(topic)
        wanted = known if partitions is None else list(partitions)
        for partition in wanted:
            if partition not in known:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"topic {topic!r} has no partition {partition} (it has {len(known)})")
        by_leader: dict[int, list[int]] = {}
        for partition in wanted:
            by_leader.setdefault(self.cluster.leader(topic, partition), []).append(partition)
        offsets: dict[int, int | None] = {}
        for partitions_of_leader in by_leader.values():
            connection = self.cluster.leader_connection(topic, partitions_of_leader[0])
            body = {"replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp,
                         "max_num_offsets": 1} for p in partitions_of_leader]}],
                    "timeout_ms": int(self.timeout_s * 1000)}
            response = self._request(connection, ApiKey.LIST_OFFSETS, body)
            for topic_entry in response["topics"]:
                for entry in topic_entry["partitions"]:
                    if entry["error_code"]:
                        raise KafkaProtocolError(entry["error_code"],
                                                 f"ListOffsets for {topic}-{entry['partition_index']} failed")
                    offset = entry.get("offset", -1)
                    if offset is None or offset < 0:
                        old_style = entry.get("old_style_offsets") or []
                        offset = old_style[0] if old_style else -1
                    offsets[entry["partition_index"]] = offset if offset >= 0 else None
        return {p: offsets[p] for p in sorted(wanted)}

    # -- ACLs ------------------------------------------------------------------------------------

    def describe_acls(self, selector: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``selector`` matches (DescribeAcls); KafkaProtocolError(SECURITY_DISABLED) when the cluster has
        no authorizer, CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster."""
        response = self._request(self.cluster.any_connection(), ApiKey.DESCRIBE_ACLS, _filter_fields(selector))
        if response["error_code"]:
            raise KafkaProtocolError(response["error_code"], response.get("error_message") or "cannot describe ACLs")
        return [_binding(r, a) for r in response["resources"] for a in r["acls"]]

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Add ``bindings`` (CreateAcls); KafkaProtocolError for the first one the broker refused (the others were
        still added)."""
        creations = [{"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                      "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
                      "host": b.entry.host, "operation": int(b.entry.operation),
                      "permission_type": int(b.entry.permission_type)} for b in bindings]
        if not creations:
            return
        response = self._request(self.cluster.any_connection(), ApiKey.CREATE_ACLS, {"creations": creations})
        for result in response["results"]:
            if result["error_code"]:
                raise KafkaProtocolError(result["error_code"], result.get("error_message") or "cannot create ACLs")

    def delete_acls(self, selectors: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Remove every ACL the ``selectors`` match (DeleteAcls); the ACLs removed."""
        filters = [_filter_fields(s) for s in selectors]
        if not filters:
            return []
        response = self._request(self.cluster.any_connection(), ApiKey.DELETE_ACLS, {"filters": filters})
        deleted = []
        for result in response["filter_results"]:
            if result["error_code"]:
                raise KafkaProtocolError(result["error_code"], result.get("error_message") or "cannot delete ACLs")
            deleted += [_binding(m, m) for m in result["matching_acls"]]
        return deleted

    # -- plumbing --------------------------------------------------------------------------------

    def _admin_request(self, api_key: int, body: dict) -> dict:
        controller = self.cluster.controller_id
        if controller < 0:
            self.cluster.brokers()
            controller = self.cluster.controller_id
        try:
            connection = self.cluster.connection(controller) if controller >= 0 else self.cluster.any_connection()
        except KafkaConnectionError:
            connection = self.cluster.any_connection()
        return self._request(connection, api_key, body)

    def _request(self, connection: BrokerConnection, api_key: int, body: dict) -> dict:
        try:
            return connection.request(api_key, body)
        except KafkaConnectionError:
            self.cluster.invalidate(connection.node_id)
            raise

    @staticmethod
    def _raise_first_error(results: list[dict], action: str) -> None:
        for result in results:
            code = result["error_code"]
            if code == ErrorCode.NONE:
                continue
            message = result.get("error_message") or f"cannot {action} topic {result['name']!r}"
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicError(result["name"])
            raise KafkaProtocolError(code, message)

    def close(self) -> None:
        if self._owns_cluster:
            self.cluster.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _binding(resource: dict, entry: dict) -> AclBinding:
    """An ACL from a response's resource fields and entry fields."""
    return AclBinding(ResourcePattern(ResourceType(resource["resource_type"]), resource["resource_name"],
                                      PatternType(resource.get("pattern_type", PatternType.LITERAL))),
                      AccessControlEntry(entry["principal"], entry["host"], AclOperation(entry["operation"]),
                                         AclPermissionType(entry["permission_type"])))


def _filter_fields(selector: AclBindingFilter) -> dict:
    """An ACL filter as DescribeAcls and DeleteAcls carry it."""
    pattern, entry = selector.pattern, selector.entry
    return {"resource_type_filter": int(pattern.resource_type), "resource_name_filter": pattern.name,
            "pattern_type_filter": int(pattern.pattern_type), "principal_filter": entry.principal,
            "host_filter": entry.host, "operation": int(entry.operation), "permission_type": int(entry.permission_type)}

"""The ZooKeeper layout of a cluster (Kafka's own, as of 0.8-2.x), with the JSON of every znode.

Every path below is relative to the cluster's chroot (``zookeeper.connect=host:port/dc1``). Brokers,
the controller and clients read and write znodes only through these functions, so the layout is
written down once:

    /brokers/ids/<id>                          ephemeral   broker registration
    /brokers/topics/<topic>                    persistent  {"partitions": {"0": [replica ids], ...}}
    /brokers/topics/<topic>/partitions/<p>/state         {"leader", "leader_epoch", "isr", ...}
    /controller                                ephemeral   {"brokerid": id}
    /controller_epoch                          persistent  the controller generation
    /config/topics/<topic>                     persistent  {"config": {topic-level overrides}}
    /config/users/<user>                       persistent  {"config": {"SCRAM-SHA-512": "salt=..,stored_key=..,.."}}
    /config/changes/config_change_<n>          persistent  {"version": 2, "entity_path": "users/<user>"}
    /admin/create_topics/<topic>               persistent  a creation request for the controller
    /admin/delete_topics/<topic>               persistent  a deletion request for the controller
    /admin/preferred_replica_election          persistent  {"partitions": [{"topic", "partition"}]} to elect
    /admin/reassign_partitions                 persistent  {"partitions": [{"topic", "partition", "replicas"}]}
    /admin/controlled_shutdown/<id>            ephemeral   a broker's controlled shutdown; answer {"remaining"}
    /isr_change_notification/isr_change_<n>    persistent  {"partitions": [...]} whose ISR a leader changed
    /cluster/id                                persistent  {"id": cluster id}
    /latest_producer_id_block                  persistent  the last producer-id block handed out
    /consumers/<group>/ids/<consumer id>       ephemeral   {"subscription": {topic: streams}, "pattern"}
    /consumers/<group>/owners/<topic>/<p>      ephemeral   owning consumer stream id
    /consumers/<group>/offsets/<topic>/<p>     persistent  next offset to consume (decimal text, or JSON
                                                           with metadata: see offset_value)
    /consumers/<group>/metadata                persistent  a broker-coordinated group's state (GroupMetadataValue)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN_CREATE_TOPICS = "/admin/create_topics"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ADMIN_PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ADMIN_REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ADMIN_CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"

# Paths that exist in every cluster; brokers create them at start-up.
PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, CONFIG_TOPICS, ADMIN_CREATE_TOPICS, ADMIN_DELETE_TOPICS, CONSUMERS,
                    ISR_CHANGE_NOTIFICATION, ADMIN_CONTROLLED_SHUTDOWN)


def now_ms() -> int:
    return int(time.time() * 1000)


def encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes | None) -> dict[str, Any]:
    if not data:
        return {}
    return json.loads(data.decode())


# -- brokers -------------------------------------------------------------------------------------

def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def broker_registration(host: str, port: int, endpoints: list[tuple[str, str, str, int]] | None = None) -> bytes:
    """A broker's /brokers/ids/<id>: ``host``/``port`` its inter-broker endpoint, ``endpoints`` every advertised
    (listener name, security protocol, host, port) as Kafka writes them (default: one PLAINTEXT listener)."""
    endpoints = endpoints or [("PLAINTEXT", "PLAINTEXT", host, port)]
    return encode({"version": 4, "host": host, "port": port, "jmx_port": -1, "timestamp": str(now_ms()),
                   "endpoints": [f"{name}://{_bracketed(h)}:{p}" for name, _, h, p in endpoints],
                   "listener_security_protocol_map": {name: protocol for name, protocol, _, _ in endpoints}})


def registration_endpoints(registration: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Listener name -> (host, port) of a decoded broker registration (Kafka's "endpoints"; an old registration's
    host and port as PLAINTEXT)."""
    found: dict[str, tuple[str, int]] = {}
    for entry in registration.get("endpoints") or ():
        name, sep, address = str(entry).partition("://")
        host, _, port = address.rpartition(":")
        if sep and port.isdigit():
            found[name.upper()] = (host.strip("[]"), int(port))
    if not found and registration.get("host") is not None:
        found["PLAINTEXT"] = (registration["host"], int(registration["port"]))
    return found


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def controller_data(broker_id: int) -> bytes:
    return encode({"version": 1, "brokerid": broker_id, "timestamp": str(now_ms())})


# -- topics and partitions -----------------------------------------------------------------------

def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_assignment(replicas: dict[int, list[int]], topic_id: str | None = None) -> bytes:
    """A topic's replica lists, and its id: a new id for every incarnation of a topic name, so a broker can
    tell an old log of a deleted topic from the partition of a topic created again under that name."""
    value: dict[str, Any] = {"version": 2 if topic_id else 1,
                             "partitions": {str(p): list(r) for p, r in sorted(replicas.items())}}
    if topic_id:
        value["topic_id"] = topic_id
    return encode(value)


def parse_topic_id(data: bytes) -> str | None:
    return decode(data).get("topic_id")


def parse_topic_assignment(data: bytes) -> dict[int, list[int]]:
    return {int(p): list(r) for p, r in decode(data).get("partitions", {}).items()}


def partition_state(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int) -> bytes:
    return encode({"version": 1, "leader": leader, "leader_epoch": leader_epoch, "isr": list(isr),
                   "controller_epoch": controller_epoch})


# ZooKeeper refuses (and drops the connection of) a request larger than its jute.maxbuffer, 1 MB less a byte
# by default; a topic's creation is one transaction, so it has to fit.
MAX_REQUEST_BYTES = 0xFFFFF
# What a create operation adds to its path and data inside a transaction: op header, lengths, the open ACL
# and flags (about 50 bytes), rounded up.
TRANSACTION_OP_OVERHEAD = 64


def topic_creation_ops(topic: str, replicas: dict[int, list[int]], topic_id: str,
                       controller_epoch: int) -> list[tuple[str, bytes]]:
    """(path, data) of every znode a topic's creation writes, in creation order."""
    ops = [(topic_path(topic), topic_assignment(replicas, topic_id=topic_id)), (partitions_path(topic), b"")]
    for index, replica_list in sorted(replicas.items()):
        ops += partition_creation_ops(topic, index, replica_list[0], list(replica_list), controller_epoch)
    return ops


def partition_creation_ops(topic: str, index: int, leader: int, isr: list[int],
                           controller_epoch: int) -> list[tuple[str, bytes]]:
    """(path, data) of the znodes that start one partition: its directory and its first state (epoch 0)."""
    return [(f"{partitions_path(topic)}/{index}", b""),
            (partition_state_path(topic, index), partition_state(leader, 0, isr, controller_epoch))]


def transaction_bytes(ops: list[tuple[str, bytes]]) -> int:
    """About how many bytes a ZooKeeper transaction of these creates takes on the wire (an upper bound)."""
    return sum(len(path.encode()) + len(data) + TRANSACTION_OP_OVERHEAD for path, data in ops)


def estimated_creation_bytes(topic: str, partitions: int, replication_factor: int) -> int:
    """``transaction_bytes`` of a topic's creation, estimated from its last (longest) partition, without
    building every partition: cheap even for an absurd partition count."""
    last = partitions - 1
    sample = {last: [2**31 - 1] * replication_factor}
    one = topic_creation_ops(topic, sample, "0" * 32, 2**31 - 1)
    per_partition = transaction_bytes(one[2:]) + len(topic_assignment(sample)) - len(topic_assignment({}))
    return transaction_bytes(one[:2]) + partitions * per_partition


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def topic_config(configs: dict[str, str]) -> bytes:
    return encode({"version": 1, "config": dict(configs)})


def parse_topic_config(data: bytes | None) -> dict[str, str]:
    """The overrides a /config/topics/<t> znode holds (none for an empty or missing one)."""
    return {k: str(v) for k, v in decode(data).get("config", {}).items()}


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{user}"


def user_config_change(user: str) -> bytes:
    """The change notification telling every broker to read /config/users/<user> again."""
    return encode({"version": 2, "entity_path": f"users/{user}"})


def config_change_sequence(name: str) -> int:
    """The sequence number of a config_change_<n> node (-1 for another name)."""
    try:
        return int(name[len(CONFIG_CHANGE_PREFIX):]) if name.startswith(CONFIG_CHANGE_PREFIX) else -1
    except ValueError:
        return -1


def create_topic_request_path(topic: str) -> str:
    return f"{ADMIN_CREATE_TOPICS}/{topic}"


def create_topic_request(partitions: int, replication_factor: int, configs: dict[str, str]) -> bytes:
    return encode({"version": 1, "partitions": partitions, "replication_factor": replication_factor,
                   "configs": dict(configs)})


def delete_topic_request_path(topic: str) -> str:
    return f"{ADMIN_DELETE_TOPICS}/{topic}"


# -- replication: requests to the controller -----------------------------------------------------

TopicPartition = tuple[str, int]


def partition_list(partitions: list[TopicPartition] | None) -> bytes:
    """A preferred replica election request or an ISR change notification: the partitions it names
    (None: every partition, for an election)."""
    value: dict[str, Any] = {"version": 1}
    if partitions is not None:
        value["partitions"] = [{"topic": t, "partition": p} for t, p in partitions]
    return encode(value)


def parse_partition_list(data: bytes | None) -> list[TopicPartition] | None:
    """The partitions of a ``partition_list``; None when it names none (an election of all)."""
    entries = decode(data).get("partitions")
    if not entries:
        return None
    return [(str(e["topic"]), int(e["partition"])) for e in entries]


ISR_CHANGE_PREFIX = f"{ISR_CHANGE_NOTIFICATION}/isr_change_"


def reassignment_request(targets: dict[TopicPartition, list[int]]) -> bytes:
    """A reassignment request: each partition's new replica list."""
    return encode({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                                for (t, p), r in sorted(targets.items())]})


def parse_reassignment(data: bytes | None) -> dict[TopicPartition, list[int]]:
    return {(str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]]
            for e in decode(data).get("partitions", ())}


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{ADMIN_CONTROLLED_SHUTDOWN}/{broker_id}"


def controlled_shutdown_reply(remaining: int) -> bytes:
    """The controller's answer to a controlled shutdown: the partitions the broker still leads."""
    return encode({"version": 1, "remaining": remaining})


def parse_controlled_shutdown_reply(data: bytes | None) -> int | None:
    """The partitions still led by the broker; None before the controller answered."""
    remaining = decode(data).get("remaining")
    return None if remaining is None else int(remaining)


# -- consumer groups -----------------------------------------------------------------------------

def group_path(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_path(group: str, consumer_id: str) -> str:
    return f"{CONSUMERS}/{group}/ids/{consumer_id}"


def consumer_registration(subscription: dict[str, int], pattern: str) -> bytes:
    """``pattern`` is "static" (named topics), "white_list" or "black_list" (the key of subscription is the regex)."""
    return encode({"version": 1, "subscription": dict(subscription), "pattern": pattern,
                   "timestamp": str(now_ms())})


def owners_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}"


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}/{partition}"


def offsets_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition}"


def group_metadata_path(group: str) -> str:
    """Where the group coordinator keeps a broker-coordinated group's state (members, generation, assignment)."""
    return f"{CONSUMERS}/{group}/metadata"


def txn_offsets_path(group: str) -> str:
    """The parent of a group's pending transactional offset commits, one child per producer id."""
    return f"{CONSUMERS}/{group}/txn_offsets"


def txn_offset_path(group: str, producer_id: int) -> str:
    """One producer's offsets committed in its open transaction (TxnOffsetCommit), visible at its commit marker."""
    return f"{CONSUMERS}/{group}/txn_offsets/{producer_id}"


@dataclass(frozen=True)
class OffsetValue:
    """A committed offset: the next offset to consume, the committer's metadata string and, when the
    committer asked for its own retention (OffsetCommit v2-v4), when it expires (ms since the epoch)."""

    offset: int
    metadata: str = ""
    expire_timestamp: int | None = None


def offset_value(value: OffsetValue) -> bytes:
    """A committed offset's znode data: the bare decimal offset, as the paper's consumers write it, unless
    there is metadata or an expiry to keep, then JSON."""
    if not value.metadata and value.expire_timestamp is None:
        return str(value.offset).encode()
    data: dict[str, Any] = {"version": 1, "offset": value.offset, "metadata": value.metadata}
    if value.expire_timestamp is not None:
        data["expire_timestamp"] = value.expire_timestamp
    return encode(data)


def parse_offset_value(data: bytes) -> OffsetValue:
    """The OffsetValue of an offset znode in either form; ValueError when it is neither."""
    text = data.decode().strip()
    if not text.startswith("{"):
        return OffsetValue(int(text))
    value = json.loads(text)
    expire = value.get("expire_timestamp")
    return OffsetValue(int(value["offset"]), str(value.get("metadata") or ""), None if expire is None else int(expire))


def parse_offset(data: bytes) -> int:
    """The offset of an offset znode in either form (ValueError when it is neither)."""
    return parse_offset_value(data).offset


# -- producer ids --------------------------------------------------------------------------------

def producer_id_block(broker_id: int, block_start: int, block_end: int) -> bytes:
    """The last block of producer ids handed out (both ends inclusive), as Kafka writes it."""
    return encode({"version": 1, "broker": broker_id, "block_start": str(block_start), "block_end": str(block_end)})


def parse_producer_id_block(data: bytes | None) -> tuple[int, int] | None:
    """(block_start, block_end) of the last block handed out, or None before the first one."""
    value = decode(data)
    if not value:
        return None
    return int(value["block_start"]), int(value["block_end"])

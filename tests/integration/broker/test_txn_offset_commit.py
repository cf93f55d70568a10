"""Transactional offset commits against real brokers with raw requests: TxnOffsetCommit, then the transaction
marker for the group's __consumer_offsets partition (WriteTxnMarkers, as the transaction coordinator sends it).
The offsets stay invisible until the commit marker, OffsetFetch v7 with RequireStable answers
UNSTABLE_OFFSET_COMMIT meanwhile, an abort marker drops them; they survive a standalone broker's SIGKILL and,
in a 3-broker cluster, the group coordinator's death (the next coordinator loads them from ZooKeeper; a broker
that does not coordinate the group answers the marker NOT_LEADER_OR_FOLLOWER, which the sender retries)."""

from __future__ import annotations

import pytest

from broker.coordinator.coordinator_placement import GROUP_METADATA_TOPIC, partition_for
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.errors import ErrorCode
from tests.support.cluster import BrokerCluster
from tests.support.codec_client import Client, create_topic
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(120)

TOPIC = "txn-offsets-in"
PID, EPOCH = 5001, 0
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions' default
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT


def txn_offset_commit(client: Client, group: str, offsets: dict[int, int], pid: int = PID) -> dict[int, int]:
    """TxnOffsetCommit v3 of TOPIC's partitions (partition -> offset); partition -> error code."""
    body = {"transactional_id": f"tx-{pid}", "group_id": group, "producer_id": pid, "producer_epoch": EPOCH,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
                for p, o in offsets.items()]}]}
    answer = client.call(ApiKey.TXN_OFFSET_COMMIT, 3, body)
    return {p["partition_index"]: p["error_code"] for t in answer["topics"] for p in t["partitions"]}


def offset_commit(client: Client, group: str, offsets: dict[int, int]) -> None:
    body = {"group_id": group, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
                for p, o in offsets.items()]}]}
    answer = client.call(ApiKey.OFFSET_COMMIT, 7, body)
    assert {p["error_code"] for t in answer["topics"] for p in t["partitions"]} == {ErrorCode.NONE}, answer


def offset_fetch(client: Client, group: str, require_stable: bool, version: int = 7) -> dict[int, tuple[int, int]]:
    """Partitions 0 and 1 of TOPIC: partition -> (committed offset, error code)."""
    body = {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
            "require_stable": require_stable}
    answer = client.call(ApiKey.OFFSET_FETCH, version, body)
    assert answer["error_code"] == ErrorCode.NONE, answer
    return {p["partition_index"]: (p["committed_offset"], p["error_code"])
            for t in answer["topics"] for p in t["partitions"]}


def marker(client: Client, group: str, committed: bool, pid: int = PID) -> int:
    """The transaction's marker for the group's __consumer_offsets partition; its error code."""
    index = partition_for(group, OFFSETS_PARTITIONS)
    body = {"markers": [{"producer_id": pid, "producer_epoch": EPOCH, "transaction_result": committed,
                         "coordinator_epoch": 0,
                         "topics": [{"name": GROUP_METADATA_TOPIC, "partition_indexes": [index]}]}]}
    answer = client.call(ApiKey.WRITE_TXN_MARKERS, 1, body)
    [[code]] = [[p["error_code"] for t in m["topics"] for p in t["partitions"]] for m in answer["markers"]]
    return code


def test_offsets_of_a_transaction_appear_at_its_commit_marker_and_survive_a_sigkill(broker_factory):
    broker = broker_factory()
    client = Client(broker.port)
    try:
        assert create_topic(client, TOPIC, 2)["error_code"] == ErrorCode.NONE
        offset_commit(client, "committed", {0: 1})
        assert txn_offset_commit(client, "committed", {0: 10, 1: 11}) == {0: ErrorCode.NONE, 1: ErrorCode.NONE}
        assert offset_fetch(client, "committed", require_stable=True) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE)}
        assert offset_fetch(client, "committed", require_stable=False) == {0: (1, 0), 1: (-1, 0)}
        assert offset_fetch(client, "committed", False, version=6) == {0: (1, 0), 1: (-1, 0)}
        assert txn_offset_commit(client, "aborted", {0: 20}, pid=PID + 1) == {0: ErrorCode.NONE}
    finally:
        client.close()

    broker.kill()
    broker.restart()
    client = Client(broker.port)
    try:
        assert offset_fetch(client, "committed", require_stable=True) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE)}
        assert marker(client, "committed", True) == ErrorCode.NONE
        assert offset_fetch(client, "committed", require_stable=True) == {0: (10, 0), 1: (11, 0)}
        assert marker(client, "committed", True) == ErrorCode.NONE  # retried
        assert offset_fetch(client, "committed", require_stable=True) == {0: (10, 0), 1: (11, 0)}

        assert marker(client, "aborted", False, pid=PID + 1) == ErrorCode.NONE
        assert offset_fetch(client, "aborted", require_stable=True) == {0: (-1, 0), 1: (-1, 0)}
    finally:
        client.close()


def find_coordinator(cluster: BrokerCluster, group: str, asked: int) -> int | None:
    client = Client(cluster.brokers[asked].port)
    try:
        answer = client.call(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
    finally:
        client.close()
    return answer["node_id"] if answer["error_code"] == ErrorCode.NONE else None


def test_pending_offsets_survive_the_group_coordinators_death_in_a_cluster(cluster):
    group = "failover"
    client = Client(cluster.brokers[1].port)
    try:
        create = {"topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 3, "assignments": [],
                              "configs": []}], "timeout_ms": 10000}
        assert client.call(ApiKey.CREATE_TOPICS, 4, create)["topics"][0]["error_code"] == ErrorCode.NONE
    finally:
        client.close()
    cluster.wait_for_metadata(TOPIC, 2)
    coordinator = find_coordinator(cluster, group, 1)
    assert coordinator is not None
    other = next(b for b in cluster.brokers if b != coordinator)
    elsewhere = Client(cluster.brokers[other].port)
    client = Client(cluster.brokers[coordinator].port)
    try:
        assert txn_offset_commit(elsewhere, group, {0: 7}) == {0: ErrorCode.NOT_COORDINATOR}
        offset_commit(client, group, {0: 1, 1: 2})
        assert txn_offset_commit(client, group, {0: 10, 1: 11}) == {0: ErrorCode.NONE, 1: ErrorCode.NONE}
        assert offset_fetch(client, group, require_stable=True) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE)}
    finally:
        client.close()
        elsewhere.close()

    cluster.brokers[coordinator].kill()
    successor = wait_until(lambda: (found := find_coordinator(cluster, group, other)) not in (None, coordinator)
                           and found, 30, message="another broker coordinating the group")
    bystander = next(b for b in cluster.brokers if b not in (coordinator, successor))
    client = Client(cluster.brokers[bystander].port)
    try:
        # A broker that does not coordinate the group asks the transaction coordinator to send the marker again.
        assert marker(client, group, True) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        client.close()
    client = Client(cluster.brokers[successor].port)
    try:
        assert offset_fetch(client, group, require_stable=True) == {0: (-1, UNSTABLE), 1: (-1, UNSTABLE)}
        assert offset_fetch(client, group, require_stable=False) == {0: (1, 0), 1: (2, 0)}
        assert marker(client, group, True) == ErrorCode.NONE
        assert offset_fetch(client, group, require_stable=True) == {0: (10, 0), 1: (11, 0)}
    finally:
        client.close()

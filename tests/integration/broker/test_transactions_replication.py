"""Transactions on a replicated partition (three broker processes, RF 3): followers replay the markers into
the same .txnindex files as the leader, markers sent to a follower are refused, and after the leader is
killed the new leader has the same LSO and aborted transactions, which a stock read_committed consumer honours."""

from __future__ import annotations

import pytest

from pipeline.protocol.errors import ErrorCode
from pipeline.records import encode_batch
from tests.integration.broker.test_replication import TOPIC, _client, cluster, state, wait_leader  # noqa: F401
from tests.support import transactions as txn
from tests.support.clients import confluent_consume
from tests.support.codec_client import Client
from tests.support.polling import wait_until
from tests.support.transactions import READ_COMMITTED, data_values

pytestmark = pytest.mark.timeout(180)

A, B = 8001, 8002


def produce(client: Client, records: bytes, transactional_id: str | None) -> dict:
    return txn.produce(client, TOPIC, records, transactional_id)


def txn_batch(pid: int, seq: int, *values: bytes) -> bytes:
    return txn.txn_batch(pid, seq, values)


def marker(client: Client, pid: int, committed: bool) -> int:
    return txn.write_markers(client, (pid, 0, committed, TOPIC, [0]))[(pid, TOPIC, 0)]


def read_committed(client: Client) -> dict:
    return txn.fetch(client, TOPIC, READ_COMMITTED)


def txn_indexes(cluster, broker_id: int) -> dict[str, bytes]:
    directory = cluster.brokers[broker_id].partition_dir(TOPIC, 0)
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.txnindex"))}


def test_followers_keep_the_aborted_index_and_the_new_leader_the_lso(cluster):
    leader = state(cluster)["leader"]
    followers = sorted(set(cluster.brokers) - {leader})
    with _client(cluster, leader) as client:
        assert produce(client, txn_batch(A, 0, b"a0", b"a1"), "ta")["error_code"] == ErrorCode.NONE
        assert produce(client, encode_batch([b"p0"]), None)["error_code"] == ErrorCode.NONE
        assert produce(client, txn_batch(B, 0, b"b0"), "tb")["base_offset"] == 3
        assert marker(client, A, committed=False) == ErrorCode.NONE
        assert produce(client, encode_batch([b"p1"]), None)["base_offset"] == 5
        before = read_committed(client)
        assert (before["last_stable_offset"], before["high_watermark"]) == (3, 6)
        assert before["aborted_transactions"] == [{"producer_id": A, "first_offset": 0}]
    with _client(cluster, followers[0]) as client:
        assert marker(client, B, committed=True) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    expected = txn_indexes(cluster, leader)
    assert len(expected) == 1 and len(next(iter(expected.values()))) == 34
    for follower in followers:
        wait_until(lambda: txn_indexes(cluster, follower) == expected or None, 30, interval=0.1,
                   message=lambda: f"broker {follower}'s .txnindex like the leader's")

    cluster.brokers[leader].kill()
    new_leader = wait_leader(cluster, not_in={leader})

    def lso_on_new_leader() -> dict | None:
        with _client(cluster, new_leader) as client:
            answer = read_committed(client)
        return answer if answer["error_code"] == ErrorCode.NONE and answer["high_watermark"] == 6 else None
    after = wait_until(lso_on_new_leader, 30, interval=0.2, message="the new leader's high watermark at 6")
    assert after["last_stable_offset"] == 3, "B's transaction is still open on the new leader"
    assert after["aborted_transactions"] == [{"producer_id": A, "first_offset": 0}]
    assert data_values(after["records"]) == [b"a0", b"a1", b"p0"]
    with _client(cluster, new_leader) as client:
        assert marker(client, B, committed=True) == ErrorCode.NONE
    consumed = confluent_consume(cluster.bootstrap, TOPIC, [0], 3, timeout=30, **{"isolation.level": "read_committed"})
    assert [r.value for r in consumed] == [b"p0", b"b0", b"p1"]

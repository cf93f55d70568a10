"""Transactions by raw requests, for the partition-side tests: transactional batches, Produce with a
transactional id, WriteTxnMarkers as a coordinator sends them, ListOffsets and Fetch with an isolation level."""

from __future__ import annotations

from typing import Sequence

from pipeline.protocol.api_keys import ApiKey
from pipeline.records import decode_batch, encode_batch
from pipeline.records.batch import iter_batches
from tests.support.codec_client import Client, fetch_body

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def txn_batch(producer_id: int, sequence: int, values: Sequence[bytes], keys: Sequence[bytes] | None = None,
              epoch: int = 0) -> bytes:
    """One transactional batch of ``values`` (with ``keys``) from ``producer_id`` at ``sequence``."""
    return encode_batch(list(values), None if keys is None else list(keys), producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, transactional=True)


def produce(client: Client, topic: str, records: bytes, transactional_id: str | None = None,
            partition: int = 0) -> dict:
    """Produce v8, acks=all, one partition; its answer."""
    body = {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}
    return client.call(ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"][0]


def write_markers(client: Client, *markers: tuple[int, int, bool, str, list[int]],
                  coordinator_epoch: int = 0) -> dict[tuple[int, str, int], int]:
    """WriteTxnMarkers v1 with (producer id, epoch, committed, topic, partitions) per marker; the error code
    per (producer id, topic, partition)."""
    body = {"markers": [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": committed,
                         "topics": [{"name": topic, "partition_indexes": partitions}],
                         "coordinator_epoch": coordinator_epoch}
                        for pid, epoch, committed, topic, partitions in markers]}
    response = client.call(ApiKey.WRITE_TXN_MARKERS, 1, body)
    return {(m["producer_id"], t["name"], p["partition_index"]): p["error_code"]
            for m in response["markers"] for t in m["topics"] for p in t["partitions"]}


def latest_offset(client: Client, topic: str, isolation_level: int, partition: int = 0) -> int:
    """ListOffsets v5 LATEST: the high watermark, or the LSO for read_committed."""
    body = {"replica_id": -1, "isolation_level": isolation_level,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1,
                                                       "current_leader_epoch": -1}]}]}
    return client.call(ApiKey.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]["offset"]


def fetch(client: Client, topic: str, isolation_level: int, offset: int = 0, max_wait_ms: int = 0,
          partition: int = 0) -> dict:
    """Fetch v11 of one partition; its answer (records, high_watermark, last_stable_offset, aborted_transactions)."""
    body = dict(fetch_body([(topic, partition, offset, 1 << 20)], max_wait_ms=max_wait_ms),
                isolation_level=isolation_level)
    return client.call(ApiKey.FETCH, 11, body)["responses"][0]["partitions"][0]


def data_values(records: bytes | None) -> list[bytes]:
    """The values of the data (not control) records of every whole batch in ``records``."""
    values = []
    for position, header in iter_batches(records or b""):
        if not header.is_control:
            values += [r.value for r in decode_batch(records, position)[1]]
    return values

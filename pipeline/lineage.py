"""Exact lineage: every mirrored record carries where it came from in three record headers (the mirror writes them,
the ETL reads them into its lineage columns).

``mirror.cluster`` (the source cluster's name), ``mirror.partition`` and ``mirror.offset`` (decimal ASCII)
are appended to the record's own headers; headers of those names that the record already had (a record
mirrored twice) are replaced, so they always name the last hop. Per-record headers were chosen over an
offset-map topic: the mirror re-encodes records anyway (several sources share a target partition), and
a record then answers for itself, duplicates included -- two copies of a record name the same origin.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from pipeline.client.cluster import Cluster
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.records import Header

__all__ = ["CLUSTER_HEADER", "LINEAGE_HEADERS", "Lineage", "LineageStamp", "OFFSET_HEADER", "PARTITION_HEADER",
           "lineage_headers", "lineage_of", "lineage_overhead", "look_up"]

CLUSTER_HEADER = "mirror.cluster"
PARTITION_HEADER = "mirror.partition"
OFFSET_HEADER = "mirror.offset"
LINEAGE_HEADERS = frozenset((CLUSTER_HEADER, PARTITION_HEADER, OFFSET_HEADER))


class Lineage(NamedTuple):
    """Where a target record came from: source cluster, topic (the same name), partition and offset."""

    cluster: str
    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.cluster} {self.topic}-{self.partition}@{self.offset}"


def lineage_overhead(cluster: str) -> int:
    """The most bytes this hop's lineage headers can add to a record of source ``cluster`` (a partition of up to
    10 digits, an offset of up to 19; each header's two length varints; the record's own length and header-count
    varints growing), so that a target holds whatever the source held."""
    names = sum(len(name) for name in (CLUSTER_HEADER, PARTITION_HEADER, OFFSET_HEADER))
    return names + len(cluster.encode()) + 10 + 19 + 3 * (5 + 5) + 5 + 5


class LineageStamp:
    """This hop's lineage headers for the records of one source partition: the cluster and partition headers are
    the same for all of them and built once; only the offset header is built per record."""

    __slots__ = ("_cluster", "_partition")

    def __init__(self, cluster: bytes, partition: int) -> None:
        self._cluster = (CLUSTER_HEADER, cluster)
        self._partition = (PARTITION_HEADER, b"%d" % partition)

    def headers(self, headers: Sequence[Header], offset: int) -> list[Header]:
        """``headers`` without earlier lineage, followed by this hop's for the record at ``offset``."""
        if not headers:
            return [self._cluster, self._partition, (OFFSET_HEADER, b"%d" % offset)]
        kept = [h for h in headers if h[0] not in LINEAGE_HEADERS]
        kept += (self._cluster, self._partition, (OFFSET_HEADER, b"%d" % offset))
        return kept


def lineage_headers(headers: Sequence[Header], cluster: bytes, partition: int, offset: int) -> list[Header]:
    """``headers`` without earlier lineage, followed by this hop's (``cluster`` already encoded)."""
    return LineageStamp(cluster, partition).headers(headers, offset)


def lineage_of(topic: str, headers: Sequence[Header]) -> Lineage | None:
    """The lineage a record's headers name, None if they name none (not a mirrored record)."""
    found = {name: value for name, value in headers if name in LINEAGE_HEADERS and value is not None}
    if len(found) != 3:
        return None
    try:
        return Lineage(found[CLUSTER_HEADER].decode(), topic, int(found[PARTITION_HEADER]),
                       int(found[OFFSET_HEADER]))
    except (UnicodeDecodeError, ValueError):
        return None


def look_up(cluster: Cluster, topic: str, partition: int, offset: int, timeout_s: float = 10.0) -> Lineage | None:
    """Fetch the record at ``topic``-``partition``@``offset`` of the target cluster and return its lineage.

    LookupError when the partition holds no record at that offset.
    """
    leader = cluster.leader(topic, partition)
    address = cluster.brokers().get(leader)
    if address is None:
        raise LookupError(f"{topic}-{partition} has no leader right now")
    host, port = address
    with SimpleConsumer(host, port, timeout=timeout_s, security=cluster.security) as consumer:
        for record in consumer.fetch(FetchRequest(topic, partition, offset, 1 << 20)):
            if record.offset == offset:
                return lineage_of(topic, record.headers)
            if record.offset > offset:
                break
    raise LookupError(f"{topic}-{partition} has no record at offset {offset}")

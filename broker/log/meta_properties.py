"""meta.properties: which cluster and broker id a log directory belongs to (Kafka's BrokerMetadataCheckpoint).

A log directory that has served one cluster must never be joined to another: the broker deletes the logs of
topics its cluster no longer has, so a broker pointed at the wrong (or a new, empty) ZooKeeper chroot would
otherwise delete every log it holds. Each log directory records the cluster id and broker id it was first
used with; a later start with different ones is refused, as Kafka refuses it (InconsistentClusterIdException,
InconsistentBrokerIdException).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.durable_file import write_atomically

META_PROPERTIES_FILE = "meta.properties"


class InconsistentLogDirError(RuntimeError):
    """A log directory belongs to another cluster or another broker id."""


def read_meta_properties(log_dir: Path) -> dict[str, str]:
    """The key=value pairs of ``log_dir``/meta.properties; empty when the file does not exist."""
    try:
        text = (Path(log_dir) / META_PROPERTIES_FILE).read_text()
    except FileNotFoundError:
        return {}
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def check_and_claim(log_dirs: list[Path], cluster_id: str, broker_id: int) -> None:
    """Refuse (InconsistentLogDirError) a log dir recorded for another cluster or broker; record the others."""
    for log_dir in log_dirs:
        recorded = read_meta_properties(log_dir)
        stored_cluster = recorded.get("cluster.id")
        if stored_cluster is not None and stored_cluster != cluster_id:
            raise InconsistentLogDirError(
                f"the cluster id {cluster_id} in ZooKeeper does not match cluster.id={stored_cluster} in "
                f"{log_dir / META_PROPERTIES_FILE}: this broker is being joined to another cluster (check "
                f"zookeeper.connect and its chroot)")
        stored_broker = recorded.get("broker.id")
        if stored_broker is not None and stored_broker != str(broker_id):
            raise InconsistentLogDirError(
                f"broker.id {broker_id} does not match broker.id={stored_broker} in {log_dir / META_PROPERTIES_FILE}")
        if stored_cluster is None or stored_broker is None:
            write_atomically(Path(log_dir) / META_PROPERTIES_FILE,
                             f"version=0\ncluster.id={cluster_id}\nbroker.id={broker_id}\n".encode())

"""The benchmark's copy of a topology: every port moved onto a block of free loopback ports, the data in a
directory of its own, the emulators' rate and the ETL's schedule as the benchmark wants them.

Brokers, their metrics ports and a ZooKeeper ensemble's ports are consecutive from the port the topology gives
(``port``, ``port + 1``, ...), so every such port is a run of ``width`` ports: :func:`port_runs` lists them,
:func:`place` lays them end to end from a base, :func:`find_base` finds a base whose whole block is free.
"""

from __future__ import annotations

import copy
import socket
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

__all__ = ["LOWEST_BASE", "HIGHEST_BASE", "find_base", "port_free", "port_runs", "place", "rewrite", "split_rate"]

# Below Linux's ephemeral range (32768-60999), so that no client connection takes a port of the block meanwhile.
LOWEST_BASE = 20000
HIGHEST_BASE = 32000
PortRun = tuple[tuple[str, ...], int]


def port_runs(document: Mapping[str, Any]) -> list[PortRun]:
    """(key path, width) of every port of the topology ``document`` a local process listens on."""
    runs: list[PortRun] = []
    zookeeper = document.get("zookeeper") or {}
    if not zookeeper.get("connect"):
        nodes = int(zookeeper.get("nodes", 1))
        runs.append((("zookeeper", "port"), nodes))
        if nodes > 1:
            runs += [(("zookeeper", "peer_port"), nodes), (("zookeeper", "election_port"), nodes)]
    clusters = [(("datacenters", name), spec or {}) for name, spec in (document.get("datacenters") or {}).items()]
    clusters.append((("offline",), document.get("offline") or {}))
    for path, spec in clusters:
        if spec.get("zookeeper"):
            continue
        brokers = int(spec.get("brokers", 3))
        runs += [((*path, "port"), brokers), ((*path, "metrics_port"), brokers)]
        if "emulators" in spec:
            runs.append(((*path, "emulators", "metrics_port"), 1))
    for section, key in (("registry", "port"), ("prometheus", "port")):
        if not (document.get(section) or {}).get("url"):
            runs.append(((section, key), 1))
    runs += [(("mirror", "metrics_port"), 1), (("etl", "metrics_port"), 1), (("audit", "http_port"), 1)]
    return runs


def place(runs: Iterable[PortRun], base: int) -> dict[tuple[str, ...], int]:
    """Key path -> its first port, the runs laid end to end from ``base``."""
    placed, port = {}, base
    for path, width in runs:
        placed[path] = port
        port += width
    return placed


def find_base(width: int, free: Callable[[int], bool], lowest: int = LOWEST_BASE, highest: int = HIGHEST_BASE,
              stride: int = 97) -> int:
    """The first base from ``lowest`` (in steps of ``stride``) whose ports base..base+width-1 are all ``free``."""
    for base in range(lowest, highest - width, stride):
        if all(free(port) for port in range(base, base + width)):
            return base
    raise RuntimeError(f"no {width} consecutive free ports from {lowest} to {highest}")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on ``port`` of ``host`` and it can be bound."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def split_rate(rate: float, datacenters: int) -> float:
    """Each datacenter's emulators' rate for ``rate`` events per second in all."""
    return rate / datacenters


def rewrite(document: Mapping[str, Any], *, base: int, var_dir: Path, rate: float, etl_every: str = "1m",
            brokers: int | None = None, security: bool | None = None) -> dict[str, Any]:
    """A copy of the topology ``document`` with its ports from ``base``, its data in ``var_dir``, ``rate`` events
    per second in all split evenly across the datacenters' emulators and the ETL every ``etl_every``. ``brokers``:
    that many brokers per cluster (replication and min.insync.replicas lowered to fit); ``security``: on or off."""
    copied: dict[str, Any] = copy.deepcopy(dict(document))
    copied["var_dir"] = str(var_dir)
    if security is not None:
        copied["security"] = security
    clusters = [spec for spec in (copied.get("datacenters") or {}).values()] + [copied.setdefault("offline", {})]
    if brokers is not None:
        for spec in clusters:
            spec["brokers"] = brokers
            spec["replication_factor"] = min(int(spec.get("replication_factor", 3)), brokers)
            spec["min_insync_replicas"] = min(int(spec.get("min_insync_replicas", 2)), spec["replication_factor"])
    for path, port in place(port_runs(copied), base).items():
        node = copied
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = port
    with_emulators = [spec for spec in (copied.get("datacenters") or {}).values() if "emulators" in spec]
    for spec in with_emulators:
        spec["emulators"]["rate"] = split_rate(rate, len(with_emulators))
    copied.setdefault("etl", {})["every"] = etl_every
    return copied

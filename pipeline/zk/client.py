"""Connecting to ZooKeeper the way every component does: ``host:port[,host:port...]/chroot`` via kazoo.

The chroot is created if missing (a new cluster under /dc1 needs no manual step), then the client
is rooted there, so every path of :mod:`pipeline.zk.layout` is relative to the cluster.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

DEFAULT_SESSION_TIMEOUT_S = 6.0


class ZooKeeperUnavailable(ConnectionError):
    """No ZooKeeper server of the connect string answered in time."""


def split_connect_string(connect: str) -> tuple[str, str]:
    """("host:port,host:port", "/chroot" or "") from a zookeeper.connect value."""
    connect = connect.strip()
    if not connect:
        raise ValueError("zookeeper.connect is empty")
    hosts, slash, chroot = connect.partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r} names no host")
    for host in hosts.split(","):
        name, sep, port = host.strip().rpartition(":")
        if not sep or not name or not port.isdigit():
            raise ValueError(f"zookeeper.connect {connect!r}: {host!r} is not host:port")
    chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
    return hosts, chroot


def connect(connect_string: str, *, timeout_s: float = 15.0,
            session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S) -> KazooClient:
    """A started kazoo client rooted at the chroot of ``connect_string`` (created when missing)."""
    hosts, chroot = split_connect_string(connect_string)
    if chroot:
        bootstrap = KazooClient(hosts=hosts, timeout=session_timeout_s)
        try:
            bootstrap.start(timeout_s)
        except KazooTimeoutError:
            bootstrap.close()
            raise ZooKeeperUnavailable(f"no ZooKeeper server at {hosts} answered within {timeout_s:.0f}s") from None
        try:
            bootstrap.ensure_path(chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()
    client = KazooClient(hosts=hosts + chroot, timeout=session_timeout_s)
    try:
        client.start(timeout_s)
    except KazooTimeoutError:
        client.close()
        raise ZooKeeperUnavailable(f"no ZooKeeper server at {hosts} answered within {timeout_s:.0f}s") from None
    return client

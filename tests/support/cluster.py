"""`BrokerCluster`: N broker processes in cluster mode on one ZooKeeper connect string, for tests.

Brokers get ids 1..N, their own log dirs and loopback ports, and every override given (e.g. a short
zookeeper.session.timeout.ms). The cluster keeps a kazoo client of its own on the same chroot to
look at what the brokers wrote (controller, partition states), and can kill, restart and expire the
session of one broker. ``wait_for_metadata`` polls Metadata from every live broker until they agree.

A broker's session is expired the way a long pause expires it in production: the broker process is
stopped (SIGSTOP) until ZooKeeper has ended its session (its ephemeral registration vanishes), then
continued; its client then finds the session expired. Brokers keep their session credentials to
themselves, so nothing else can end it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Mapping

from kazoo.client import KazooClient

from pipeline.zk import layout
from pipeline.zk.client import connect
from tests.support import wire
from tests.support.broker import BrokerProcess
from tests.support.polling import wait_until
from tests.support.process import stop_all

API_CREATE_TOPICS = 19

def metadata_request(topics: list[str] | None = None, allow_create: bool = False) -> bytes:
    """A Metadata v5 request body (all topics when ``topics`` is None)."""
    body = wire.Writer()
    if topics is None:
        body.int32(-1)
    else:
        body.array_len(len(topics))
        for name in topics:
            body.string(name)
    body.int8(1 if allow_create else 0)
    return body.getvalue()


def parse_metadata(reader: wire.Reader) -> dict:
    """A Metadata v5 response body: brokers, controller, cluster id, topics -> error and partitions."""
    reader.int32()  # throttle
    brokers = {}
    for _ in range(reader.int32()):
        node = reader.int32()
        host = reader.string()
        port = reader.int32()
        reader.string()  # rack
        brokers[node] = (host, port)
    cluster_id = reader.string()
    controller = reader.int32()
    result_topics = {}
    for _ in range(reader.int32()):
        error = reader.int16()
        name = reader.string()
        reader.pos += 1  # is_internal
        partitions = {}
        for _ in range(reader.int32()):
            p_error = reader.int16()
            index = reader.int32()
            leader = reader.int32()
            replicas = [reader.int32() for _ in range(reader.int32())]
            isr = [reader.int32() for _ in range(reader.int32())]
            [reader.int32() for _ in range(reader.int32())]  # offline replicas
            partitions[index] = {"error": p_error, "leader": leader, "replicas": replicas, "isr": isr}
        result_topics[name] = {"error": error, "partitions": partitions}
    return {"brokers": brokers, "cluster_id": cluster_id, "controller": controller, "topics": result_topics}


def metadata(broker: BrokerProcess, topics: list[str] | None = None, allow_create: bool = False) -> dict:
    """Metadata v5 from one broker, parsed (see ``parse_metadata``)."""
    with wire.KafkaConnection(broker.host, broker.port, timeout=15.0) as conn:
        return parse_metadata(conn.request(wire.API_METADATA, 5, metadata_request(topics, allow_create)))


def create_topics_result(conn: wire.KafkaConnection, topic: str, partitions: int,
                         timeout_ms: int) -> tuple[int, str | None]:
    """CreateTopics v1 for one topic (replication factor 1) on ``conn``: (error code, error message)."""
    body = (wire.Writer().array_len(1).string(topic).int32(partitions).int16(1).array_len(0).array_len(0)
            .int32(timeout_ms).int8(0).getvalue())
    reader = conn.request(API_CREATE_TOPICS, 1, body)
    assert reader.int32() == 1
    reader.string()
    return reader.int16(), reader.string()


class BrokerCluster:
    """Brokers 1..N joined through ZooKeeper; stopped (and the inspection client closed) by ``stop``."""

    def __init__(self, base_dir: Path, zk_connect: str, size: int = 3,
                 overrides: Mapping[str, object] | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.zk_connect = zk_connect
        self.overrides = dict(overrides or {})
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in range(1, size + 1):
            self.brokers[broker_id] = self.make_broker(broker_id)
        self._zk: KazooClient | None = None

    def make_broker(self, broker_id: int, directory: str | None = None,
                    overrides: Mapping[str, object] | None = None) -> BrokerProcess:
        """A (not started) broker process of this cluster with the given id."""
        home = self.base_dir / (directory or f"broker{broker_id}")
        settings = {"zookeeper.connect": self.zk_connect, "broker.id": broker_id, **self.overrides,
                    **(overrides or {})}
        return BrokerProcess(home / "logs", overrides=settings, log_path=home / "broker.log")

    @property
    def zk(self) -> KazooClient:
        """A kazoo client rooted at the cluster's chroot, for inspection."""
        if self._zk is None:
            self._zk = connect(self.zk_connect)
        return self._zk

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def live(self) -> list[BrokerProcess]:
        return [b for b in self.brokers.values() if b.is_running]

    def start(self) -> BrokerCluster:
        for broker in self.brokers.values():
            broker.start()
        self.wait_registered(set(self.brokers))
        return self

    def stop(self) -> None:
        try:
            stop_all(list(self.brokers.values()))
        finally:
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
                self._zk = None

    def __enter__(self) -> BrokerCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- ZooKeeper inspection -----------------------------------------------------------------

    def registered(self) -> set[int]:
        return {int(b) for b in self.zk.get_children(layout.BROKER_IDS)}

    def wait_registered(self, ids: set[int], timeout: float = 30.0) -> None:
        wait_until(lambda: self.registered() == ids, timeout,
                   message=lambda: f"registered brokers {sorted(ids)} (have {sorted(self.registered())})")

    def controller_id(self) -> int | None:
        stat = self.zk.exists(layout.CONTROLLER)
        if stat is None:
            return None
        try:
            return layout.decode(self.zk.get(layout.CONTROLLER)[0])["brokerid"]
        except Exception:
            return None

    def controller_epoch(self) -> int:
        return int(self.zk.get(layout.CONTROLLER_EPOCH)[0].decode())

    def partition_state(self, topic: str, partition: int) -> dict:
        return layout.decode(self.zk.get(layout.partition_state_path(topic, partition))[0])

    def assignment(self, topic: str) -> dict[int, list[int]]:
        return layout.parse_topic_assignment(self.zk.get(layout.topic_path(topic))[0])

    # -- metadata agreement ---------------------------------------------------------------------

    def wait_for_metadata(self, topic: str, partitions: int, timeout: float = 30.0,
                          online: bool = True) -> dict[int, int]:
        """Poll until every live broker reports ``topic`` with its partitions, the same leaders and the
        same live brokers (all partitions led when ``online``); return partition -> leader."""
        def agreed() -> dict[int, int] | None:
            views = [metadata(b, [topic]) for b in self.live()]
            leaders = [{p: v["leader"] for p, v in view["topics"][topic]["partitions"].items()} for view in views]
            brokers = [set(view["brokers"]) for view in views]
            if any(len(found) != partitions for found in leaders):
                return None
            if any(found != leaders[0] for found in leaders) or any(b != brokers[0] for b in brokers):
                return None
            if online and any(leader == -1 for leader in leaders[0].values()):
                return None
            return leaders[0]
        return wait_until(agreed, timeout, interval=0.1, message=f"brokers agreeing on topic {topic!r}")

    # -- failures -------------------------------------------------------------------------------

    def expire_session(self, broker_id: int, timeout: float = 30.0) -> None:
        """Expire the broker's ZooKeeper session: pause the process until ZooKeeper has ended the session
        (its registration is gone), then let it go on."""
        pid = self.brokers[broker_id].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: self.zk.exists(layout.broker_path(broker_id)) is None, timeout,
                       message=f"broker {broker_id}'s session expiring while it is paused")
        finally:
            os.kill(pid, signal.SIGCONT)

    def session_id(self, broker_id: int) -> int | None:
        """The session that holds the broker's registration (the ephemeral owner), None if unregistered."""
        stat = self.zk.exists(layout.broker_path(broker_id))
        return None if stat is None else stat.ephemeralOwner

"""Brokers in a cluster on a real ZooKeeper: assignment, metadata from every broker, leadership, failures."""

from __future__ import annotations

import threading
from collections import Counter

from kafka import KafkaProducer

from pipeline.records.batch import iter_batches
from pipeline.records import decode_records, encode_batch
from pipeline.zk import layout
from tests.support import CLEAN_SHUTDOWN_MARKER, BrokerError, BrokerProcess, free_port, wait_until, wire
from tests.support.clients import create_topic, kafka_python_consume
from tests.support.cluster import BrokerCluster, create_topics_result, metadata

SHORT_SESSION = {"zookeeper.session.timeout.ms": 4000}
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
INVALID_PARTITIONS = 37
API_INIT_PRODUCER_ID = 22


def produce_values(cluster: BrokerCluster, topic: str, partition: int, leader: int, values: list[bytes]) -> int:
    with wire.KafkaConnection(cluster.brokers[leader].host, cluster.brokers[leader].port) as conn:
        result = wire.produce(conn, topic, partition, encode_batch(values))
    assert result.error_code == 0, f"produce to {topic}-{partition} on broker {leader}: error {result.error_code}"
    return result.base_offset


def fetch_values(cluster: BrokerCluster, topic: str, partition: int, leader: int) -> list[bytes]:
    with wire.KafkaConnection(cluster.brokers[leader].host, cluster.brokers[leader].port) as conn:
        result = wire.fetch(conn, topic, partition, 0, max_wait_ms=0)
    assert result.error_code == 0, f"fetch {topic}-{partition} from broker {leader}: error {result.error_code}"
    return [r.value for r in decode_records(result.records)[0]]


def test_topic_spreads_over_the_brokers_and_every_broker_agrees(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect)
    create_topic(cluster.brokers[2].bootstrap, "spread", partitions=12)
    leaders = cluster.wait_for_metadata("spread", 12)
    assert Counter(leaders.values()) == {1: 4, 2: 4, 3: 4}
    assignment = cluster.assignment("spread")
    assert {p: replicas[0] for p, replicas in assignment.items()} == leaders
    for p in range(12):
        state = cluster.partition_state("spread", p)
        assert (state["leader"], state["leader_epoch"], state["isr"]) == (leaders[p], 0, [leaders[p]])
    views = [metadata(b) for b in cluster.live()]
    assert len({v["cluster_id"] for v in views}) == 1 and views[0]["cluster_id"]
    assert {v["controller"] for v in views} == {cluster.controller_id()}
    assert all(v["brokers"] == {i: (b.host, b.port) for i, b in cluster.brokers.items()} for v in views)
    # The partitions' logs exist only on their leaders.
    for p, leader in leaders.items():
        for broker_id, broker in cluster.brokers.items():
            assert broker.partition_dir("spread", p).exists() == (broker_id == leader)

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5)
    try:
        for p in range(12):
            for i in range(5):
                producer.send("spread", value=f"p{p}-m{i}".encode(), partition=p)
        producer.flush(30)
    finally:
        producer.close()
    records = kafka_python_consume(cluster.bootstrap, "spread", range(12), expected=60, timeout=60)
    got = {(r.partition, r.value) for r in records}
    assert got == {(p, f"p{p}-m{i}".encode()) for p in range(12) for i in range(5)}


def test_produce_and_fetch_to_a_non_leader_are_refused(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect)
    create_topic(cluster.brokers[1].bootstrap, "led", partitions=1)
    leader = cluster.wait_for_metadata("led", 1)[0]
    other = next(i for i in cluster.brokers if i != leader)
    broker = cluster.brokers[other]
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        refused = wire.produce(conn, "led", 0, encode_batch([b"lost?"]))
        assert refused.error_code == NOT_LEADER_OR_FOLLOWER
        assert wire.fetch(conn, "led", 0, 0, max_wait_ms=0).error_code == NOT_LEADER_OR_FOLLOWER
        assert wire.produce(conn, "nowhere", 0, encode_batch([b"x"])).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert wire.produce(conn, "led", 7, encode_batch([b"x"])).error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert not broker.partition_dir("led", 0).exists()
    assert fetch_values(cluster, "led", 0, leader) == []
    produce_values(cluster, "led", 0, leader, [b"kept"])
    assert fetch_values(cluster, "led", 0, leader) == [b"kept"]


def test_a_duplicate_broker_id_is_refused_with_a_clear_message(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2)
    duplicate = cluster.make_broker(1, directory="duplicate")
    try:
        duplicate.start()
    except BrokerError:
        pass
    else:
        raise AssertionError("a second broker with id 1 started")
    finally:
        duplicate.kill()
    assert duplicate.returncode not in (0, None)
    lines = [line for line in duplicate.log_text().splitlines() if "already registered" in line]
    assert len(lines) == 1, duplicate.log_tail()
    holder = cluster.brokers[1]
    assert "broker id 1" in lines[0] and f"{holder.host}:{holder.port}" in lines[0]
    assert cluster.registered() == {1, 2}
    assert metadata(holder)["brokers"][1] == (holder.host, holder.port)


def test_init_producer_id_is_unique_across_brokers(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect)
    ids = []
    for broker in cluster.brokers.values():
        with wire.KafkaConnection(broker.host, broker.port) as conn:
            for _ in range(3):
                reader = conn.request(API_INIT_PRODUCER_ID, 0, wire.Writer().string(None).int32(60000).getvalue())
                reader.int32()
                assert reader.int16() == 0
                ids.append(reader.int64())
    assert len(set(ids)) == len(ids) == 9
    block = layout.parse_producer_id_block(cluster.zk.get(layout.PRODUCER_ID_BLOCK)[0])
    assert block is not None and block[1] >= max(ids)


def test_a_killed_broker_goes_offline_and_comes_back_with_its_data(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, overrides=SHORT_SESSION)
    create_topic(cluster.brokers[1].bootstrap, "durable", partitions=6)
    leaders = cluster.wait_for_metadata("durable", 6)
    for p, leader in leaders.items():
        produce_values(cluster, "durable", p, leader, [f"before-{p}".encode()])
    victim = 3
    mine = sorted(p for p, leader in leaders.items() if leader == victim)
    epochs = {p: cluster.partition_state("durable", p)["leader_epoch"] for p in mine}
    cluster.brokers[victim].kill()

    wait_until(lambda: all(cluster.partition_state("durable", p)["leader"] == -1 for p in mine), 20,
               message="the dead broker's partitions going offline in ZooKeeper")
    assert all(cluster.partition_state("durable", p)["leader_epoch"] == epochs[p] + 1 for p in mine)
    view = metadata(cluster.brokers[1], ["durable"])
    assert victim not in view["brokers"]
    for p, partition in view["topics"]["durable"]["partitions"].items():
        if p in mine:
            assert (partition["leader"], partition["error"]) == (-1, LEADER_NOT_AVAILABLE)
        else:
            assert partition["leader"] == leaders[p]
            produce_values(cluster, "durable", p, leaders[p], [f"during-{p}".encode()])

    cluster.brokers[victim].start()
    assert cluster.wait_for_metadata("durable", 6) == leaders
    assert all(cluster.partition_state("durable", p)["leader_epoch"] == epochs[p] + 2 for p in mine)
    for p, leader in leaders.items():
        expected = [f"before-{p}".encode()] + ([] if p in mine else [f"during-{p}".encode()])
        assert fetch_values(cluster, "durable", p, leader) == expected
    produce_values(cluster, "durable", mine[0], victim, [b"after"])
    assert fetch_values(cluster, "durable", mine[0], victim)[-1] == b"after"


def test_a_new_controller_takes_over_when_the_controller_dies(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, overrides=SHORT_SESSION)
    first = wait_until(cluster.controller_id, 10, message="a controller")
    epoch = cluster.controller_epoch()
    cluster.brokers[first].kill()
    second = wait_until(lambda: (c := cluster.controller_id()) not in (None, first) and c, 20,
                        message="another broker becoming the controller")
    assert cluster.controller_epoch() > epoch
    survivor = cluster.brokers[second]
    wait_until(lambda: metadata(survivor)["controller"] == second, 10, message="metadata naming the new controller")
    create_topic(survivor.bootstrap, "after-failover", partitions=4)
    leaders = cluster.wait_for_metadata("after-failover", 4)
    assert set(leaders.values()) == set(cluster.brokers) - {first}
    for p, leader in leaders.items():
        produce_values(cluster, "after-failover", p, leader, [b"v"])


def test_a_broker_whose_session_expires_registers_again_and_keeps_serving(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, overrides=SHORT_SESSION)
    create_topic(cluster.brokers[1].bootstrap, "expiring", partitions=3)
    leaders = cluster.wait_for_metadata("expiring", 3)
    victim = 2
    (mine,) = [p for p, leader in leaders.items() if leader == victim]
    produce_values(cluster, "expiring", mine, victim, [b"one"])
    memberships: list[set[int]] = []
    seen = threading.Event()

    def record(children: list[str]) -> None:
        memberships.append({int(c) for c in children})
        seen.set()
    cluster.zk.ChildrenWatch(layout.BROKER_IDS, record)
    wait_until(seen.is_set, 5, message="the membership watch")
    old_session = cluster.session_id(victim)

    cluster.expire_session(victim)
    wait_until(lambda: any(victim not in m for m in memberships), 20, message="the expired registration vanishing")
    wait_until(lambda: victim in memberships[-1], 20, message="the broker registering again")
    wait_until(lambda: cluster.session_id(victim) not in (None, old_session), 10, message="a new session")
    assert cluster.wait_for_metadata("expiring", 3) == leaders
    produce_values(cluster, "expiring", mine, victim, [b"two"])
    assert fetch_values(cluster, "expiring", mine, victim) == [b"one", b"two"]
    create_topic(cluster.brokers[victim].bootstrap, "created-after-expiry", partitions=3)
    cluster.wait_for_metadata("created-after-expiry", 3)


def test_brokers_keep_working_when_a_zookeeper_node_dies(zk_ensemble, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_ensemble.connect_string + "/ensemble-cluster", overrides=SHORT_SESSION)
    create_topic(cluster.brokers[1].bootstrap, "before-zk-loss", partitions=3)
    leaders = cluster.wait_for_metadata("before-zk-loss", 3)
    sessions = {i: cluster.session_id(i) for i in cluster.brokers}
    zk_ensemble.leader().kill()
    wait_until(zk_ensemble.find_leader, 20, message="a new ZooKeeper leader")
    for p, leader in leaders.items():
        produce_values(cluster, "before-zk-loss", p, leader, [b"still here"])
        assert fetch_values(cluster, "before-zk-loss", p, leader) == [b"still here"]
    create_topic(cluster.brokers[2].bootstrap, "after-zk-loss", partitions=3)
    for p, leader in cluster.wait_for_metadata("after-zk-loss", 3).items():
        produce_values(cluster, "after-zk-loss", p, leader, [b"new"])
    assert cluster.registered() == set(cluster.brokers)
    assert {i: cluster.session_id(i) for i in cluster.brokers} == sessions


def test_deleting_a_topic_through_any_broker_removes_it_everywhere(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect)
    create_topic(cluster.brokers[1].bootstrap, "doomed", partitions=3)
    leaders = cluster.wait_for_metadata("doomed", 3)
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.brokers[3].bootstrap, request_timeout_ms=15000)
    try:
        admin.delete_topics(["doomed"], timeout_ms=15000)
    finally:
        admin.close()
    assert cluster.zk.exists(layout.topic_path("doomed")) is None
    assert cluster.zk.get_children(layout.ADMIN_DELETE_TOPICS) == []
    wait_until(lambda: all(metadata(b, ["doomed"])["topics"]["doomed"]["error"] == UNKNOWN_TOPIC_OR_PARTITION
                           for b in cluster.live()), 10, message="every broker forgetting the topic")
    for p, leader in leaders.items():
        wait_until(lambda: not cluster.brokers[leader].partition_dir("doomed", p).exists(), 10,
                   message=f"the log of doomed-{p} being deleted")


def test_records_on_a_leader_carry_the_partition_leader_epoch(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, overrides=SHORT_SESSION)
    create_topic(cluster.brokers[1].bootstrap, "epochs", partitions=1)
    leader = cluster.wait_for_metadata("epochs", 1)[0]
    produce_values(cluster, "epochs", 0, leader, [b"first"])
    broker = cluster.brokers[leader]
    with wire.KafkaConnection(broker.host, broker.port) as conn:
        records = wire.fetch(conn, "epochs", 0, 0, max_wait_ms=0).records
    (batch,) = [header for _, header in iter_batches(records)]
    assert batch.partition_leader_epoch == cluster.partition_state("epochs", 0)["leader_epoch"] == 0


def test_sigterm_flushes_then_deregisters_at_once(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=2, overrides={"zookeeper.session.timeout.ms": 30000})
    create_topic(cluster.brokers[1].bootstrap, "graceful", partitions=2)
    leaders = cluster.wait_for_metadata("graceful", 2)
    (mine,) = [p for p, leader in leaders.items() if leader == 2]
    produce_values(cluster, "graceful", mine, 2, [b"flushed"])
    assert cluster.brokers[2].stop() == 0
    # Long before the 30 s session timeout: the session was closed, not abandoned.
    wait_until(lambda: cluster.registered() == {1}, 5, message="the registration vanishing on SIGTERM")
    wait_until(lambda: cluster.partition_state("graceful", mine)["leader"] == -1, 5, message="the partition offline")
    assert (cluster.brokers[2].log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    cluster.brokers[2].start()
    assert cluster.wait_for_metadata("graceful", 2) == leaders
    assert fetch_values(cluster, "graceful", mine, 2) == [b"flushed"]


def test_an_unreachable_zookeeper_is_a_clear_start_up_error(tmp_path):
    broker = BrokerProcess(tmp_path / "logs", overrides={"zookeeper.connect": f"127.0.0.1:{free_port()}/nowhere",
                                                         "zookeeper.connection.timeout.ms": 1000})
    try:
        broker.start()
    except BrokerError:
        pass
    else:
        raise AssertionError("a broker started without its ZooKeeper")
    finally:
        broker.kill()
    assert broker.returncode == 1
    assert "python -m broker: error: no ZooKeeper server" in broker.log_text()


def test_the_zookeeper_session_is_not_written_to_disk(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=1)
    broker = cluster.brokers[1]
    create_topic(broker.bootstrap, "anything", partitions=1)
    session = cluster.session_id(1)
    assert session is not None
    traces = {str(session).encode(), f"{session:x}".encode(), f"{session:#x}".encode()}
    for path in broker.log_dir.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert not any(trace in content for trace in traces), f"{path} holds the broker's ZooKeeper session"


def test_a_topic_too_big_for_zookeeper_is_refused_at_once_and_others_are_served(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=1)
    broker = cluster.brokers[1]
    with wire.KafkaConnection(broker.host, broker.port, timeout=10.0) as conn:
        code, message = create_topics_result(conn, "enormous", 100_000, timeout_ms=30000)
        assert code == INVALID_PARTITIONS and message and "ZooKeeper" in message
        assert create_topics_result(conn, "ordinary", 2, timeout_ms=30000) == (0, None)
    assert cluster.zk.get_children(layout.ADMIN_CREATE_TOPICS) == []
    cluster.wait_for_metadata("ordinary", 2)


def test_a_log_dir_of_one_cluster_is_never_joined_to_another(zk_connect, broker_cluster_factory):
    cluster = broker_cluster_factory(zk_connect, size=1)
    broker = cluster.brokers[1]
    create_topic(broker.bootstrap, "precious", partitions=1)
    produce_values(cluster, "precious", 0, 1, [b"kept"])
    broker.stop()
    # The same log dir pointed at another chroot (a new, empty cluster): joining it would delete "precious".
    stray = BrokerProcess(broker.log_dir, port=broker.port, log_path=broker.log_dir.parent / "stray.log",
                          overrides={"zookeeper.connect": f"{zk_connect}-elsewhere", "broker.id": 1})
    try:
        stray.start()
    except BrokerError:
        pass
    else:
        raise AssertionError("a broker joined another cluster with this log dir")
    finally:
        stray.kill()
    assert stray.returncode not in (0, None)
    assert "does not match cluster.id" in stray.log_text()
    assert any(broker.log_dir.glob("precious-0/*.log"))
    broker.start()
    assert fetch_values(cluster, "precious", 0, 1) == [b"kept"]

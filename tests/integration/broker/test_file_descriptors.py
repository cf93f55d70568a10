"""File descriptors: a partition with hundreds of segments costs about one descriptor per segment, so
a broker under a low RLIMIT_NOFILE keeps accepting connections and serving fetches of old segments; the
soft limit is raised to the hard one at start.

Soft and hard limits are both set low here, so raising the soft limit cannot help: what is measured is
the broker's own descriptor use.
"""

from __future__ import annotations

from pipeline.records.batch import iter_batches
from pipeline.records import encode_batch
from tests.support.clients import create_topic
from tests.support.wire import KafkaConnection, api_versions, fetch, produce

LIMIT = 256
SEGMENTS = 200
TOPIC = "tiny-segments"


def read_from(conn: KafkaConnection, offset: int) -> int:
    """The offset after the batches one Fetch returns from ``offset``."""
    result = fetch(conn, TOPIC, 0, offset, max_wait_ms=0)
    assert result.error_code == 0, result
    headers = [header for _, header in iter_batches(result.records)]
    assert headers and headers[0].base_offset <= offset < headers[0].next_offset
    return headers[-1].next_offset


def read_everything(broker) -> None:
    with KafkaConnection(broker.host, broker.port) as conn:
        offset = 0
        while offset < SEGMENTS:
            offset = read_from(conn, offset)
        assert offset == SEGMENTS


def test_hundreds_of_segments_under_a_low_open_files_limit(broker_factory):
    broker = broker_factory(overrides={"log.segment.bytes": 100, "num.partitions": 1},
                            open_files_limit=(LIMIT, LIMIT))
    create_topic(broker.bootstrap, TOPIC)
    with KafkaConnection(broker.host, broker.port) as conn:
        for i in range(SEGMENTS):
            result = produce(conn, TOPIC, 0, encode_batch([b"record %03d" % i]))
            assert (result.error_code, result.base_offset) == (0, i)
    assert len(broker.segment_files(TOPIC, 0)) >= SEGMENTS
    assert broker.open_files() < SEGMENTS + 40
    clients = [KafkaConnection(broker.host, broker.port) for _ in range(10)]
    try:
        for client in clients:
            assert api_versions(client)
        read_everything(broker)
        with KafkaConnection(broker.host, broker.port) as conn:
            assert read_from(conn, 17) == 18
    finally:
        for client in clients:
            client.close()
    assert broker.stop() == 0, broker.log_tail()
    broker.start()
    read_everything(broker)
    assert broker.open_files() < SEGMENTS + 40


def test_the_soft_open_files_limit_is_raised_to_the_hard_one(broker_factory):
    broker = broker_factory(open_files_limit=(LIMIT, 4096))
    limits = open(f"/proc/{broker.pid}/limits").read()
    (line,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert line.split()[3:5] == ["4096", "4096"]


def test_partitions_beyond_what_the_open_files_limit_allows_are_refused(broker_factory):
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import InvalidPartitionsError

    # 600 descriptors: at most 600 // 2 // 3 = 100 partitions.
    broker = broker_factory(open_files_limit=(600, 600))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        try:
            admin.create_topics([NewTopic("too-many", 150, 1)])
            raise AssertionError("150 partitions under a 600-descriptor limit should be refused")
        except InvalidPartitionsError as exc:
            assert "open-files limit" in str(exc)
        admin.create_topics([NewTopic("fits", 60, 1)])
        try:
            admin.create_partitions({"fits": NewPartitions(120)})
            raise AssertionError("growing to 120 partitions should be refused")
        except InvalidPartitionsError:
            pass
        admin.create_partitions({"fits": NewPartitions(90)})
    finally:
        admin.close()
    assert sorted(p.name for p in broker.log_dir.iterdir() if p.name.startswith("too-many")) == []
    assert len([p for p in broker.log_dir.iterdir() if p.name.startswith("fits-")]) == 90
    with KafkaConnection(broker.host, broker.port) as conn:
        assert api_versions(conn)
        assert produce(conn, "fits", 89, encode_batch([b"still served"])).error_code == 0

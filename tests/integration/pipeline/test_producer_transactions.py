"""Our transactional producer and read_committed consumers against a real broker.

Commits and aborts across partitions and topics, in sync and async mode: read_committed readers (SimpleConsumer,
Consumer, StaticConsumerConnector) see exactly the committed records, read_uncommitted ones every record; a zombie is fenced by a new
instance with the same transactional id; offsets sent with a transaction become the group's only when it commits.
"""

from __future__ import annotations

import logging

import pytest

from pipeline.cli import main as cli_main
from pipeline.client.admin import AdminClient
from pipeline.client.consumer import Consumer
from pipeline.client.consumer_stream import ConsumerTimeout
from pipeline.client.errors import ProducerFencedError, TransactionAbortableError, TransactionStateError
from pipeline.client.producer import ProduceError, Producer, ProducerData
from pipeline.client.offset_store import FileOffsetStore
from pipeline.client.simple_consumer import FetchRequest, SimpleConsumer
from pipeline.client.static_connector import StaticConsumerConnector
from pipeline.client.topic_filter import Whitelist
from tests.support.clients import create_topic
from tests.support.polling import wait_until

TIMEOUT = 30.0


def producer(broker, transactional_id: str, mode: str = "sync", **extra: object) -> Producer:
    return Producer({"metadata.broker.list": broker.bootstrap, "transactional.id": transactional_id,
                     "producer.type": mode, "queue.time": 5, "batch.size": 10, **extra})


def settled(broker, topic: str, partition: int) -> None:
    """Wait until no transaction is open in the partition (LSO = high watermark): EndTxn answers once the
    outcome is decided, and the markers are written after, as in Kafka."""
    with SimpleConsumer(broker.host, broker.port) as consumer:
        wait_until(lambda: consumer.get_offsets_before(topic, partition, -1, 1, isolation_level="read_committed")
                   == consumer.get_offsets_before(topic, partition, -1, 1), timeout=TIMEOUT,
                   message=f"{topic}-{partition} still has an open transaction")


def read_all(broker, topic: str, partition: int, isolation_level: str) -> list[bytes]:
    """Every record a reader of this isolation level sees, from the start to where it ends (LSO or HW)."""
    values: list[bytes] = []
    with SimpleConsumer(broker.host, broker.port, isolation_level=isolation_level) as consumer:
        end = consumer.get_offsets_before(topic, partition, -1, 1)[0]
        offset = 0
        while offset < end:
            result = consumer.fetch(FetchRequest(topic, partition, offset, 1 << 20))
            values.extend(r.value for r in result)
            assert result.next_offset > offset, "the position must move past skipped and control batches"
            offset = result.next_offset
    return values


def send_values(p: Producer, topic: str, partition: int, values: list[bytes]) -> None:
    for value in values:
        p.send(ProducerData(topic, None, [value], partition=partition))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_commit_and_abort_across_partitions_and_topics(broker, mode: str, caplog) -> None:
    topics = [f"tx-a-{mode}", f"tx-b-{mode}"]
    for topic in topics:
        create_topic(broker.bootstrap, topic, 2)
    committed: dict[tuple[str, int], list[bytes]] = {(t, p): [] for t in topics for p in (0, 1)}
    everything: dict[tuple[str, int], list[bytes]] = {(t, p): [] for t in topics for p in (0, 1)}
    with producer(broker, f"tx-{mode}", mode) as p:
        p.init_transactions(TIMEOUT)
        assert p.transaction_state == "READY"
        for round_ in range(6):
            p.begin_transaction()
            for topic in topics:
                for partition in (0, 1):
                    values = [b"%s-%d-r%d-%d" % (topic.encode(), partition, round_, i) for i in range(3)]
                    send_values(p, topic, partition, values)
                    everything[(topic, partition)] += values
                    if round_ % 2 == 0:
                        committed[(topic, partition)] += values
            if round_ % 2 == 0:
                p.commit_transaction(TIMEOUT)
            else:
                p.abort_transaction(TIMEOUT)
            assert p.transaction_state == "READY"
    for (topic, partition), values in committed.items():
        settled(broker, topic, partition)
        assert read_all(broker, topic, partition, "read_committed") == values
        uncommitted = read_all(broker, topic, partition, "read_uncommitted")
        if mode == "sync":
            assert uncommitted == everything[(topic, partition)]
        else:
            # An async abort drops what is still queued (as Kafka's does): the aborted rounds may be partly unsent.
            assert set(values) <= set(uncommitted) <= set(everything[(topic, partition)])
    # What an abort drops is expected: no error line for it.
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pipeline.client") and r.levelno >= logging.ERROR] == []
    # The plain Consumer, read_committed, sees the same.
    with Consumer({"metadata.broker.list": broker.bootstrap, "isolation.level": "read_committed",
                   "consumer.timeout.ms": 1500}, partitions={(t, p): 0 for t, p in committed}) as consumer:
        seen: dict[tuple[str, int], list[bytes]] = {key: [] for key in committed}
        for message in consumer:
            seen[(message.topic, message.partition)].append(message.value)
    assert seen == committed


def test_open_transaction_is_invisible_to_read_committed_until_it_commits(broker) -> None:
    topic = "tx-open"
    create_topic(broker.bootstrap, topic, 1)
    with producer(broker, "tx-open") as p:
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
        send_values(p, topic, 0, [b"committed-before"])
        p.commit_transaction(TIMEOUT)
        settled(broker, topic, 0)
        p.begin_transaction()
        send_values(p, topic, 0, [b"open-1", b"open-2"])
        with SimpleConsumer(broker.host, broker.port) as consumer:
            lso = consumer.get_offsets_before(topic, 0, -1, 1, isolation_level="read_committed")[0]
            hw = consumer.get_offsets_before(topic, 0, -1, 1)[0]
            assert lso == 2 and hw == 4  # record, commit marker | open records
            fetched = consumer.fetch(FetchRequest(topic, 0, 0, 1 << 20), isolation_level="read_committed")
            assert [r.value for r in fetched] == [b"committed-before"]
            assert fetched.last_stable_offset == 2
        assert read_all(broker, topic, 0, "read_uncommitted") == [b"committed-before", b"open-1", b"open-2"]
        p.commit_transaction(TIMEOUT)
    settled(broker, topic, 0)
    assert read_all(broker, topic, 0, "read_committed") == [b"committed-before", b"open-1", b"open-2"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_zombie_is_fenced_by_a_new_instance_with_the_same_id(broker, mode: str) -> None:
    topic = f"tx-zombie-{mode}"
    create_topic(broker.bootstrap, topic, 1)
    zombie = producer(broker, f"zombie-{mode}", mode)
    try:
        zombie.init_transactions(TIMEOUT)
        zombie.begin_transaction()
        send_values(zombie, topic, 0, [b"zombie-open"])
        zombie.flush(TIMEOUT)
        with producer(broker, f"zombie-{mode}", mode) as successor:
            successor.init_transactions(TIMEOUT)  # aborts the zombie's open transaction
            successor.begin_transaction()
            send_values(successor, topic, 0, [b"successor"])
            successor.commit_transaction(TIMEOUT)
        with pytest.raises((ProducerFencedError, ProduceError)):
            send_values(zombie, topic, 0, [b"zombie-late"])
            zombie.commit_transaction(TIMEOUT)
        with pytest.raises(ProducerFencedError):
            zombie.commit_transaction(TIMEOUT)
        assert zombie.transaction_state == "FATAL_ERROR"
    finally:
        zombie.close(5)
    settled(broker, topic, 0)
    assert read_all(broker, topic, 0, "read_committed") == [b"successor"]


def test_offsets_sent_with_a_transaction_reach_the_group_only_on_commit(broker, capsys) -> None:
    topic = "tx-offsets"
    create_topic(broker.bootstrap, topic, 1)
    create_topic(broker.bootstrap, "input", 1)
    admin = AdminClient(broker.bootstrap)
    try:
        with producer(broker, "tx-offsets") as p:
            p.init_transactions(TIMEOUT)
            p.begin_transaction()
            send_values(p, topic, 0, [b"x"])
            p.send_offsets_to_transaction({("input", 0): 17}, "etl-group", {("input", 0): "m"}, TIMEOUT)
            p.abort_transaction(TIMEOUT)
            assert admin.fetch_offsets("etl-group").get(("input", 0)) is None
            p.begin_transaction()
            send_values(p, topic, 0, [b"y"])
            p.send_offsets_to_transaction({("input", 0): 42}, "etl-group", None, TIMEOUT)
            p.commit_transaction(TIMEOUT)
        wait_until(lambda: ("input", 0) in admin.fetch_offsets("etl-group"), timeout=TIMEOUT,
                   message="the committed transaction's offsets never reached the group")
        assert admin.fetch_offsets("etl-group")[("input", 0)].offset == 42
        (described,) = admin.describe_transactions(["tx-offsets"])
        assert described.state == "CompleteCommit" and described.producer_id >= 0
        assert "tx-offsets" in {t.transactional_id for t in admin.list_transactions()}
    finally:
        admin.close()
    capsys.readouterr()
    assert cli_main(["--bootstrap-server", broker.bootstrap, "transactions", "list"]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert ["tx-offsets", str(described.coordinator_id), str(described.producer_id), "CompleteCommit"] in listed
    assert cli_main(["transactions", "describe", "--transactional-id", "tx-offsets",
                     "--bootstrap-server", broker.bootstrap]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState"]
    assert row.split()[1] == "tx-offsets" and row.split()[4] == "CompleteCommit"
    settled(broker, topic, 0)
    assert read_all(broker, topic, 0, "read_committed") == [b"y"]


def test_send_outside_a_transaction_and_a_failed_send_inside_one(broker) -> None:
    topic = "tx-errors"
    create_topic(broker.bootstrap, topic, 1)
    with producer(broker, "tx-errors", "sync", **{"delivery.timeout.ms": 12000}) as p:
        p.init_transactions(TIMEOUT)
        with pytest.raises(TransactionStateError):
            p.send(ProducerData(topic, None, [b"outside"]))
        p.begin_transaction()
        send_values(p, topic, 0, [b"kept-out"])
        with pytest.raises(ProduceError):
            p.send(ProducerData(topic, None, [b"z" * (2 << 20)], partition=0))  # above max.request.size
        with pytest.raises(TransactionAbortableError):
            p.commit_transaction(TIMEOUT)
        p.abort_transaction(TIMEOUT)
        p.begin_transaction()
        send_values(p, topic, 0, [b"after-abort"])
        p.commit_transaction(TIMEOUT)
    settled(broker, topic, 0)
    assert read_all(broker, topic, 0, "read_committed") == [b"after-abort"]


def test_static_connector_reads_committed_only(broker, tmp_path) -> None:
    topic = "tx-static"
    create_topic(broker.bootstrap, topic, 2)
    with producer(broker, "tx-static") as p:
        p.init_transactions(TIMEOUT)
        for round_, commit in enumerate([False, True, False, True]):
            p.begin_transaction()
            for partition in (0, 1):
                send_values(p, topic, partition, [b"r%d-p%d-%d" % (round_, partition, i) for i in range(4)])
            p.commit_transaction(TIMEOUT) if commit else p.abort_transaction(TIMEOUT)
    for partition in (0, 1):
        settled(broker, topic, partition)
    expected = sorted(b"r%d-p%d-%d" % (r, p, i) for r in (1, 3) for p in (0, 1) for i in range(4))
    connector = StaticConsumerConnector({"metadata.broker.list": broker.bootstrap, "auto.offset.reset": "smallest",
                                         "isolation.level": "read_committed", "consumer.timeout.ms": 1500},
                                        FileOffsetStore(tmp_path / "offsets"))
    try:
        (stream,) = connector.create_message_streams_by_filter(Whitelist(topic), 1)
        seen = []
        with pytest.raises(ConsumerTimeout):
            for record in stream:
                seen.append(record.value)
        seen.sort()
    finally:
        connector.shutdown()
    assert seen == expected


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_send_with_an_unknown_outcome_aborts_and_the_next_transaction_starts_on_a_new_epoch(proxied_broker,
                                                                                           mode: str) -> None:
    """Every answer to a batch is lost, through its retries: the broker stored it, the producer cannot know. The
    transaction can only abort; a new epoch then numbers the partition from 0 again and the next one commits."""
    broker, proxy = proxied_broker
    topic = f"tx-unknown-{mode}"
    create_topic(proxy.address, topic, 1)
    config = {"metadata.broker.list": proxy.address, "transactional.id": f"tx-unknown-{mode}", "producer.type": mode,
              "message.send.max.retries": 2, "retry.backoff.ms": 50, "queue.time": 5}
    with Producer(config) as p:
        p.init_transactions(TIMEOUT)
        with AdminClient(proxy.address) as admin:
            (before,) = admin.describe_transactions([config["transactional.id"]])
        p.begin_transaction()
        proxy.lose_produce_responses(3)
        try:
            send_values(p, topic, 0, [b"lost-answer"])
            p.flush(TIMEOUT)
        except ProduceError:
            assert mode == "sync"
        with pytest.raises(TransactionAbortableError):
            p.commit_transaction(TIMEOUT)
        p.abort_transaction(TIMEOUT)
        with AdminClient(proxy.address) as admin:
            (after,) = admin.describe_transactions([config["transactional.id"]])
        assert (after.producer_id, after.producer_epoch) == (before.producer_id, before.producer_epoch + 1)
        p.begin_transaction()
        send_values(p, topic, 0, [b"next"])
        p.commit_transaction(TIMEOUT)
    settled(broker, topic, 0)
    # The broker stored the batch once (retries are duplicates of it); the abort hides it.
    assert read_all(broker, topic, 0, "read_uncommitted") == [b"lost-answer", b"next"]
    assert read_all(broker, topic, 0, "read_committed") == [b"next"]

"""The transactional producer without a broker: configuration, request bytes, batch attributes, call order."""

from __future__ import annotations

import pytest

from pipeline.client.errors import TransactionStateError
from pipeline.client.producer import Producer, ProducerData
from pipeline.client.producer_config import ProducerConfig
from pipeline.client.sender import encode_produce_request
from pipeline.config import ConfigError
from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import encode_request
from pipeline.records import decode_batch, encode_batch
from pipeline.records.batch import parse_header, with_producer_fields

BROKERS = {"metadata.broker.list": "127.0.0.1:1"}


def test_a_transactional_id_implies_idempotence_and_acks_all() -> None:
    config = ProducerConfig({**BROKERS, "transactional.id": "tx"})
    assert config.transactional_id == "tx" and config.idempotent and config.acks == -1
    assert config.transaction_timeout_ms == 60000 and config.max_block_s == 60.0
    assert ProducerConfig(BROKERS).transactional_id is None


@pytest.mark.parametrize("values, message", [
    ({"transactional.id": "tx", "enable.idempotence": "false"}, "enable.idempotence"),
    ({"transactional.id": "tx", "acks": "1"}, "acks"),
    ({"transactional.id": "tx", "transaction.timeout.ms": "0"}, "transaction.timeout.ms"),
])
def test_transactional_config_errors(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig({**BROKERS, **values})


@pytest.mark.parametrize("version", [3, 8])
def test_produce_request_names_the_transactional_id(version: int) -> None:
    batch = encode_batch([b"a"])
    body = {"transactional_id": "tx-9", "acks": -1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": batch}]}]}
    expected = encode_request(ApiKey.PRODUCE, version, 5, "c", body)
    assert encode_produce_request(version, 5, "c", -1, 1000, {"t": [(2, batch)]}, "tx-9") == expected


def test_with_producer_fields_sets_the_transactional_bit_and_a_valid_crc() -> None:
    batch = encode_batch([b"x", b"y"], compression=1)
    plain = parse_header(with_producer_fields(batch, 5, 2, 10))
    assert not plain.is_transactional
    marked = with_producer_fields(batch, 5, 2, 10, transactional=True)
    header, records = decode_batch(marked)  # checks the CRC
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.compression) == (5, 2, 10, 1)
    assert [r.value for r in records] == [b"x", b"y"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_transactional_calls_in_the_wrong_order_are_refused_without_a_broker(mode: str) -> None:
    producer = Producer({**BROKERS, "transactional.id": "tx", "producer.type": mode})
    try:
        assert producer.transaction_state == "UNINITIALIZED"
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.send(ProducerData("t", None, [b"v"]))
        with pytest.raises(TransactionStateError, match="init_transactions"):
            producer.begin_transaction()
        with pytest.raises(TransactionStateError):
            producer.commit_transaction(timeout=0.1)
    finally:
        producer.close(timeout=1)


def test_a_producer_without_transactional_id_refuses_transactional_calls() -> None:
    with Producer(BROKERS) as producer:
        assert producer.transaction_state is None
        for call in (producer.init_transactions, producer.begin_transaction, producer.commit_transaction,
                     producer.abort_transaction):
            with pytest.raises(TransactionStateError, match="transactional.id"):
                call()

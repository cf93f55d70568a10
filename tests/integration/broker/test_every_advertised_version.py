"""Every version of every API the broker advertises answers a request generated from the message declarations
(tests/support/declared_requests.py), so a version cannot be advertised untested: JoinGroup v0, which lacks the
rebalance timeout, closed the connection (issue 26)."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest

from pipeline.protocol.api_keys import ApiKey
from pipeline.protocol.codec import decode_response
from tests.support import BrokerProcess, wire
from tests.support.declared_requests import advertised, minimal_body, populated_body, request_frame

CASES = list(advertised())


@pytest.fixture(scope="module")
def declared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("declared")
    broker = BrokerProcess(base / "logs", log_path=base / "broker.log")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def answer(broker: BrokerProcess, api_key: int, version: int, body: dict) -> dict:
    """Send the request on a new connection and decode its answer; fails if the broker closes instead."""
    with socket.create_connection((broker.host, broker.port), timeout=15) as sock:
        sock.sendall(request_frame(api_key, version, 7, body))
        try:
            frame = wire.read_frame(sock)
        except ConnectionError as exc:
            pytest.fail(f"{ApiKey(api_key).name} v{version} closed the connection ({exc}):\n{broker.log_tail(10)}")
    correlation_id, decoded = decode_response(api_key, version, frame)
    assert correlation_id == 7
    return decoded


def test_every_api_is_advertised_with_its_declared_versions(declared_broker):
    with wire.KafkaConnection(declared_broker.host, declared_broker.port) as conn:
        assert sorted((key, version) for key, (low, high) in wire.api_versions(conn).items()
                      for version in range(low, high + 1)) == CASES


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{ApiKey(k).name}-v{v}" for k, v in CASES])
def test_a_minimal_request_is_answered(declared_broker, api_key, version):
    answer(declared_broker, api_key, version, minimal_body(api_key, version))


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{ApiKey(k).name}-v{v}" for k, v in CASES])
def test_a_request_with_one_of_each_entry_is_answered(declared_broker, api_key, version):
    answer(declared_broker, api_key, version, populated_body(api_key, version))
